"""Read YAML and JSON into a Document with positions. Never raises on bad input:
every failure becomes a finding at the line and column where it was found."""

from __future__ import annotations

import json
import os
import re
import stat

from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.findings import Finding, Severity

MAX_BYTES = 16 * 1024 * 1024  # a config is kilobytes; beyond this it is not one
# Bound on keys and values read (YAML: events parsed, then values built with alias expansion;
# JSON: values). verl's whole composed ppo_trainer config holds about 2 100 keys and values;
# PyYAML composes and builds about 10 000 in a second.
MAX_NODES = 10_000
MAX_DEPTH = 200
_DEPTH_HINT = "nest less deeply; a config holds at most a few thousand values"
# Python refuses to turn an int of more than 4300 decimal digits into text; a hex or base-60
# YAML integer escapes that limit when it is built, and then breaks every message that shows it.
_MAX_INT_BITS = 10_000


class _Budget(Exception):
    def __init__(self, message: str, line: int = 1, col: int = 1):
        super().__init__(message)
        self.line, self.col = line, col


def _err(file: str, rule: str, message: str, line: int = 1, col: int = 1, hint: str = "",
         severity: Severity = Severity.ERROR) -> Finding:
    return Finding(rule, severity, message, file, max(1, line), max(1, col), "", hint)


def read_text(file: str, what: str = "file") -> tuple[str | None, list[Finding]]:
    """The file's text, or None and a finding saying why it cannot be read."""
    try:
        st = os.stat(file)
    except FileNotFoundError:
        return None, [_err(file, "file-not-found", f"{what} does not exist")]
    except OSError as e:  # symlink loop, name too long, permission on a parent
        return None, [_err(file, "file-unreadable", f"{what} cannot be read: {e.strerror or e}")]
    except ValueError:  # os.stat refuses a path with a NUL character
        return None, [_err(file, "file-unreadable", f"{what} cannot be read: its path holds a NUL character")]
    if stat.S_ISDIR(st.st_mode):
        return None, [_err(file, "file-is-directory", f"{what} is a directory, not a file")]
    if not stat.S_ISREG(st.st_mode):
        return None, [_err(file, "file-not-regular", f"{what} is not a regular file (a FIFO, socket or device)")]
    if st.st_size > MAX_BYTES:
        return None, [_err(file, "file-too-large",
                           f"{what} is {st.st_size} bytes, over the {MAX_BYTES} byte limit for a config file")]
    try:
        with open(file, "rb") as fh:
            chunks, size = [], 0
            while size <= MAX_BYTES:  # in chunks: read(MAX_BYTES + 1) allocates 16 MB for any file
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            raw = b"".join(chunks)
    except OSError as e:
        return None, [_err(file, "file-unreadable", f"{what} cannot be read: {e.strerror or e}",
                           hint="check the file's permissions for the user that runs the job")]
    if size > MAX_BYTES:  # it grew, or it is a /proc-like file that reports size 0
        return None, [_err(file, "file-too-large", f"{what} holds over {MAX_BYTES} bytes, the limit for a config file")]
    return decode(file, raw)


def decode(file: str, raw: bytes) -> tuple[str | None, list[Finding]]:
    if b"\x00" in raw[:8192]:
        return None, [_err(file, "parse-error", "binary file: it holds NUL bytes, not text")]
    if raw.startswith(b"\xef\xbb\xbf"):
        if file.lower().endswith(".json"):  # msprobe opens config.json as utf-8, and json.load refuses a BOM
            return None, [_err(file, "parse-error", "starts with a UTF-8 byte order mark (BOM): msprobe reads "
                               "config.json as UTF-8 and json.load refuses it",
                               hint="save the file as UTF-8 without a BOM")]
        raw = raw[3:]
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError as e:
        head = raw[:e.start]
        line = head.count(b"\n") + 1
        col = e.start - (head.rfind(b"\n") + 1) + 1
        return None, [_err(file, "parse-error", f"not UTF-8 text: byte 0x{raw[e.start]:02x} cannot be decoded",
                           line, col, hint="save the file as UTF-8")]


# ---------------------------------------------------------------- YAML

def load_yaml(file: str, text: str | None = None) -> Document:
    doc = Document(file, kind="yaml")
    if text is None:
        text, errs = read_text(file)
        if text is None:
            doc.ok, doc.findings = False, errs
            return doc
    from verl_pdbg_conf.core import fast_yaml

    fast = fast_yaml.load(file, text, MAX_NODES, MAX_DEPTH)  # plain confs, without importing yaml
    if fast is not None:
        return fast
    import yaml

    loader_cls = _conf_loader(yaml)
    try:
        _precheck_events(yaml, loader_cls, text)
        if len(text) <= _PYYAML_SCAN_MAX and re.search(_PYYAML_REFUSES, text):
            for _ in yaml.scan(text, Loader=yaml.SafeLoader):  # Hydra scans with PyYAML: refused there, refused here
                pass
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(str(x) for x in (e.context, e.problem) if x)
        doc.ok = False
        line, col = _in_text(text, mark.line + 1, mark.column + 1) if mark else (1, 1)
        if "maximum nesting depth" in msg:
            # PyYAML 6.0.4's libyaml scans a run of '[' ahead and stops at its own limit (1000 levels)
            # before our event walk sees level MAX_DEPTH: the same finding, at the place libyaml stopped.
            doc.findings.append(_err(file, "parse-error", f"YAML nests more than {MAX_DEPTH} levels deep", line, col,
                                     hint=_DEPTH_HINT))
            return doc
        tab = "'\\t'" in msg or "\t" in msg
        doc.findings.append(_err(file, "parse-error", f"YAML does not parse: {msg}", line, col,
                                 hint="replace the tab with spaces: the YAML reader Hydra uses allows no tab here"
                                 if tab else "fix the YAML syntax at this position"))
        return doc
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        doc.ok = False
        doc.findings.append(_err(file, "parse-error", f"YAML does not parse: {e}"))
        return doc
    except _Budget as e:
        doc.ok = False
        doc.findings.append(_err(file, "parse-error", str(e), e.line, e.col,
                                 hint=_DEPTH_HINT))
        return doc
    if node is None:
        doc.data = None
        return doc
    builder = _YamlBuilder(doc)
    try:
        doc.data = builder.build(node, ())
    except _Budget as e:
        doc.ok = False
        doc.data = None
        doc.findings.append(_err(file, "parse-error", str(e), e.line, e.col,
                                 hint="expand fewer aliases or nest less deeply"))
    return doc


# The full path's patterns are compiled on its first use (re caches them), not at import: a conf that
# fast_yaml reads never needs them. OmegaConf's float pattern: it also reads `1e-5` (no dot) as a
# float, which YAML 1.1 does not.
_OMEGACONF_FLOAT = r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$"""
_LOADER = None
# Where libyaml accepts what PyYAML's scanner (Hydra's) refuses: a tab after `key:`, an anchor or a
# comma, and `|#` / `>#` (a comment right after a block scalar indicator). Such a text is scanned
# with PyYAML too, up to a size: PyYAML scans long lines at about 0.5 MB/s.
_PYYAML_REFUSES = r"\t|[|>][-+0-9]*#"
_PYYAML_SCAN_MAX = 256 * 1024


def _conf_loader(yaml):
    """libyaml's safe loader, typing plain scalars the way Hydra's OmegaConf loader does (what verl
    reads a conf with): `2024-01-01` stays a string (no timestamps) and `1e-5` is a float."""
    global _LOADER
    if _LOADER is None:
        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        cls = type("ConfLoader", (base,), {})
        cls.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_OMEGACONF_FLOAT, re.X),
                                  list("-+0123456789."))
        cls.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
                                       for k, v in cls.yaml_implicit_resolvers.items()}
        _LOADER = cls
    return _LOADER


_STR = "tag:yaml.org,2002:str"
_YAML_BREAK = "\r\n|[\r\n\x85\u2028\u2029]"


def _in_text(text: str, line: int, col: int) -> tuple[int, int]:
    """libyaml marks the end of a stream that lacks a final line break one line past the end
    (`a: [` fails at 2:1): move such a mark to the end of the last line, as PyYAML reports it."""
    starts = [0] + [m.end() for m in re.finditer(_YAML_BREAK, text)]
    if line <= len(starts):
        return line, col
    return len(starts), len(text) - starts[-1] + 1


def _precheck_events(yaml, loader_cls, text: str) -> None:
    """Walk the parser's events (an iterative state machine) before composing: libyaml's
    composer recurses in C and overflows the stack (a segfault, not an exception) on about
    40 000 nested collections, which `- ` * 40000 (80 KB) or `[` * 50000 reaches. Stop at
    MAX_DEPTH levels or MAX_NODES events, so composing is bounded in depth and time too."""
    start = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    end = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    node = start + (yaml.ScalarEvent, yaml.AliasEvent)
    parser = loader_cls(text)
    depth = count = 0
    try:
        while parser.check_event():
            ev = parser.get_event()
            if isinstance(ev, node):
                count += 1
                if count > MAX_NODES:
                    m = ev.start_mark
                    raise _Budget(f"YAML holds more than {MAX_NODES} keys and values: too large for a config",
                                  m.line + 1, m.column + 1)
            if isinstance(ev, start):
                depth += 1
                if depth > MAX_DEPTH:
                    m = ev.start_mark
                    raise _Budget(f"YAML nests more than {MAX_DEPTH} levels deep", m.line + 1, m.column + 1)
            elif isinstance(ev, end):
                depth -= 1
    finally:
        parser.dispose()


class _YamlBuilder:
    def __init__(self, doc: Document):
        import yaml

        self.yaml = yaml
        self.doc = doc
        self.count = 0
        self.constructor = yaml.constructor.SafeConstructor()

    def build(self, node, path, depth=0, stack=()):
        yaml = self.yaml
        self.count += 1
        m = node.start_mark
        if self.count > MAX_NODES:
            raise _Budget(f"YAML expands to more than {MAX_NODES} values (an alias bomb?)", m.line + 1, m.column + 1)
        if depth > MAX_DEPTH or id(node) in stack:
            raise _Budget("YAML nests too deeply or refers to itself through an alias", m.line + 1, m.column + 1)
        self.doc.values.setdefault(path, (m.line + 1, m.column + 1))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        stack = stack + (id(node),)
        if isinstance(node, yaml.SequenceNode):
            self.check_tag(node, "tag:yaml.org,2002:seq", path)
            return [self.build(n, path + (i,), depth + 1, stack) for i, n in enumerate(node.value)]
        self.check_tag(node, "tag:yaml.org,2002:map", path)
        out: dict = {}
        explicit: dict = {}  # key -> tag of the keys written in this mapping (a merged `<<:` key is overridable)
        for k_node, v_node in node.value:
            if k_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`
                merged = self.build(v_node, path, depth + 1, stack)
                for src in merged if isinstance(merged, list) else [merged]:
                    if isinstance(src, dict):
                        for k, v in src.items():
                            out.setdefault(k, v)
                continue
            if not isinstance(k_node, yaml.ScalarNode):
                self.doc.findings.append(self.at(k_node, "yaml-key", Severity.ERROR,
                                                 "a mapping key must be a plain scalar", path))
                continue
            key = self.scalar(k_node, path)
            key = key if isinstance(key, (str, int)) and not isinstance(key, bool) else str(key)
            kp = path + (key,)
            if key in explicit:
                first = self.doc.keys.get(kp, (0, 0))[0]
                if explicit[key] == k_node.tag == _STR:
                    # Hydra loads confs with OmegaConf's YAML loader, which refuses a duplicate string key.
                    self.doc.findings.append(self.at(
                        k_node, "duplicate-key", Severity.ERROR,
                        f"key '{key}' appears twice (first at line {first}): Hydra refuses to load the file "
                        "('found duplicate key')", kp, hint="remove one of them"))
                else:  # OmegaConf checks string keys only: `1: a` then `1: b` loads, the last one wins
                    self.doc.findings.append(self.at(
                        k_node, "duplicate-key", Severity.WARNING,
                        f"key '{key}' appears twice (first at line {first}); the last one wins", kp,
                        hint="remove one of them"))
            explicit[key] = k_node.tag
            km = k_node.start_mark
            self.doc.keys[kp] = (km.line + 1, km.column + 1)
            self.doc.values.pop(kp, None)
            out[key] = self.build(v_node, kp, depth + 1, stack)
        return out

    def scalar(self, node, path):
        if node.tag == "tag:yaml.org,2002:str":  # most scalars; what the constructor would return
            return node.value
        try:
            value = self.constructor.construct_object(node, deep=True)
            if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:  # 0x..., 0o..., base 60
                raise ValueError(f"an integer of {value.bit_length()} bits: too large to print in decimal")
            return value
        except Exception as e:  # noqa: BLE001 - any constructor failure (`!!bool maybe` is a KeyError)
            problem = getattr(e, "problem", None) or str(e)
            self.doc.findings.append(self.at(node, "yaml-tag", Severity.ERROR,
                                             f"value cannot be read safely: {problem}", path,
                                             hint="remove the tag; configs hold plain strings, numbers, "
                                                  "booleans, lists and mappings"))
            return node.value

    def check_tag(self, node, expected, path):
        if node.tag != expected:
            self.doc.findings.append(self.at(node, "yaml-tag", Severity.ERROR,
                                             f"tag {node.tag} is not allowed in a config", path,
                                             hint="remove the tag"))

    def at(self, node, rule, severity, message, path, hint=""):
        from verl_pdbg_conf.core.findings import format_path

        m = node.start_mark
        return Finding(rule, severity, message, self.doc.file, m.line + 1, m.column + 1, format_path(path), hint)


# ---------------------------------------------------------------- JSON

_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
# json.load (what msprobe calls) also accepts NaN, Infinity and -Infinity.
_LITERALS = (("true", True), ("false", False), ("null", None), ("NaN", float("nan")),
             ("Infinity", float("inf")), ("-Infinity", float("-inf")))


def load_json(file: str, text: str | None = None) -> Document:
    doc = Document(file, kind="json")
    if text is None:
        text, errs = read_text(file)
        if text is None:
            doc.ok, doc.findings = False, errs
            return doc
    try:
        doc.data = _JsonParser(text, doc).parse()
    except json.JSONDecodeError as e:
        doc.ok = False
        doc.data = None
        doc.findings.append(_err(file, "parse-error", f"JSON does not parse: {e.msg}", e.lineno, e.colno,
                                 hint="fix the JSON syntax at this position (msprobe fails to load it)"))
    except _Budget as e:
        doc.ok = False
        doc.data = None
        doc.findings.append(_err(file, "parse-error", str(e), e.line, e.col))
    return doc


class _JsonParser:
    """Strict JSON (as msprobe's json.load reads it), recording positions and duplicates."""

    def __init__(self, text: str, doc: Document):
        self.s = text
        self.doc = doc
        self.count = 0
        self.lines = [0]
        for m in re.finditer("\n", text):
            self.lines.append(m.end())

    def pos(self, i: int) -> tuple[int, int]:
        import bisect

        ln = bisect.bisect_right(self.lines, i)
        return ln, i - self.lines[ln - 1] + 1

    def fail(self, msg: str, i: int):
        raise json.JSONDecodeError(msg, self.s, i)

    def ws(self, i: int) -> int:
        return _WS.match(self.s, i).end()

    def parse(self):
        i = self.ws(0)
        value, i = self.value(i, (), 0)
        i = self.ws(i)
        if i != len(self.s):
            self.fail("Extra data", i)
        return value

    def value(self, i, path, depth):
        self.count += 1
        if self.count > MAX_NODES:
            raise _Budget(f"JSON holds more than {MAX_NODES} values: too large for a config", *self.pos(i))
        if depth > MAX_DEPTH:
            raise _Budget(f"JSON nests more than {MAX_DEPTH} levels deep", *self.pos(i))
        self.doc.values[path] = self.pos(i)
        s = self.s
        c = s[i:i + 1]
        if c == "{":
            return self.obj(i + 1, path, depth)
        if c == "[":
            return self.arr(i + 1, path, depth)
        if c == '"':
            return self.string(i)
        for lit, val in _LITERALS:
            if s.startswith(lit, i):
                return val, i + len(lit)
        m = _NUMBER.match(s, i)
        if m:
            txt = m.group(0)
            try:
                return (float(txt) if m.group(1) or m.group(2) else int(txt)), m.end()
            except ValueError:  # over sys.get_int_max_str_digits() digits: json.load raises too
                self.fail(f"Integer with {len(txt.lstrip('-'))} digits: Python's json.load refuses it", i)
        self.fail("Expecting value", i)

    def string(self, i):
        """A JSON string at i. json.load accepts an unpaired surrogate escape such as \\ud800; such
        a string cannot be written as UTF-8 (every reporter would fail on it), so it is kept with
        U+FFFD in place of the surrogate, and reported."""
        text, end = json.decoder.scanstring(self.s, i + 1, True)
        if _SURROGATE.search(text):
            line, col = self.pos(i)
            self.doc.findings.append(_err(
                self.doc.file, "parse-error", "string holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), "
                "which is not a character; it is shown here as U+FFFD", line, col,
                hint="remove the escape, or pair it", severity=Severity.WARNING))
            text = _SURROGATE.sub("\ufffd", text)
        return text, end

    def obj(self, i, path, depth):
        out: dict = {}
        i = self.ws(i)
        if self.s[i:i + 1] == "}":
            return out, i + 1
        while True:
            if self.s[i:i + 1] != '"':
                self.fail("Expecting property name enclosed in double quotes", i)
            kpos = self.pos(i)
            key, i = self.string(i)
            kp = path + (key,)
            if key in out:
                self.doc.findings.append(Finding(
                    "duplicate-key", Severity.WARNING,
                    f"key '{key}' appears twice (first at line {self.doc.keys[kp][0]}); the last one wins",
                    self.doc.file, kpos[0], kpos[1], _fmt(kp), "remove one of them"))
            self.doc.keys[kp] = kpos
            i = self.ws(i)
            if self.s[i:i + 1] != ":":
                self.fail("Expecting ':' delimiter", i)
            i = self.ws(i + 1)
            out[key], i = self.value(i, kp, depth + 1)
            i = self.ws(i)
            c = self.s[i:i + 1]
            if c == "}":
                return out, i + 1
            if c != ",":
                self.fail("Expecting ',' delimiter", i)
            i = self.ws(i + 1)

    def arr(self, i, path, depth):
        out: list = []
        i = self.ws(i)
        if self.s[i:i + 1] == "]":
            return out, i + 1
        while True:
            v, i = self.value(i, path + (len(out),), depth + 1)
            out.append(v)
            i = self.ws(i)
            c = self.s[i:i + 1]
            if c == "]":
                return out, i + 1
            if c != ",":
                self.fail("Expecting ',' delimiter", i)
            i = self.ws(i + 1)


def _fmt(path):
    from verl_pdbg_conf.core.findings import format_path

    return format_path(path)


def load(file: str) -> Document:
    """Load by extension: .json as strict JSON, anything else as YAML."""
    return load_json(file) if file.lower().endswith(".json") else load_yaml(file)
