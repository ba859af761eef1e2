"""A small POSIX-shell reader for launch scripts: splits a script into simple commands
and words the way bash would before running them (line continuations, quoting,
comments, heredocs, `$VAR` / `${VAR:-default}` / `$(...)`), keeping the line and column
where each word starts. It never runs anything: a word whose value depends on the
environment or on a command's output is marked unknown, with the reason.

Bash arrays written literally in the script (`A=(x "y z")`, `A+=(...)`, `declare -a A=(...)`)
are kept with each element's own position, and `"${A[@]}"` / `${A[*]}` expand to those
elements; an unquoted `$VAR` whose known value holds blanks is split into words, as bash does.

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


class Variables:
    """Shell variables assigned in the script so far. A name absent here is an environment
    variable (unknown); a name mapped to None was assigned in a way that cannot be known."""

    def __init__(self):
        self.values: dict[str, str | None] = {}
        self.why: dict[str, str] = {}
        self.arrays: dict[str, list | None] = {}  # name -> element Words (None: cannot be known)
        self.positional: list | None = None  # $1.. / "$@" when a wrapper script's call is known
        self.parts: dict[str, list] = {}  # name -> pieces of a value that cannot be known

    def get(self, name: str) -> tuple[str | None, str]:
        if name in self.values:
            v = self.values[name]
            return v, ("" if v is not None else self.why.get(name, f"${name} cannot be known here"))
        return None, f"${name} comes from the environment"

    def set(self, name: str, value: str | None, why: str = "", parts: list | None = None) -> None:
        """`parts`: for a value that cannot be known, its (text, known, quoted) pieces, so that
        `$NAME` keeps the known tail (`$(pwd)/examples/config` -> unknown + `/examples/config`)."""
        self.values[name] = value
        self.parts.pop(name, None)
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

    def __init__(self, src: str, variables: Variables | None = None):
        self.src = src
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
        while i < self.n:
            c = self.src[i]
            if c in " \t\r":
                i += 1
                continue
            if c == "\\" and self.src.startswith("\\\n", i):
                i += 2
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
            yield Command(words, line, self.depth)
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
        start = i
        line, col = self.lines.pos(i)
        parts: list[tuple[str, bool, bool]] = []
        reasons: list[str] = []
        brace = False
        src, n = self.src, self.n
        self._expanded = []  # (index in parts, [Word] | None) of whole-word expansions
        self._parts = parts

        def lit(s: str, quoted: bool = False):
            parts.append((s, True, quoted))

        def unk(s: str, why: str, quoted: bool = False):
            parts.append((s, False, quoted))
            reasons.append(why)

        while i < n:
            c = src[i]
            if c in " \t\r\n;&|()<>":
                break
            if c == "\\":
                if src.startswith("\\\n", i):
                    i += 2
                elif i + 1 < n:
                    lit(src[i + 1], True)
                    i += 2
                else:
                    i += 1
            elif c == "'":
                j = src.find("'", i + 1)
                j = n if j < 0 else j
                lit(src[i + 1:j], True)
                i = j + 1
            elif c == '"':
                i = self._double(i + 1, lit, unk)
            elif c == "$":
                i = self._dollar(i, lit, unk, quoted=False)
            elif c == "`":
                j = _backtick_end(src, i)
                unk(src[i:j], f"command substitution {src[i:j]} runs at launch time")
                i = j
            elif c == "~" and i == start and (i + 1 >= n or src[i + 1] in "/ \t\n;&|"):
                unk("~", "~ is the launching user's home directory")
                i += 1
            elif c == "{" and re.match(r"\{[^{}\s'\"]*,[^{}\s'\"]*\}", src[i:]):
                brace = True
                lit(c)
                i += 1
            else:
                j = i + 1
                while j < n and src[j] not in " \t\r\n;&|()<>\\'\"$`{":
                    j += 1
                lit(src[i:j])
                i = j
        text = "".join(p for p, _, _ in parts)
        split = None
        if self._expanded:
            split = self._split(parts, line, col, src[start:i])
            if split is None:  # an array expanded inside a longer word: not followed
                return Word(text, line, col, src[start:i], "an array expansion inside a longer word is not followed",
                            0, parts, brace), i
        first_unknown = -1
        pos = 0
        for p, known, _ in parts:
            if not known:
                first_unknown = pos
                break
            pos += len(p)
        return Word(text, line, col, src[start:i], "; ".join(dict.fromkeys(reasons)), first_unknown, parts,
                    brace, split=split), i

    def _split(self, parts, line: int, col: int, raw: str) -> list | None:
        """The words an expansion that fills the whole word becomes (`"${A[@]}"`, `${A[*]}`, an
        unquoted `$V` with blanks); None when the expansion is only part of a longer word."""
        (k, ws), = self._expanded[-1:]
        if any(p for j, (p, _, _) in enumerate(parts) if j != k) or len(self._expanded) > 1:
            return None
        return ws if ws is not None else [Word(t, line, col, raw) for t in parts[k][0].split()]

    def _double(self, i: int, lit, unk) -> int:
        src, n = self.src, self.n
        buf = []
        while i < n and src[i] != '"':
            c = src[i]
            if c == "\\" and i + 1 < n and src[i + 1] in '$`"\\\n':
                if src[i + 1] != "\n":
                    buf.append(src[i + 1])
                i += 2
            elif c == "$" or c == "`":
                if buf:
                    lit("".join(buf), True)
                    buf = []
                if c == "$":
                    i = self._dollar(i, lit, unk, quoted=True)
                else:
                    j = _backtick_end(src, i)
                    unk(src[i:j], f"command substitution {src[i:j]} runs at launch time", True)
                    i = j
            else:
                buf.append(c)
                i += 1
        lit("".join(buf), True)
        return i + 1

    def _dollar(self, i: int, lit, unk, quoted: bool) -> int:
        src, n = self.src, self.n
        nxt = src[i + 1] if i + 1 < n else ""
        if nxt == "(":
            j = _matching_end(src, i + 1, "(", ")")
            what = "arithmetic" if src.startswith("$((", i) else "command substitution"
            unk(src[i:j], f"{what} {src[i:j]} runs at launch time", quoted)
            return j
        if nxt == "{":
            j = _matching_end(src, i + 1, "{", "}")
            self._param(src[i + 2:j - 1], src[i:j], lit, unk, quoted)
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
            lit("".join(buf), True)
            return j + 1
        m = _NAME.match(src, i + 1)
        if m:
            self._param(m.group(0), src[i:m.end()], lit, unk, quoted)
            return m.end()
        if nxt in ("@", "*") and self.vars.positional is not None:
            self._expanded.append((len(self._parts), list(self.vars.positional)))
            lit("", quoted)
            return i + 2
        if nxt and nxt in "123456789" and self.vars.positional is not None:
            k = int(nxt) - 1
            if k < len(self.vars.positional) and self.vars.positional[k].known:
                lit(self.vars.positional[k].text, quoted)
            else:
                unk(src[i:i + 2], f"${nxt} is not given by the caller", quoted)
            return i + 2
        if nxt and nxt in _SPECIAL:
            what = {"@": "the script's arguments", "*": "the script's arguments", "#": "the argument count",
                    "?": "the last exit status", "$": "the shell's pid", "!": "the last background pid",
                    "-": "the shell's flags"}.get(nxt, f"the script's argument ${nxt}")
            unk(src[i:i + 2], f"${nxt} is {what}", quoted)
            return i + 2
        lit("$", quoted)
        return i + 1

    def _param(self, body: str, raw: str, lit, unk, quoted: bool) -> None:
        a = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|\d+)\]", body)
        if a:
            elements, why = self.vars.get_array(a.group(1))
            if elements is None and not why:  # a scalar used as an array
                return self._param(a.group(1), raw, lit, unk, quoted)
            if elements is None:
                unk(raw, why, quoted)
            elif a.group(2).isdigit():
                k = int(a.group(2))
                if k < len(elements) and elements[k].known:
                    lit(elements[k].text, quoted)
                else:
                    unk(raw, f"{raw} is not a known element", quoted)
            elif a.group(2) == "*" and quoted:
                if all(e.known for e in elements):
                    lit(" ".join(e.text for e in elements), quoted)
                else:
                    unk(raw, f"{raw} joins elements that cannot be known here", quoted)
            else:
                self._expanded.append((len(self._parts), list(elements)))
                lit("", quoted)
            return
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])(.*))?", body, re.S)
        if not m:
            unk(raw, f"{raw} is expanded at launch time", quoted)
            return
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value, why = self.vars.get(name)
        if op is None:
            if value is None and name in self.vars.parts:
                for text, known, _ in self.vars.parts[name]:
                    lit(text, quoted) if known else unk(text, why, quoted)
            elif value is None:
                unk(raw, why, quoted)
            elif not quoted and re.search(r"\s", value.strip()):  # word splitting
                self._expanded.append((len(self._parts), None))
                lit(value, quoted)
            else:
                lit(value, quoted)
        elif op in (":-", "-", ":=", "="):
            if value is not None and (value != "" or op in ("-", "=")):
                lit(value, quoted)
            elif name in self.vars.values and value is not None:  # set but empty with :-
                lit(self._expand_text(arg), quoted)
            else:
                default = self._expand_text(arg)
                unk(raw, f"{why} (default {default!r} when unset)", quoted)
        else:
            unk(raw, f"{raw} depends on whether ${name} is set", quoted)

    def _expand_text(self, s: str) -> str:
        """Expand a `${VAR:-default}` default (quotes removed) for the reason text."""
        w, _ = Reader(s.replace(" ", "\\ "), self.vars).word(0)
        return w.text


_ARRAY_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


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
