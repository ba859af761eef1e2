"""Read the plain YAML that Hydra confs are written in without importing yaml.

Why: the validator runs as a pre-flight hook, usually from source, and `import yaml` cost about as
much as the rest of its start-up (PyYAML's package imports its scanner, parser, emitter... and
compiles their regexes). For a text in the subset below, `load` builds the Document that
loaders.load_yaml builds with libyaml: the same data with the same types, the same key and value
positions, no findings. For any other text it returns None and load_yaml reads it the full way.

The subset: comments, block mappings (plain or quoted one-line keys), block sequences (compact
`- - x` and `- key: v` included), one-line plain and quoted scalars, empty values, one-line flow
collections of such scalars. Refused, so read the full way: tabs, a line break other than
`\\n`, a character that is not printable, document markers and directives, anchors, aliases,
tags, merge keys, block scalars, `?` keys, multi-line scalars or flow collections, duplicate keys
(the full path makes the finding), a bad escape, and a plain scalar whose type is not certain
(`0x1f`, `017`, `1:30`, `-.5`...): refusing costs an import, a wrong answer costs a wrong verdict.
tests/test_fast_yaml.py compares the two paths on every conf at hand and thousands of generated texts.
"""

from __future__ import annotations

from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.reading import MAX_DEPTH, MAX_NODES

_MAX_CHARS = 1 << 20  # a conf is kilobytes
_INF = float("inf")
# Plain scalars that YAML 1.1's resolvers (bool, null, float) type whatever their first character.
_WORDS = {w: True for w in ("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")}
_WORDS.update((w, False) for w in ("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"))
_WORDS.update((w, None) for w in ("~", "null", "Null", "NULL"))
_WORDS.update((s + w, -_INF if s == "-" else _INF) for s in ("", "-", "+") for w in (".inf", ".Inf", ".INF"))
_WORDS.update((w, -_INF / _INF) for w in (".nan", ".NaN", ".NAN"))  # SafeConstructor's nan
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
            "e": "\x1b", " ": " ", "/": "/", '"': '"', "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028",
            "P": "\u2029"}
_HEX = frozenset("0123456789abcdefABCDEF")
_FLOW_STOP = frozenset(",[]{}:#?'\"")
_REFUSE = object()


class _Refuse(Exception):
    """The text is outside the subset."""


def load(file: str, text: str) -> Document | None:
    """The Document of `text`, or None when the text is outside the subset."""
    if len(text) > _MAX_CHARS or not text.replace("\n", " ").isprintable():  # also refuses \t, \r, BOM
        return None
    lines = []
    for ln, raw in enumerate(text.split("\n"), 1):
        content = raw.lstrip(" ")
        if content and content[0] != "#":
            if raw[:3] in ("---", "...") or raw[0] == "%":  # document markers, directives
                return None
            lines.append((ln, len(raw) - len(content), raw.rstrip(" ")))
    if len(lines) > MAX_NODES:
        return None
    doc = Document(file, kind="yaml")
    reader = _Reader(doc, lines, MAX_NODES, MAX_DEPTH // 2)
    try:
        if lines:
            doc.data = reader.nested(lines[0], (), 0)
            if reader.i != len(lines):  # a line less indented than the root's first
                return None
    except _Refuse:
        return None
    return doc


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


def _number(s: str):
    """The int or float YAML 1.1 / OmegaConf's float resolver makes of s (first character one of
    `-+.0123456789`), s itself when no number can be spelt so, or _REFUSE when unsure."""
    sign = -1 if s[0] == "-" else 1
    body = s[1:] if s[0] in "+-" else s
    if _digits(body.replace("_", "")) and body[0] != "_":  # 12, -3, 100_000
        return sign * int(body.replace("_", "")) if (body == "0" or body[0] != "0") and len(body) < 100 \
            else _REFUSE  # 017 and 0_7 are octal
    low = body.lower()
    mant, e, exp = low.partition("e")
    whole, dot, frac = mant.partition(".")
    digits = exp[1:] if exp[:1] in ("+", "-") else exp
    if (not e or _digits(digits)) and (not frac or _digits(frac)) and len(s) < 100:
        if dot and _digits(whole):  # 1.5, 1., 1.5e-3, 1.0e5 (OmegaConf)
            return sign * float(low)
        if not dot and e and _digits(whole):  # 1e-5 (OmegaConf)
            return sign * float(low)
        if dot and not whole and frac and sign == 1 and s[0] != "+" and (not e or digits != exp):
            return float(low)  # .5, .5e-3
    if low[:2] in ("0x", "0b"):
        return _REFUSE
    if any(c not in "0123456789_.:+-eE" for c in s) or s.count(".") > 1 or low.count("e") > 1 \
            or any(c in "+-" and s[i - 1] not in "eE" for i, c in enumerate(s) if i):
        return s  # `-x`, `1.2.3`, `2024-01-01`, `0o7`: no resolver can match
    return _REFUSE


def _typed(s: str):
    """A plain scalar's value as the conf loader types it."""
    if s in _WORDS:
        return _WORDS[s]
    if s[0] in "-+.0123456789":
        value = _number(s)
    else:
        value = _REFUSE if s in ("=", "<<") else s  # the value and merge tags
    if value is _REFUSE:
        raise _Refuse
    return value


def _plain_start(s: str) -> bool:
    """Whether a plain scalar may start as s does (in a flow collection, s holds no `?` or `:`)."""
    if s[0] in "-?:":  # `-1`, OmegaConf's `???`; `- x`, `? x` and `: x` are indicators
        return len(s) > 1 and s[1] not in " ,[]{}#"
    return s[0] not in ",[]{}#&*!|>'\"%@`"


def _entry(raw: str, col: int) -> bool:
    """Whether raw holds a block sequence entry `- ` at col."""
    return raw[col] == "-" and raw[col + 1:col + 2] in ("", " ")


def _skip(raw: str, j: int) -> int:
    while j < len(raw) and raw[j] == " ":
        j += 1
    return j


class _Reader:
    def __init__(self, doc: Document, lines: list, max_nodes: int, max_depth: int):
        self.doc, self.lines, self.i = doc, lines, 0
        self.left, self.max_depth = max_nodes, max_depth

    def peek(self):
        return self.lines[self.i] if self.i < len(self.lines) else None

    def node(self, depth: int) -> None:
        self.left -= 1
        if self.left < 0 or depth > self.max_depth:
            raise _Refuse

    def nested(self, line, path, depth):
        """The block collection that starts a line of its own."""
        ln, col, raw = line
        self.i += 1
        if _entry(raw, col):
            return self.seq(ln, col, raw, path, depth, False)
        if self.colon(raw, col) < 0:
            raise _Refuse  # a scalar on a line of its own: the root, or a multi-line scalar
        return self.map(ln, col, raw, path, depth)

    def seq(self, ln, col, raw, path, depth, indentless):
        self.node(depth)
        self.doc.values[path] = (ln, col + 1)
        out: list = []
        while True:
            p = path + (len(out),)
            r = _skip(raw, col + 1)
            if r < len(raw) and raw[r] != "#":
                if _entry(raw, r):
                    out.append(self.seq(ln, r, raw, p, depth + 1, False))
                elif self.colon(raw, r) >= 0:
                    out.append(self.map(ln, r, raw, p, depth + 1))
                else:
                    out.append(self.inline(ln, r, raw, p, depth + 1))
            else:
                nxt = self.peek()
                if nxt is not None and nxt[1] > col:
                    out.append(self.nested(nxt, p, depth + 1))
                else:
                    out.append(self.empty(ln, col + 2, p, depth + 1))
            nxt = self.peek()
            if nxt is None or nxt[1] < col:
                return out
            if nxt[1] > col:
                raise _Refuse
            if not _entry(nxt[2], col):
                if indentless:
                    return out
                raise _Refuse
            ln, _, raw = nxt
            self.i += 1

    def map(self, ln, col, raw, path, depth):
        self.node(depth)
        doc = self.doc
        doc.values[path] = (ln, col + 1)
        out: dict = {}
        while True:
            colon = self.colon(raw, col)
            if colon < 0:
                raise _Refuse
            key = self.key(raw, col, colon)
            if key in out:
                raise _Refuse  # the full path makes the finding
            kp = path + (key,)
            doc.keys[kp] = (ln, col + 1)
            self.node(depth + 1)
            v = _skip(raw, colon + 1)
            if v < len(raw) and raw[v] != "#":
                out[key] = self.inline(ln, v, raw, kp, depth + 1)
            else:
                nxt = self.peek()
                if nxt is not None and nxt[1] > col:
                    out[key] = self.nested(nxt, kp, depth + 1)
                elif nxt is not None and nxt[1] == col and _entry(nxt[2], col):
                    self.i += 1
                    out[key] = self.seq(nxt[0], col, nxt[2], kp, depth + 1, True)
                else:
                    out[key] = self.empty(ln, colon + 2, kp, depth + 1)
            nxt = self.peek()
            if nxt is None or nxt[1] < col:
                return out
            if nxt[1] > col:
                raise _Refuse  # a multi-line scalar, or bad indentation
            ln, _, raw = nxt
            self.i += 1

    def colon(self, raw, col) -> int:
        """Where the `:` of the key at raw[col] is, or -1 when raw[col:] is not `key:...`."""
        if raw[col] in "[{":
            return -1
        if raw[col] in "'\"":
            end = self.quoted(raw, col)[1]
            return end if raw[end:end + 1] == ":" and raw[end + 1:end + 2] in ("", " ") else -1
        j = col
        while True:
            j = raw.find(":", j)
            if j < 0:
                return -1
            if raw[j + 1:j + 2] in ("", " "):
                return -1 if " #" in raw[col:j] else j
            j += 1

    def key(self, raw, col, colon):
        if colon - col > 1000:  # libyaml: a simple key is at most 1024 characters
            raise _Refuse
        if raw[col] in "'\"":
            return self.quoted(raw, col)[0]
        s = raw[col:colon].rstrip(" ")
        if not s or not _plain_start(s):
            raise _Refuse
        key = _typed(s)
        return key if isinstance(key, (str, int)) and not isinstance(key, bool) else str(key)

    def empty(self, ln, col, path, depth):
        """An empty value: null, marked where libyaml marks it (just after its `:` or `-`)."""
        self.node(depth)
        self.doc.values[path] = (ln, col)
        return None

    def inline(self, ln, col, raw, path, depth):
        """A value that starts and ends on this line at raw[col]; only a comment may follow it."""
        c = raw[col]
        if c in "[{":
            value, end = self.flow(ln, raw, col, path, depth)
        elif c in "'\"":
            self.node(depth)
            self.doc.values[path] = (ln, col + 1)
            value, end = self.quoted(raw, col)
        else:
            s = raw[col:]
            cut = s.find(" #")
            s = (s if cut < 0 else s[:cut]).rstrip(" ")
            if ": " in s or s.endswith(":") or not _plain_start(s):
                raise _Refuse
            self.node(depth)
            self.doc.values[path] = (ln, col + 1)
            return _typed(s)
        tail = raw[end:].lstrip(" ")
        if tail and tail[0] != "#":  # after a quote or a bracket, `#` starts a comment even unspaced
            raise _Refuse
        return value

    def quoted(self, raw, col):
        """The one-line quoted scalar at raw[col]: its text and the index after its closing quote."""
        out, j = [], col + 1
        if raw[col] == "'":
            while True:
                k = raw.find("'", j)
                if k < 0:
                    raise _Refuse
                out.append(raw[j:k])
                if raw[k + 1:k + 2] != "'":
                    return "".join(out), k + 1
                out.append("'")
                j = k + 2
        while True:
            k = raw.find('"', j)
            b = raw.find("\\", j, k)
            if k < 0:
                raise _Refuse
            if b < 0:
                out.append(raw[j:k])
                return "".join(out), k + 1
            c = raw[b + 1:b + 2]
            esc, n = _ESCAPES.get(c), {"x": 2, "u": 4, "U": 8}.get(c, 0)
            code = raw[b + 2:b + 2 + n]
            if n and len(code) == n and all(h in _HEX for h in code):
                point = int(code, 16)  # libyaml refuses a surrogate and what is past U+10FFFF
                esc = chr(point) if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF else None
            if esc is None:
                raise _Refuse
            out += (raw[j:b], esc)
            j = b + 2 + n

    def flow(self, ln, raw, col, path, depth):
        """A flow collection that closes on this line: its value and the index after it."""
        self.node(depth)
        self.doc.values[path] = (ln, col + 1)
        close = "]" if raw[col] == "[" else "}"
        out: list | dict = [] if close == "]" else {}
        j = _skip(raw, col + 1)
        if raw[j:j + 1] == close:
            return out, j + 1
        while True:
            if close == "]":
                value, j = self.flow_node(ln, raw, j, path + (len(out),), depth + 1)
                out.append(value)
            else:
                key, end = self.flow_scalar(raw, j)
                key = key if isinstance(key, (str, int)) and not isinstance(key, bool) else str(key)
                if raw[end:end + 2] != ": " or key in out:
                    raise _Refuse
                kp = path + (key,)
                self.doc.keys[kp] = (ln, j + 1)
                self.node(depth + 1)
                out[key], j = self.flow_node(ln, raw, _skip(raw, end + 2), kp, depth + 1)
            j = _skip(raw, j)
            c = raw[j:j + 1]
            if c == close:
                return out, j + 1
            j = _skip(raw, j + 1)
            if c != "," or raw[j:j + 1] in (",", close, ""):  # no trailing or doubled comma
                raise _Refuse

    def flow_node(self, ln, raw, j, path, depth):
        if raw[j:j + 1] in ("[", "{"):
            return self.flow(ln, raw, j, path, depth)
        value, end = self.flow_scalar(raw, j)
        self.node(depth)
        self.doc.values[path] = (ln, j + 1)
        return value, end

    def flow_scalar(self, raw, j):
        """A quoted or plain scalar inside a flow collection: its value and where it ends."""
        if raw[j:j + 1] in ("'", '"'):
            return self.quoted(raw, j)
        k = j
        while k < len(raw) and raw[k] not in _FLOW_STOP:
            k += 1
        s = raw[j:k].rstrip(" ")
        if not s or not _plain_start(s):
            raise _Refuse
        return _typed(s), j + len(s)
