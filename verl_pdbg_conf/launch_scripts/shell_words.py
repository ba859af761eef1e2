"""A small POSIX-shell reader for launch scripts: splits a script into simple commands
and words the way bash would before running them (line continuations, quoting,
comments, heredocs, `$VAR` / `${VAR:-default}` / `$(...)`), keeping the line and column
where each word starts. It never runs anything: a word whose value depends on the
environment or on a command's output is marked unknown, with the reason.

Bash arrays written literally in the script (`A=(x "y z")`, `A+=(...)`, `declare -a A=(...)`)
are kept with each element's own position, and `"${A[@]}"` / `${A[*]}` expand to those
elements. The result of an unquoted expansion is split into words on blanks and newlines, as
bash does, whatever built the value (`B="$A $C"` then `$B`), its known parts split and an unknown
part kept inside its word; each word keeps the position where its text is written (the
assignment's line, not the line that expands it). Assignments are not split.

Not a full shell: no aliases, no arithmetic, no globbing; `{a,b}` brace expansion is
reported, not performed."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL = "@*#?$!-0123456789"
OPERATORS = ("&&", "||", ";;", ";", "&", "|", "(", ")", "\n")


@dataclass
class Word:
    """One shell word after quote removal. `unknown` says why its value cannot be known here."""

    text: str  # the value bash would pass; unknown parts keep their source text
    line: int  # 1-based, where the word starts
    column: int  # 1-based
    raw: str = ""  # the source text of the word
    unknown: str = ""  # empty when the whole value is known
    unknown_at: int = -1  # index in `text` of the first unknown part (-1: none)
    parts: list = field(default_factory=list)  # (text, known: bool, quoted: bool)
    brace: bool = False  # unquoted {a,b}: bash expands it into several words
    array: list | None = None  # `NAME=(...)`: the elements (Words, with their own positions)
    split: list | None = None  # the Words bash passes instead of this one (`"${A[@]}"`, unquoted `$V`)
    file: str = ""  # the file the word is written in, when not the script being read (a wrapper's caller)
    origins: list | None = None  # per character of `text`: (line, column, file) where it is written, or None
    maybe: str = ""  # why bash may not pass this word at all (an element appended inside an if block)

    @property
    def known(self) -> bool:
        return not self.unknown

    @property
    def quoted(self) -> bool:
        return any(q for _, _, q in self.parts)


@dataclass
class Command:
    words: list[Word]
    line: int
    depth: int  # nesting inside if/for/while/case/function bodies (0: top level)
    conditional: bool = False  # after `&&` / `||`: runs or not depending on the command before it

    @property
    def branch(self) -> bool:
        """Runs or not depending on a condition: inside a block, or after `&&` / `||`."""
        return self.depth > 0 or self.conditional


class Variables:
    """Shell variables assigned in the script so far. A name absent here is an environment
    variable (unknown); a name mapped to None was assigned in a way that cannot be known."""

    def __init__(self):
        self.values: dict[str, str | None] = {}
        self.why: dict[str, str] = {}
        self.arrays: dict[str, list | None] = {}  # name -> element Words (None: cannot be known)
        self.positional: list | None = None  # $1.. / "$@" when a wrapper script's call is known
        self.parts: dict[str, list] = {}  # name -> pieces of a value that cannot be known
        self.origins: dict[str, list] = {}  # name -> where each character of its value is written

    def get(self, name: str) -> tuple[str | None, str]:
        if name in self.values:
            v = self.values[name]
            return v, ("" if v is not None else self.why.get(name, f"${name} cannot be known here"))
        return None, f"${name} comes from the environment"

    def set(self, name: str, value: str | None, why: str = "", parts: list | None = None,
            origins: list | None = None) -> None:
        """`parts`: for a value that cannot be known, its (text, known, quoted) pieces, so that
        `$NAME` keeps the known tail (`$(pwd)/examples/config` -> unknown + `/examples/config`).
        `origins`: where each character of the value (or of the pieces, joined) is written."""
        self.values[name] = value
        self.parts.pop(name, None)
        self.origins.pop(name, None)
        if origins is not None:
            self.origins[name] = origins
        if value is None:
            self.why[name] = why or f"${name} cannot be known here"
            if parts:
                self.parts[name] = parts

    def set_array(self, name: str, elements: list | None, why: str = "", append: bool = False) -> None:
        if append and elements is not None:
            old = self.arrays.get(name, [] if name not in self.values else None)
            elements = None if old is None else old + elements
        self.arrays[name] = elements
        self.values.pop(name, None)
        if elements is None:
            self.why[name] = why or f"${{{name}[@]}} cannot be known here"

    def get_array(self, name: str) -> tuple[list | None, str]:
        if name in self.arrays:
            a = self.arrays[name]
            return a, ("" if a is not None else self.why.get(name, f"${{{name}[@]}} cannot be known here"))
        if name in self.values:  # a scalar is a one-element array
            return None, ("" if self.values[name] is not None else self.why.get(name, f"${name} cannot be known"))
        return None, f"${{{name}[@]}} comes from the environment"

    def taint_all(self, why: str) -> None:
        for k, v in list(self.values.items()):
            if v is not None:
                self.set(k, None, why)
        for k, v in list(self.arrays.items()):
            if v is not None:
                self.set_array(k, None, why)


class _Lines:
    def __init__(self, src: str):
        self.starts = [0] + [m.end() for m in re.finditer(r"\n", src)]

    def pos(self, i: int) -> tuple[int, int]:
        ln = bisect.bisect_right(self.starts, i) - 1
        return ln + 1, i - self.starts[ln] + 1


_OPEN = {"if", "for", "while", "until", "case", "select", "{"}
_CLOSE = {"fi", "done", "esac", "}"}


class Reader:
    """Iterate over the simple commands of a script; expansions use the variables
    assigned before them (see `Variables`), so callers record assignments as they go."""

    def __init__(self, src: str, variables: Variables | None = None, file: str = ""):
        self.src = src
        self.file = file  # written into origins: "" for the script being read, else a sourced file
        self.n = len(src)
        self.lines = _Lines(src)
        self.vars = variables or Variables()
        self.depth = 0
        self.heredocs: list[tuple[str, bool]] = []  # pending (delimiter, strip tabs)

    # -- commands -------------------------------------------------------------------------
    def commands(self):
        i = 0
        words: list[Word] = []
        cmd_line = 1
        self._after_andor = False  # the command being read follows `&&` / `||`
        while i < self.n:
            c = self.src[i]
            if c in " \t\r":
                i += 1
                continue
            if c == "\\" and self.src.startswith("\\\n", i):
                i += 2
                continue
            if c == "\\" and i + 1 == self.n:  # a `\` ending the file: bash drops it
                i += 1
                continue
            if c == "#":
                j = self.src.find("\n", i)
                i = self.n if j < 0 else j
                continue
            op = next((o for o in OPERATORS if self.src.startswith(o, i)), None)
            if op is not None:
                if words:
                    yield from self._emit(words, cmd_line)
                    words = []
                if op in ("&&", "||"):
                    self._after_andor = True
                elif op != "|":
                    self._after_andor = False
                i += len(op)
                if op == "\n" and self.heredocs:
                    i = self._skip_heredocs(i)
                continue
            redir, rop = _redirection(self.src, i)
            if redir:
                i = redir
                if rop in ("<<", "<<-"):
                    i = self._heredoc_delim(i, rop == "<<-")
                    continue
                if rop == "fd":
                    continue
                i = self._skip_blank(i)
                if i < self.n and self.src[i] not in "\n;&|()":
                    _, i = self.word(i)  # the redirection target: not an argument
                continue
            if not words:
                cmd_line = self.lines.pos(i)[0]
            # assignment words (before the command name, or a declaration builtin's) are not split
            self._assigning = all(_ASSIGN_WORD.match(x.raw) for x in words) or \
                (words[0].known and words[0].text in _DECLARE)
            w, i = self.word(i)
            if i < self.n and self.src[i] == "(" and _ARRAY_ASSIGN.fullmatch(w.raw):
                w.array, i = self._array(i + 1)
            if w.split is not None:
                words.extend(w.split)
            else:
                words.append(w)
        if words:
            yield from self._emit(words, cmd_line)

    def _emit(self, words: list[Word], line: int):
        first = words[0].text if words[0].known else ""
        if first in _CLOSE:
            self.depth = max(0, self.depth - 1)
            words = words[1:]
            first = words[0].text if words and words[0].known else ""
        if first in ("then", "do", "else", "elif"):
            words = words[1:]
        if words:
            yield Command(words, line, self.depth, getattr(self, "_after_andor", False))
        last = words[-1].text if words and words[-1].known else ""
        if first in _OPEN or (last == "{" and first != "{"):
            self.depth += 1
        # `if ...; then` / `for ...; do` open a block; the closer is its own command

    def _array(self, i: int) -> tuple[list, int]:
        """The elements of `NAME=( ... )` from just after `(`; index after `)`."""
        out: list[Word] = []
        while i < self.n:
            c = self.src[i]
            if c in " \t\r\n":
                i += 1
            elif c == "\\" and self.src.startswith("\\\n", i):
                i += 2
            elif c == "#":
                j = self.src.find("\n", i)
                i = self.n if j < 0 else j
            elif c == ")":
                return out, i + 1
            else:
                self._assigning = False
                w, j = self.word(i)
                if j == i:  # an operator inside the parentheses: not a plain list
                    j = i + 1
                else:
                    out.extend(w.split if w.split is not None else [w])
                i = j
        return out, i

    def _skip_blank(self, i: int) -> int:
        while i < self.n and self.src[i] in " \t":
            i += 1
        return i

    def _heredoc_delim(self, i: int, strip: bool) -> int:
        i = self._skip_blank(i)
        w, i = self.word(i)
        self.heredocs.append((w.text, strip))
        return i

    def _skip_heredocs(self, i: int) -> int:
        for delim, strip in self.heredocs:
            while i < self.n:
                j = self.src.find("\n", i)
                end = self.n if j < 0 else j
                line = self.src[i:end]
                i = end + 1
                if (line.lstrip("\t") if strip else line) == delim:
                    break
        self.heredocs = []
        return min(i, self.n)

    # -- words ----------------------------------------------------------------------------
    def word(self, i: int) -> tuple[Word, int]:
        """The word at i, and the index after it. `split`: the words bash makes of it (field
        splitting of unquoted expansions, arrays), when not exactly this one."""
        start = i
        line, col = self.lines.pos(i)
        src, n = self.src, self.n
        acc = self._acc = _Parts()
        assigning = getattr(self, "_assigning", False) and bool(_ASSIGN_WORD.match(src, i))
        brace = False
        while i < n:
            c = src[i]
            if c in " \t\r\n;&|()<>":
                break
            if c == "\\":
                if src.startswith("\\\n", i):
                    i += 2
                elif i + 1 < n:
                    acc.lit(src[i + 1], True, self._span(i + 1, 1))
                    i += 2
                else:
                    i += 1
            elif c == "'":
                j = src.find("'", i + 1)
                j = n if j < 0 else j
                acc.lit(src[i + 1:j], True, self._span(i + 1, j - i - 1))
                i = j + 1
            elif c == '"':
                i = self._double(i + 1)
            elif c == "$":
                i = self._dollar(i, quoted=False)
            elif c == "`":
                j = _backtick_end(src, i)
                acc.unk(src[i:j], f"command substitution {src[i:j]} runs at launch time", False)
                i = j
            elif c == "~" and (i == start or _ASSIGN_WORD.fullmatch(src, start, i)) and \
                    (i + 1 >= n or src[i + 1] in "/ \t\n;&|"):  # also `NAME=~/x`, as bash expands it
                acc.unk("~", "~ is the launching user's home directory", False)
                i += 1
            elif c == "{" and re.match(r"\{[^{}\s'\"]*,[^{}\s'\"]*\}", src[i:]):
                brace = True
                acc.lit(c, False, self._span(i, 1))
                i += 1
            else:
                j = i + 1
                while j < n and src[j] not in " \t\r\n;&|()<>\\'\"$`{":
                    j += 1
                name = _ASSIGN_WORD.match(src, i) if i == start else None
                if name and name.end() < j and src[name.end()] == "~":  # `NAME=~/x`: read `~` on its own
                    j = name.end()
                acc.lit(src[i:j], False, self._span(i, j - i))
                i = j
        raw = src[start:i]
        w = acc.word(line, col, raw, self.file)
        w.brace = brace
        if not assigning:
            w.split = acc.fields(w)
        return w, i

    def _span(self, at: int, length: int) -> list:
        """Where each of the `length` characters from `at` is written: (line, column, file)."""
        line, col = self.lines.pos(at)
        out = []
        for ch in self.src[at:at + length]:
            out.append((line, col, self.file))
            line, col = (line + 1, 1) if ch == "\n" else (line, col + 1)
        return out

    def _double(self, i: int) -> int:
        src, n, acc = self.src, self.n, self._acc
        before = len(acc.parts)
        buf: list[str] = []
        buf_at = i

        def flush(at_next: int):
            nonlocal buf, buf_at
            if buf:
                acc.lit("".join(buf), True, self._span(buf_at, len(buf)))
            buf, buf_at = [], at_next

        while i < n and src[i] != '"':
            c = src[i]
            if c == "\\" and i + 1 < n and src[i + 1] in '$`"\\\n':
                flush(i + 2)
                if src[i + 1] != "\n":
                    acc.lit(src[i + 1], True, self._span(i + 1, 1))
                i += 2
            elif c == "$" or c == "`":
                flush(i)
                if c == "$":
                    i = self._dollar(i, quoted=True)
                else:
                    j = _backtick_end(src, i)
                    acc.unk(src[i:j], f"command substitution {src[i:j]} runs at launch time", True)
                    i = j
                buf_at = i
            else:
                buf.append(c)
                i += 1
        flush(i)
        if len(acc.parts) == before:  # `""`: an empty word, which bash passes
            acc.lit("", True, [])
        return i + 1

    def _dollar(self, i: int, quoted: bool) -> int:
        src, n, acc = self.src, self.n, self._acc
        nxt = src[i + 1] if i + 1 < n else ""
        if nxt == "(":
            j = _matching_end(src, i + 1, "(", ")")
            what = "arithmetic" if src.startswith("$((", i) else "command substitution"
            acc.unk(src[i:j], f"{what} {src[i:j]} runs at launch time", quoted)
            return j
        if nxt == "{":
            j = _matching_end(src, i + 1, "{", "}")
            self._param(src[i + 2:j - 1], src[i:j], quoted)
            return j
        if nxt == "'" and not quoted:  # $'...' ANSI-C quoting
            j = i + 2
            buf = []
            while j < n and src[j] != "'":
                if src[j] == "\\" and j + 1 < n:
                    buf.append({"n": "\n", "t": "\t", "'": "'", "\\": "\\"}.get(src[j + 1], "\\" + src[j + 1]))
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            acc.lit("".join(buf), True)
            return j + 1
        m = _NAME.match(src, i + 1)
        if m:
            self._param(m.group(0), src[i:m.end()], quoted)
            return m.end()
        if nxt in ("@", "*") and self.vars.positional is not None:
            acc.array(list(self.vars.positional))
            return i + 2
        if nxt and nxt in "123456789" and self.vars.positional is not None:
            k = int(nxt) - 1
            if k < len(self.vars.positional) and self.vars.positional[k].known:
                p = self.vars.positional[k]
                acc.lit(p.text, quoted, p.origins, split=not quoted)
            else:
                acc.unk(src[i:i + 2], f"${nxt} is not given by the caller", quoted)
            return i + 2
        if nxt and nxt in _SPECIAL:
            what = {"@": "the script's arguments", "*": "the script's arguments", "#": "the argument count",
                    "?": "the last exit status", "$": "the shell's pid", "!": "the last background pid",
                    "-": "the shell's flags"}.get(nxt, f"the script's argument ${nxt}")
            acc.unk(src[i:i + 2], f"${nxt} is {what}", quoted)
            return i + 2
        acc.lit("$", quoted, self._span(i, 1))
        return i + 1

    def _param(self, body: str, raw: str, quoted: bool) -> None:
        acc = self._acc
        a = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|\d+)\]", body)
        if a:
            elements, why = self.vars.get_array(a.group(1))
            if elements is None and not why:  # a scalar used as an array
                return self._param(a.group(1), raw, quoted)
            if elements is None:
                acc.unk(raw, why, quoted)
            elif a.group(2).isdigit():
                k = int(a.group(2))
                if k < len(elements) and elements[k].known and not elements[k].maybe:
                    acc.lit(elements[k].text, quoted, elements[k].origins, split=not quoted)
                else:
                    acc.unk(raw, f"{raw} is not a known element", quoted)
            elif a.group(2) == "*" and quoted:
                if all(e.known and not e.maybe for e in elements):
                    acc.lit(" ".join(e.text for e in elements), quoted)
                else:
                    acc.unk(raw, f"{raw} joins elements that cannot be known here", quoted)
            else:
                acc.array(list(elements))
            return
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])(.*))?", body, re.S)
        if not m:
            acc.unk(raw, f"{raw} is expanded at launch time", quoted)
            return
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value, why = self.vars.get(name)
        origins = self.vars.origins.get(name)
        if op is None:
            if value is None and name in self.vars.parts:
                at = 0
                for text, known, _ in self.vars.parts[name]:
                    o = origins[at:at + len(text)] if origins and len(origins) >= at + len(text) else None
                    at += len(text)
                    if known:
                        acc.lit(text, quoted, o, split=not quoted)
                    else:
                        acc.unk(text, why, quoted)
            elif value is None:
                acc.unk(raw, why, quoted)
            else:
                acc.lit(value, quoted, origins, split=not quoted)
        elif op in (":-", "-", ":=", "="):
            if value is not None and (value != "" or op in ("-", "=")):
                acc.lit(value, quoted, origins, split=not quoted)
            elif name in self.vars.values and value is not None:  # set but empty with :-
                acc.lit(self._expand_text(arg), quoted, split=not quoted)
            else:
                default = self._expand_text(arg)
                acc.unk(raw, f"{why} (default {default!r} when unset)", quoted)
        else:
            acc.unk(raw, f"{raw} depends on whether ${name} is set", quoted)

    def _expand_text(self, s: str) -> str:
        """Expand a `${VAR:-default}` default (quotes removed) for the reason text."""
        w, _ = Reader(s.replace(" ", "\\ "), self.vars).word(0)
        return w.text


_ARRAY_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_ASSIGN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")
_DECLARE = {"export", "declare", "typeset", "local", "readonly"}
_IFS = re.compile(r"[ \t\n]+")


class _Parts:
    """The pieces of one word as it is read: (text, known, quoted), where each character is
    written, why an unknown piece cannot be known, which pieces bash splits (unquoted expansion
    results) and the arrays expanded in it (each element one word)."""

    def __init__(self):
        self.parts: list[tuple[str, bool, bool]] = []
        self.origins: list[list | None] = []
        self.whys: list[str] = []
        self.splits: set[int] = set()
        self.arrays: dict[int, list] = {}

    def lit(self, s: str, quoted: bool, origins: list | None = None, split: bool = False) -> None:
        if split:
            self.splits.add(len(self.parts))
        self.parts.append((s, True, quoted))
        self.origins.append(origins if origins is not None and len(origins) == len(s) else None)
        self.whys.append("")

    def unk(self, s: str, why: str, quoted: bool) -> None:
        self.parts.append((s, False, quoted))
        self.origins.append(None)
        self.whys.append(why)

    def array(self, words: list) -> None:
        self.arrays[len(self.parts)] = words
        self.parts.append(("", True, True))
        self.origins.append(None)
        self.whys.append("")

    def word(self, line: int, col: int, raw: str, file: str) -> Word:
        """The word as written, before splitting (what an assignment stores)."""
        pieces = []
        for j, (t, k, q) in enumerate(self.parts):
            if j not in self.arrays:
                pieces.append((t, k, q, self.origins[j], self.whys[j]))
            elif all(e.known and not e.maybe for e in self.arrays[j]):  # `X="${A[@]}"` joins them
                pieces.append((" ".join(e.text for e in self.arrays[j]), True, True, None, ""))
            else:
                pieces.append((raw, False, True, None, "it joins array elements that cannot be known here"))
        return _make(pieces, line, col, raw, file)

    def fields(self, whole: Word) -> list | None:
        """The words bash passes for this one after field splitting; None when it is just `whole`."""
        if not self.arrays and not any(_IFS.search(self.parts[k][0]) or not self.parts[k][0] for k in self.splits):
            return None
        fields: list[list] = []
        cur: list = []
        has = False

        def close():
            nonlocal cur, has
            if has:
                fields.append(cur)
            cur, has = [], False

        for k, (text, known, quoted) in enumerate(self.parts):
            if k in self.arrays:
                for m, e in enumerate(self.arrays[k]):
                    if m:
                        close()
                    cur.append(e)
                    has = True
                continue
            o = self.origins[k] or [None] * len(text)
            if k in self.splits and known:
                pos = 0
                for sep in _IFS.finditer(text):
                    if sep.start() > pos:
                        cur.append((text[pos:sep.start()], True, False, o[pos:sep.start()], "", True))
                        has = True
                    close()
                    pos = sep.end()
                if pos < len(text):
                    cur.append((text[pos:], True, False, o[pos:], "", True))
                    has = True
                continue
            cur.append((text, known, quoted, o, self.whys[k]))
            has = has or bool(text) or quoted
        close()
        out = []
        for f in fields:
            if len(f) == 1 and isinstance(f[0], Word):
                out.append(f[0])
                continue
            pieces = []
            for p in f:
                if isinstance(p, Word):
                    po = p.origins or [None] * len(p.text)
                    at = 0
                    for t, k, q in p.parts or [(p.text, p.known, True)]:
                        pieces.append((t, k, q, po[at:at + len(t)] if len(po) >= at + len(t) else None,
                                       "" if k else p.unknown))
                        at += len(t)
                else:
                    pieces.append(p[:5])
            text = "".join(p[0] for p in pieces)
            moved = not isinstance(f[0], Word) and len(f[0]) > 5  # starts with an expansion's text
            out.append(_make(pieces, whole.line, whole.column, text, whole.file, moved))
        return out


def _make(pieces: list, line: int, col: int, raw: str, file: str, moved: bool = False) -> Word:
    """A Word from (text, known, quoted, origins, why) pieces; `moved`: it is placed where its
    first character is written (a word split out of a variable's value), when that is known."""
    parts = [(t, k, q) for t, k, q, _, _ in pieces]
    origins: list = []
    for t, _, _, o, _ in pieces:
        origins += o if o is not None and len(o) == len(t) else [None] * len(t)
    reasons = [why for t, k, _, _, why in pieces if not k]
    text = "".join(p[0] for p in parts)
    first_unknown, pos = -1, 0
    for t, k, _ in parts:
        if not k:
            first_unknown = pos
            break
        pos += len(t)
    if moved and origins and origins[0] is not None:
        line, col, f = origins[0]
        file = f or file
    why = "; ".join(dict.fromkeys(r for r in reasons if r)) or ("it cannot be known here" if reasons else "")
    return Word(text, line, col, raw, why,
                first_unknown, parts, origins=origins if any(origins) else None, file=file)


def _redirection(src: str, i: int) -> tuple[int, str]:
    """End and operator of a redirection at i (`>`, `2>>`, `&>`, `<<-`, `>&2` ...), or (0, "")."""
    m = re.match(r"(\d*|&)(>>|>\||>&|<<-|<<<|<<|<&|<>|>|<)", src[i:i + 8])
    if not m or (m.group(1) == "&" and not m.group(2).startswith(">")):
        return 0, ""
    end = i + m.end()
    if m.group(2) in (">&", "<&"):
        d = re.match(r"\d+-?|-", src[end:end + 8])
        if d:
            return end + d.end(), "fd"
    return end, m.group(2)


def _backtick_end(src: str, i: int) -> int:
    j = i + 1
    while j < len(src) and src[j] != "`":
        j += 2 if src[j] == "\\" else 1
    return min(j + 1, len(src))


def _matching_end(src: str, i: int, open_: str, close: str) -> int:
    """i at `open_` (the '(' of `$(` or the '{' of `${`); index after its matching `close`,
    quotes and backslash escapes respected."""
    depth = 0
    j = i
    while j < len(src):
        c = src[j]
        if c == "\\":
            j += 2
            continue
        if c in "'\"":
            k = src.find(c, j + 1)
            j = len(src) if k < 0 else k + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(src)
