"""Read YAML and JSON into a Document with positions. Never raises on bad input:
every failure becomes a finding at the line and column where it was found."""

from __future__ import annotations

import json
import re

from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.core.reading import MAX_DEPTH, MAX_NODES, Budget, err, read_text

# ---------------------------------------------------------------- YAML

def load_yaml(file: str, text: str | None = None) -> Document:
    doc = Document(file, kind="yaml")
    if text is None:
        text, errs = read_text(file)
        if text is None:
            doc.ok, doc.findings = False, errs
            return doc
    from verl_pdbg_conf.core import fast_yaml

    fast = fast_yaml.load(file, text)  # plain confs, without importing yaml
    if fast is not None:
        return fast
    from verl_pdbg_conf.core import yaml_full

    return yaml_full.load(doc, text)


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
        doc.findings.append(err(file, "parse-error", f"JSON does not parse: {e.msg}", e.lineno, e.colno,
                                 hint="fix the JSON syntax at this position (msprobe fails to load it)"))
    except Budget as e:
        doc.ok = False
        doc.data = None
        doc.findings.append(err(file, "parse-error", str(e), e.line, e.col))
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
            raise Budget(f"JSON holds more than {MAX_NODES} values: too large for a config", *self.pos(i))
        if depth > MAX_DEPTH:
            raise Budget(f"JSON nests more than {MAX_DEPTH} levels deep", *self.pos(i))
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
            self.doc.findings.append(err(
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
