"""Read YAML and JSON into a Document with positions. Never raises on bad input:
every failure becomes a finding at the line and column where it was found."""

from __future__ import annotations

import json
import os
import re
import stat

from .document import Document
from .findings import Finding, Severity

MAX_BYTES = 16 * 1024 * 1024  # a config is kilobytes; beyond this it is not one
MAX_NODES = 200_000  # bound on values built, alias expansion included
MAX_DEPTH = 200


class _Budget(Exception):
    pass


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
    if stat.S_ISDIR(st.st_mode):
        return None, [_err(file, "file-is-directory", f"{what} is a directory, not a file")]
    if not stat.S_ISREG(st.st_mode):
        return None, [_err(file, "file-not-regular", f"{what} is not a regular file (a FIFO, socket or device)")]
    if st.st_size > MAX_BYTES:
        return None, [_err(file, "file-too-large",
                           f"{what} is {st.st_size} bytes, over the {MAX_BYTES} byte limit for a config file")]
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as e:
        return None, [_err(file, "file-unreadable", f"{what} cannot be read: {e.strerror or e}",
                           hint="check the file's permissions for the user that runs the job")]
    return decode(file, raw)


def decode(file: str, raw: bytes) -> tuple[str | None, list[Finding]]:
    if b"\x00" in raw[:8192]:
        return None, [_err(file, "parse-error", "binary file: it holds NUL bytes, not text")]
    if raw.startswith(b"\xef\xbb\xbf"):
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
    import yaml

    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(str(x) for x in (e.context, e.problem) if x)
        doc.ok = False
        doc.findings.append(_err(file, "parse-error", f"YAML does not parse: {msg}",
                                 mark.line + 1 if mark else 1, mark.column + 1 if mark else 1,
                                 hint="fix the YAML syntax at this position"))
        return doc
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        doc.ok = False
        doc.findings.append(_err(file, "parse-error", f"YAML does not parse: {e}"))
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
        doc.findings.append(_err(file, "parse-error", str(e), hint="expand fewer aliases or nest less deeply"))
    return doc


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
        if self.count > MAX_NODES:
            raise _Budget(f"YAML expands to more than {MAX_NODES} values (an alias bomb?)")
        if depth > MAX_DEPTH or id(node) in stack:
            raise _Budget("YAML nests too deeply or refers to itself through an alias")
        m = node.start_mark
        self.doc.values.setdefault(path, (m.line + 1, m.column + 1))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        stack = stack + (id(node),)
        if isinstance(node, yaml.SequenceNode):
            self.check_tag(node, "tag:yaml.org,2002:seq", path)
            return [self.build(n, path + (i,), depth + 1, stack) for i, n in enumerate(node.value)]
        self.check_tag(node, "tag:yaml.org,2002:map", path)
        out: dict = {}
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
            if key in out:
                first = self.doc.keys.get(kp, (0, 0))[0]
                self.doc.findings.append(self.at(
                    k_node, "duplicate-key", Severity.WARNING,
                    f"key '{key}' appears twice (first at line {first}); the last one wins", kp,
                    hint="remove one of them"))
            km = k_node.start_mark
            self.doc.keys[kp] = (km.line + 1, km.column + 1)
            self.doc.values.pop(kp, None)
            out[key] = self.build(v_node, kp, depth + 1, stack)
        return out

    def scalar(self, node, path):
        try:
            return self.constructor.construct_object(node, deep=True)
        except (self.yaml.YAMLError, ValueError, OverflowError) as e:
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
        from .findings import format_path

        m = node.start_mark
        return Finding(rule, severity, message, self.doc.file, m.line + 1, m.column + 1, format_path(path), hint)


# ---------------------------------------------------------------- JSON

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")


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
        doc.findings.append(_err(file, "parse-error", str(e)))
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
            raise _Budget(f"JSON holds more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise _Budget(f"JSON nests more than {MAX_DEPTH} levels deep")
        self.doc.values[path] = self.pos(i)
        s = self.s
        c = s[i:i + 1]
        if c == "{":
            return self.obj(i + 1, path, depth)
        if c == "[":
            return self.arr(i + 1, path, depth)
        if c == '"':
            return json.decoder.scanstring(s, i + 1, True)
        for lit, val in (("true", True), ("false", False), ("null", None)):
            if s.startswith(lit, i):
                return val, i + len(lit)
        m = _NUMBER.match(s, i)
        if m:
            txt = m.group(0)
            return (float(txt) if m.group(1) or m.group(2) else int(txt)), m.end()
        self.fail("Expecting value", i)

    def obj(self, i, path, depth):
        out: dict = {}
        i = self.ws(i)
        if self.s[i:i + 1] == "}":
            return out, i + 1
        while True:
            if self.s[i:i + 1] != '"':
                self.fail("Expecting property name enclosed in double quotes", i)
            kpos = self.pos(i)
            key, i = json.decoder.scanstring(self.s, i + 1, True)
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
    from .findings import format_path

    return format_path(path)


def load(file: str) -> Document:
    """Load by extension: .json as strict JSON, anything else as YAML."""
    return load_json(file) if file.lower().endswith(".json") else load_yaml(file)
