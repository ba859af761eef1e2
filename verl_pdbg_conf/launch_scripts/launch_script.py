"""Launch scripts: find the main_ppo invocations in a shell script (after `ray job submit --`,
through wrapper scripts that pass overrides to a base script), take their Hydra overrides as
bash would pass them, compose the config Hydra would (hydra_config.py) with them and validate
it, with every finding at the script's line and column.

Bash as far as it can be known before the run (shell_words.py): variables and literal arrays
assigned earlier in the script or in a file it sources (found by locate.py), word splitting,
quoting. A value that depends on the environment (`$HOME`, `${MODEL_PATH:-...}` with no
assignment in the script, `$(...)`, `$@`) is an Unknown: composed as a placeholder, then not
judged. A config that cannot be known gives one warning and no judging."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from verl_pdbg_conf.core.document import Unknown
from verl_pdbg_conf.core.findings import Finding, Report, Severity
from verl_pdbg_conf.launch_scripts.hydra_config import ConfigChoice, Entry, choose_config, find_entry
from verl_pdbg_conf.launch_scripts.locate import Script, locate
from verl_pdbg_conf.launch_scripts.shell_words import Command, Reader, Variables, Word

RULE = "launch-script"
E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

_PYTHON = re.compile(r"(?:.*/)?python(?:\d+(?:\.\d+)?)?$")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_OVERRIDE_LIKE = re.compile(r"^(?:\+\+?|~)?[A-Za-z_][\w-]*(?:\.[\w-]+)+(?:=|$)")
_SHELLS = re.compile(r"^#!\s*(?:/usr)?/bin/(?:env\s+)?(?:ba|z|k|da)?sh\b")
_NOT_LAUNCHERS = {"echo", "printf", "cat", "grep", ":", "#", "which", "type", "command", "alias", "export",
                  "declare", "local", "readonly"}
PLACEHOLDER = "__verl_pdbg_unknown_{}__"


def is_launch_script(path: str) -> bool:
    """A .sh/.bash file, or a file without a config extension that starts with a shell shebang."""
    low = path.lower()
    if low.endswith((".sh", ".bash")):
        return True
    if low.endswith((".yaml", ".yml", ".json")):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except OSError:
        return False
    return bool(_SHELLS.match(head.decode("utf-8", "replace")))


@dataclass
class ScriptOverride:
    """One override word as main_ppo receives it."""

    text: str  # the override as composed (placeholder in place of an unknown value)
    line: int
    column: int
    key: str
    unknown: Unknown | None = None  # the value, when it cannot be known here
    placeholder: str = ""
    file: str = ""  # where it is written, when not in the invocation's script (a wrapper's call)


@dataclass
class Invocation:
    file: str
    line: int  # of the python word
    column: int
    module: str
    config_name: str
    overrides: list[ScriptOverride] = field(default_factory=list)
    config_dir: str | None = None  # the primary config's directory; None: verl's own tree
    cwd: str | None = None  # absolute directory the command runs in (launch dir, then `cd`s); None: unknown
    pythonpath: list[str] = field(default_factory=list)  # absolute PYTHONPATH entries the script sets
    findings: list[Finding] = field(default_factory=list)
    entry: Entry | None = None
    flags: dict = field(default_factory=dict)  # --config-path/-name/-dir -> (Word, value)
    unjudged: bool = False  # the config cannot be known: the overrides are not judged
    anchor: Word | None = None  # where a finding about the primary config points
    args: list[Word] = field(default_factory=list)  # the words after the module, as bash passes them
    cmd_line: int = 0  # where the command holding the python word starts
    missing_configs: list = field(default_factory=list)  # (Word, "pkg://x.y") search path packages not here


# ----------------------------------------------------------------------------- reading

MAX_DEPTH = 3  # sourced files and wrapped scripts followed, nested at most this deep



def read_script(path: str, text: str | None = None, positional: list | None = None,
                depth: int = 0, launch_dir: str | None = None,
                pythonpath: list[str] | None = None) -> tuple[list[Invocation], list[Finding]]:
    """The script's main_ppo invocations and the findings about the script itself.
    `positional`: the words a wrapper passes to it (`"$@"`, `$1`...), when known.
    `launch_dir`: the directory the script is run from (default: the current directory; the
    repository root when a user or pre-commit runs it), where `cd`s and `python -m` start."""
    if text is None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return [], []
    script = Script(path, depth)
    variables = Variables()
    variables.positional = positional
    reader = Reader(text, variables)
    invocations: list[Invocation] = []
    findings: list[Finding] = []
    where = Where(os.path.abspath(launch_dir or os.getcwd()), list(pythonpath or []), script.path)
    last: Invocation | None = None
    for cmd in reader.commands():
        words = cmd.words
        inv = _invocation(script, cmd, where)
        if inv is not None:
            invocations.append(inv)
            last = inv
            continue
        first = words[0]
        if last is not None and first.known and _OVERRIDE_LIKE.match(first.text) and not _ASSIGN.match(first.text):
            findings.append(Finding(
                RULE, E, f"`{first.text}` is not passed to {last.module}: the command ended before this line "
                f"(a comment line, an empty line or a space after `\\` breaks the `\\` continuation); "
                "bash runs this line as a command of its own, which fails", path, first.line, first.column,
                hint="keep every override line ending in `\\` with nothing after it, and move comments "
                     "out of the command"))
            continue
        last = None if not _only_assignments(words) else last
        wrapped = _wrapped(script, cmd, where)
        if wrapped is not None:
            invocations += wrapped
            continue
        _track(cmd, variables, where, script)
    return invocations, findings


def _wrapped(script: Script, cmd: Command, where: Where) -> list[Invocation] | None:
    """`bash other.sh ARGS` / `./other.sh ARGS` with `other.sh` next to the script: its
    invocations, with ARGS as its `$@` (a wrapper passing overrides to a base script)."""
    words = cmd.words
    if script.depth >= MAX_DEPTH or cmd.depth > 0:
        return None
    i = 1 if words[0].known and words[0].text in ("bash", "sh") else 0
    while 0 < i < len(words) and words[i].known and words[i].text.startswith("-"):  # bash -x base.sh
        i += 1
    if i >= len(words) - 1 or i == 0 and not words[0].text.endswith((".sh", ".bash")):
        return None  # no arguments: a plain call, not a wrapper
    target, _ = locate(words[i], script, os.path.isfile)
    if target is None or os.path.samefile(target, script.path):
        return None
    args = []
    for w in words[i + 1:]:
        args.append(w if w.file else replace(w, file=script.path))
    invs, _ = read_script(target, positional=args, depth=script.depth + 1, launch_dir=where.cwd,
                          pythonpath=_command_pythonpath(words[:i], where))
    if where.cwd is None:
        for inv in invs:
            inv.cwd = None
    return invs


def _is_assignment(w: Word) -> bool:
    m = _ASSIGN.match(w.text)
    return bool(m) and (w.unknown_at == -1 or w.unknown_at >= m.start(3))


def _after(parts: list, k: int) -> list:
    """The (text, known, quoted) pieces of a word from character k on."""
    out = []
    for text, known, quoted in parts:
        if k >= len(text):
            k -= len(text)
            continue
        out.append((text[k:], known, quoted))
        k = 0
    return out


def _only_assignments(words: list[Word]) -> bool:
    return all(_is_assignment(w) for w in words)


def _track(cmd: Command, variables: Variables, place: Where, script: Script) -> None:
    """Record the variables a command assigns, where a `cd` moves and what PYTHONPATH becomes."""
    words = cmd.words
    where = f"line {cmd.line}"

    def assign(w: Word):
        if not _is_assignment(w):
            return
        m = _ASSIGN.match(w.text)
        name, append, value = m.group(1), m.group(2), m.group(3)
        origins = w.origins[m.start(3):] if w.origins else None
        if name == "PYTHONPATH":
            place.pythonpath = None if cmd.branch else _pythonpath_value(w, place)
        if cmd.branch and w.array is not None and append and variables.arrays.get(name) is not None:
            # `if ...; then A+=(...); fi`: the elements before stay; these are passed only if it runs
            block = "inside an if/case/loop block" if cmd.depth else "after `&&`/`||`"
            maybe = f"appended to {name} {block} ({where}): passed only when that branch runs"
            variables.set_array(name, [replace(e, unknown=e.unknown or maybe, unknown_at=0, maybe=maybe)
                                       for e in w.array], append=True)
        elif cmd.branch:
            block = "inside an if/for/while block or a function" if cmd.depth else "after `&&`/`||`"
            variables.set(name, None, f"${name} is assigned {block} ({where})")
            variables.arrays.pop(name, None)
        elif w.array is not None:
            variables.set_array(name, w.array, append=bool(append))
        elif not w.known:
            variables.set(name, None, f"${name} is set from a value that cannot be known here ({w.unknown})",
                          _after(w.parts, m.start(3)), origins)
        elif append:
            old, _ = variables.get(name)
            old_origins = variables.origins.get(name)
            variables.set(name, None if old is None else old + value, f"${name} is appended to ({where})",
                          origins=old_origins + origins if old_origins is not None and origins is not None else None)
        else:
            variables.set(name, value, origins=origins)

    if _only_assignments(words):
        for w in words:
            assign(w)
        return
    head = words[0].text if words[0].known else ""
    if head in ("export", "declare", "typeset", "local", "readonly"):
        for w in words[1:]:
            if not w.text.startswith("-"):
                assign(w)
    elif head == "unset":
        for w in words[1:]:
            variables.values.pop(w.text, None)
            variables.arrays.pop(w.text, None)
    elif head in ("source", ".") and len(words) > 1:
        _source(words[1], variables, script, cmd, where, place)
    elif head in ("read", "mapfile", "readarray", "getopts"):
        for w in words[1:]:
            if re.fullmatch(r"[A-Za-z_]\w*", w.text):
                variables.set(w.text, None, f"${w.text} is read at launch time ({where})")
    elif head in ("cd", "pushd"):
        args = [w for w in words[1:] if not (w.known and w.text in ("-P", "-L", "--"))]
        if head == "pushd":
            place.stack.append(place.cwd)
        place.cwd = None if cmd.branch or len(args) != 1 else place.resolve(args[0])
    elif head == "popd":
        place.cwd = place.stack.pop() if place.stack and cmd.depth == 0 else None


@dataclass
class Where:
    """Where the next command runs and what it imports: the directory (absolute; None when a
    `cd` goes where this check cannot know) and the PYTHONPATH entries the script set (absolute;
    None when set in a way that cannot be known)."""

    cwd: str | None
    pythonpath: list[str] | None
    script0: str  # `$0`: the script bash runs (a sourced file keeps its caller's)
    stack: list = field(default_factory=list)  # pushd's directories

    def resolve(self, w: Word, base: str | None = None) -> str | None:
        """The absolute directory a word names, from `base` (default: the current directory);
        `$(dirname "$0")`-style and `$PWD`/`$(pwd)` prefixes are known here; None otherwise."""
        base = self.cwd if base is None else base
        if w.known:
            if os.path.isabs(w.text):
                return os.path.normpath(w.text)
            return None if base is None or w.text in ("", "-") else os.path.normpath(os.path.join(base, w.text))
        parts = [p for p in w.parts if p[0]]
        if not parts or parts[0][1] or any(not known for _, known, _ in parts[1:]):
            return None  # unknown other than a leading prefix
        head, tail = parts[0][0], "".join(p[0] for p in parts[1:])
        if _PWD.fullmatch(head):
            start = self.cwd
        else:
            m = _SCRIPT_DIR.search(head)
            if m is None:
                return None
            start = os.path.normpath(os.path.dirname(os.path.abspath(self.script0)) + (m.group(1) or ""))
        if start is None:
            return None
        return os.path.normpath(start + tail) if tail.startswith("/") or not tail else None


# `$PWD`, `$(pwd)`: the current directory; `$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")/.." &&
# pwd)`, `$(dirname $(realpath $0))`: the script's directory, with the path inside the substitution.
_PWD = re.compile(r'"?(?:\$PWD|\$\{PWD\}|\$\(\s*pwd\s*\)|`\s*pwd\s*`)"?')
_SCRIPT_DIR = re.compile(r'^[`$]\(?.*?dirname\s+(?:--\s+)?"?(?:\$\(\s*(?:realpath|readlink\s+-f)\s+"?)?'
                         r'(?:\$0|\$\{0\}|\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE)"?\)?"?\s*\)?"?'
                         r'((?:/\.\.?)*)/?"?\s*(?:(?:&&|;)\s*pwd\s*)?\)?`?$', re.S)


def _pythonpath_value(w: Word, place: Where) -> list[str] | None:
    """The entries `PYTHONPATH=a:$PYTHONPATH:b` gives (the inherited `$PYTHONPATH` keeps the
    entries set so far); an entry that cannot be known is left out."""
    old = place.pythonpath or []
    value_parts = _after(w.parts, w.text.index("=") + 1)
    segments: list[list] = [[]]
    for text, known, quoted in value_parts:
        if not known:
            segments[-1].append((text, known, quoted))
            continue
        pieces = text.split(":")
        for k, piece in enumerate(pieces):
            if k:
                segments.append([])
            if piece:
                segments[-1].append((piece, True, quoted))
    out: list[str] = []
    for seg in segments:
        if not seg:
            continue
        if len(seg) == 1 and not seg[0][1] and re.fullmatch(r'"?\$\{?PYTHONPATH(?::?[+-][^}]*)?\}?"?', seg[0][0]):
            out += [p for p in old if p not in out]  # the inherited value
            continue
        text = "".join(t for t, _, _ in seg)
        word = Word(text, w.line, w.column, text, "" if all(k for _, k, _ in seg) else "unknown",
                    parts=seg)
        d = place.resolve(word)
        if d is not None and d not in out:
            out.append(d)
    return out


def _command_pythonpath(prefix: list[Word], place: Where) -> list[str] | None:
    """PYTHONPATH for one command: the script's, or `PYTHONPATH=x` written before the command."""
    pp = place.pythonpath
    for w in prefix:
        if _is_assignment(w) and w.text.startswith("PYTHONPATH="):
            pp = _pythonpath_value(w, place)
    return pp


def _source(w: Word, variables: Variables, script: Script, cmd: Command, where: str, place: Where) -> None:
    """`source FILE` / `. FILE`: a file found next to the script (or in its repository) is read for
    its variables; otherwise every variable assigned so far may have been changed by it."""
    found, _ = locate(w, script, os.path.isfile) if cmd.depth == 0 and script.depth < MAX_DEPTH else (None, False)
    if found is None or os.path.getsize(found) > 1 << 20:
        variables.taint_all(f"`source {w.raw}` ({where}) may change it")
        return
    try:
        with open(found, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        variables.taint_all(f"`source {w.raw}` ({where}) may change it")
        return
    inner = Script(found, script.depth + 1)
    for c in Reader(text, variables, file=found).commands():  # the same shell: its `cd`s and PYTHONPATH count
        _track(c, variables, place, inner)


def _invocation(script: Script, cmd: Command, where: Where) -> Invocation | None:
    words = cmd.words
    if words[0].known and words[0].text in _NOT_LAUNCHERS:
        return None
    for i, w in enumerate(words):
        if not _is_interpreter(w, words[i + 1] if i + 1 < len(words) else None):
            continue
        module, j = _python_module(words, i + 1)
        if module is None:
            continue
        pythonpath = list(_command_pythonpath(words[:i], where) or [])
        entry = find_entry(module, script, where.cwd, pythonpath)
        if entry is None:
            return None
        inv = Invocation(script.path, w.line, w.column, entry.module, entry.config_name, cwd=where.cwd,
                         pythonpath=pythonpath, entry=entry, args=words[j:],
                         cmd_line=cmd.line)
        _hydra_args(inv, words[j:])
        _resolve_config(inv, script, where)
        return inv
    return None


# An interpreter named by a variable or a command substitution: `$PYTHON`, `"${PYTHON_BIN}"`,
# `${PY:-python3}`, `$(which python3)`, `` `command -v python` ``.
_PYTHON_VAR = re.compile(r'^"?(?:\$\{?(?:[Pp][Yy]\w*|\w*(?:PYTHON|[Pp]ython)\w*)(?::?[-=][^}]*)?\}?|'
                         r'(?:\$\(|`)\s*(?:which|command\s+-v|type\s+-p)\s+python[\d.]*\s*(?:\)|`))"?$')


# One expansion that is the whole word (`$RUN`, `"${LAUNCH[@]}"` set in an if/else, `$(...)`): followed
# by `-m MODULE`, it can only be a Python launcher (`uv run python3`, a venv's python).
_WHOLE_EXPANSION = re.compile(r'^"?(?:\$\{?[A-Za-z_]\w*(?:\[[@*]\])?\}?|\$\([^()]*\))"?$')


def _is_interpreter(w: Word, nxt: Word | None) -> bool:
    if w.known:
        return bool(_PYTHON.match(w.text))
    if _PYTHON_VAR.match(w.raw):
        return True
    return bool(_WHOLE_EXPANSION.match(w.raw)) and nxt is not None and nxt.known and \
        bool(re.fullmatch(r"-[A-Za-z]*m\S*", nxt.text))


def _python_module(words: list[Word], i: int) -> tuple[str | None, int]:
    """After `python`: skip interpreter options; the module of `-m MOD` (or the script path
    `.../verl/trainer/main_ppo.py`), and the index of its first argument."""
    while i < len(words):
        w = words[i]
        if not w.known:
            return None, i
        t = w.text
        if t.startswith("--"):  # --version, --help: not a training run
            return None, i
        if t.startswith("-") and len(t) > 1:
            k = 1
            while k < len(t):
                c = t[k]
                if c == "m":
                    if k + 1 < len(t):
                        return t[k + 1:], i + 1
                    if i + 1 < len(words) and words[i + 1].known:
                        return words[i + 1].text, i + 2
                    return None, i
                if c == "c":
                    return None, i
                if c in "XW":
                    if k + 1 == len(t):
                        i += 1  # the option's argument is the next word
                    break
                k += 1
            i += 1
            continue
        if t.endswith("verl/trainer/main_ppo.py"):
            return "verl.trainer.main_ppo", i + 1
        return t, i + 1
    return None, i


def _hydra_args(inv: Invocation, words: list[Word]) -> None:
    k = 0
    branches: dict[str, list[Word]] = {}  # words passed only when a branch runs, by the branch
    while k < len(words):
        w = words[k]
        t = w.text
        if w.maybe:
            branches.setdefault(w.maybe, []).append(w)
            k += 1
            continue
        if not w.known and w.unknown_at == 0 and (t in ("$@", "$*", '"$@"') or t.startswith(("$@", "$*"))
                                                  or re.fullmatch(r"\$\{?[@*]\}?", t)):
            inv.findings.append(_at(inv, w, I, "the script's own arguments (`$@`) are appended here; overrides "
                                    "given on its command line are not seen by this check",
                                    "validate with them: verl-pdbg-validate --verl -- OVERRIDES"))
            k += 1
            continue
        if t.strip() == "" and w.known:
            inv.findings.append(_at(inv, w, E, "a space after `\\` makes an argument of a blank and ends the "
                                    "command at this line: the lines after it are not passed to main_ppo",
                                    "delete the trailing whitespace after the backslash"))
            k += 1
            continue
        if t in ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd") and k + 1 < len(words):
            _hydra_flag(inv, t, words[k + 1])
            k += 2
            continue
        m = re.match(r"^(--config-path|--config-name|--config-dir|-cp|-cn|-cd)=(.*)$", t, re.S)
        if m:
            _hydra_flag(inv, m.group(1), w, m.group(2))
            k += 1
            continue
        if t.startswith("-") and w.known:  # --multirun, --cfg job, --resolve ...: not overrides
            k += 2 if t in ("--cfg", "-c", "--package", "-p", "--info", "-i") and k + 1 < len(words) else 1
            continue
        _override(inv, w)
        k += 1
    for why, ws in branches.items():  # one note per branch, not one per word
        inv.findings.append(_at(inv, ws[0], I, f"{len(ws)} argument(s) {why}; not checked", ""))


_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name",
          "--config-dir": "dir", "-cd": "dir"}


def _hydra_flag(inv: Invocation, flag: str, w: Word, value: str | None = None) -> None:
    """Record --config-path/-name/-dir (the last one wins, as in argparse); resolved once all
    arguments are read (a relative path's meaning depends on the entry point)."""
    vw = w
    if value is not None:  # `--flag=VALUE`: the value as a word of its own (its known and unknown parts)
        vw = replace(w, text=value, raw=w.raw.partition("=")[2], parts=_after(w.parts, len(flag) + 1),
                     unknown_at=max(-1, w.unknown_at - len(flag) - 1))
    inv.flags[_FLAGS[flag]] = (w, vw.text, flag, vw)


def _resolve_config(inv: Invocation, script: Script, where: Where) -> None:
    choice: ConfigChoice = choose_config(inv.entry, inv.flags, script, Word(inv.module, inv.line, inv.column),
                                         where.resolve)
    inv.config_name, inv.config_dir, inv.anchor = choice.config_name, choice.config_dir, choice.anchor
    inv.unjudged = choice.unjudged
    inv.findings += [_at(inv, n.word, n.severity, n.message, n.hint) for n in choice.notes]


def _override(inv: Invocation, w: Word) -> None:
    t = w.text
    if w.brace:
        inv.findings.append(_at(inv, w, E, f"bash brace-expands the unquoted `{{...,...}}` in `{w.raw}` into "
                                "several words, so main_ppo does not receive this override as written",
                                f"quote it: '{w.text}'"))
    key, eq, value = t.partition("=")
    if not w.known and (w.unknown_at < len(key) + len(eq) or not eq):
        inv.findings.append(_at(inv, w, I, f"`{w.raw}` cannot be known here ({w.unknown}); it is not checked",
                                ""))
        return
    bare = key.lstrip("+~")
    if bare == "hydra.searchpath" and w.known:
        inv.missing_configs += [(w, f"pkg://{p}") for p in re.findall(r"pkg://([\w.]+)", value)
                                if not p.startswith("verl.") and not _package_here(p)]
    if key.startswith("hydra.") or bare.startswith("hydra."):
        return  # Hydra's own settings (run dir, job name): nothing this tool checks
    if w.known:
        inv.overrides.append(ScriptOverride(t, w.line, w.column, bare, file=w.file))
        return
    ph = PLACEHOLDER.format(len(inv.overrides))
    shown = _shown(w.raw.partition("=")[2] or value)
    inv.overrides.append(ScriptOverride(f"{key}={ph}", w.line, w.column, bare, Unknown(shown, w.unknown), ph,
                                        file=w.file))


def _package_here(dotted: str) -> bool:
    """Whether package `dotted` (a `pkg://` search path entry) is installed here: found as Python would
    find it, without importing it (its top package's location, then the folders under it)."""
    import importlib.util

    top, *rest = dotted.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    return any(os.path.isdir(os.path.join(d, *rest)) for d in spec.submodule_search_locations or [])


def _not_installed(inv: Invocation, found: list[Finding]) -> list[Finding]:
    """A `hydra.searchpath` package that is not installed here: the overrides that do not compose
    without its configs are one finding (the root cause), not one each."""
    if not inv.missing_configs:
        return found
    w, pkg = inv.missing_configs[0]
    refused = [f for f in found if f.rule == "override" and f.severity is E]
    if not refused:
        return found
    note = _at(inv, w, W, f"configs from {pkg} are not installed here: {len(refused)} override(s) not judged "
               f"(the first: line {refused[0].line})", f"lint where {pkg[6:]} is installed")
    return [note] + [f for f in found if f not in refused]


def _shown(raw: str) -> str:
    """The value as written, quotes dropped and `${NAME...}` shown as `$NAME` (an Unknown must not
    look like an OmegaConf interpolation)."""
    raw = raw.replace('"', "").replace("'", "")
    return re.sub(r"\$\{([^}]*)\}", lambda m: "$" + re.split(r"[^A-Za-z0-9_@*#]", m.group(1) or "?")[0], raw)


def _at(inv: Invocation, w: Word, sev: Severity, msg: str, hint: str) -> Finding:
    return Finding(RULE, sev, msg, w.file or inv.file, w.line, w.column, "", hint)


# ----------------------------------------------------------------------------- composing

@dataclass
class ComposedInvocation:
    invocation: Invocation
    document: object  # Document | None
    findings: list[Finding]


_PRIMARY: dict = {}  # (config_dir, config_name) -> the reason the primary config does not compose, or ""


def primary_problem(inv: Invocation, release: str | None = None) -> str:
    """Why the invocation's primary config does not compose on its own (empty: it does).
    Cached: every script of a repository shares a handful of primary configs."""
    key = (inv.config_dir, inv.config_name, release)
    if key not in _PRIMARY:
        from verl_pdbg_conf.verl_facts.compose import compose_verl

        result = compose_verl([], [], config_name=inv.config_name, config_dir=inv.config_dir, release=release)
        errs = [f for f in result.findings if f.severity is Severity.ERROR]
        _PRIMARY[key] = "" if result.document is not None and not errs else \
            (errs[0].message if errs else "it does not compose")
    return _PRIMARY[key]


def compose_invocation(inv: Invocation, release: str | None = None) -> ComposedInvocation:
    """Compose verl's config (of `release`, default: the judging one) with the invocation's
    overrides; unknown values become Unknown. An invocation whose config cannot be known
    (`unjudged`) composes nothing."""
    from verl_pdbg_conf.verl_facts.compose import Override, compose_verl

    if inv.unjudged:
        return ComposedInvocation(inv, None, [])
    if inv.config_dir is None:  # verl's own tree: its primary configs are known per release
        from verl_pdbg_conf.core.suggest import did_you_mean
        from verl_pdbg_conf.verl_facts import catalog, releases

        rel = release or releases.judging()[0]
        names = catalog.primary_configs(rel) if catalog.known(rel) else ()
        if names and inv.config_name not in names:
            w = inv.anchor or Word(inv.module, inv.line, inv.column)
            guess = did_you_mean(inv.config_name, [n for n in names if not n.startswith("_")])
            return ComposedInvocation(inv, None, [_at(
                inv, w, E, f"verl {catalog.version(rel)} has no primary config `{inv.config_name}` in its "
                f"trainer/config: Hydra "
                f"fails with `Cannot find primary config '{inv.config_name}'`; the overrides are not judged",
                "one of " + ", ".join(n for n in names if not n.startswith("_")) + guess)])
    overrides = [Override(o.text, o.file or inv.file, o.line, o.column) for o in inv.overrides]
    result = compose_verl([], overrides, config_name=inv.config_name, config_dir=inv.config_dir, release=release)
    problem = primary_problem(inv, release) if result.document is None else ""
    if problem:  # the primary config itself fails: one finding, not one per override
        w = inv.anchor or Word(inv.module, inv.line, inv.column)
        where = f"{inv.config_dir}/{inv.config_name}.yaml" if inv.config_dir else \
            f"verl's {inv.config_name}"
        problem = re.sub(r"^\S+ does not compose: ", "", problem).rstrip(". ")
        return ComposedInvocation(inv, None, [_at(inv, w, E, f"Hydra cannot compose {where}: {problem}; the "
                                                  "overrides are not judged", "check --config-path and --config-name")])
    doc = result.document
    if doc is not None:
        unknowns = {o.placeholder: o.unknown for o in inv.overrides if o.unknown is not None}
        if unknowns:
            doc.data = _replace(doc.data, unknowns)
        if inv.cwd is None:
            doc.data = _unknown_relative_config_path(doc.data)
    shown = {o.placeholder: o.unknown for o in inv.overrides if o.unknown is not None}
    findings = [_unplaceholder(f, shown) for f in result.findings] if shown else list(result.findings)
    return ComposedInvocation(inv, doc, findings)


def _unplaceholder(f: Finding, shown: dict) -> Finding:
    """A composition message quotes the override as composed: put the script's text back."""
    if "__verl_pdbg_unknown_" not in f.message + f.hint:
        return f
    msg, hint = f.message, f.hint
    for ph, u in shown.items():
        msg, hint = msg.replace(ph, str(u)), hint.replace(ph, str(u))
    return f.replace(message=msg, hint=hint)


def _replace(data, unknowns: dict):
    if isinstance(data, dict):
        return {k: _replace(v, unknowns) for k, v in data.items()}
    if isinstance(data, list):
        return [_replace(v, unknowns) for v in data]
    if isinstance(data, str) and "__verl_pdbg_unknown_" in data:
        for ph, u in unknowns.items():
            if ph in data:
                return u if data == ph else Unknown(data.replace(ph, str(u)), u.reason)
    return data


def _unknown_relative_config_path(data, key=None):
    if isinstance(data, dict):
        return {k: _unknown_relative_config_path(v, k) for k, v in data.items()}
    if isinstance(data, list):
        return [_unknown_relative_config_path(v) for v in data]
    if key == "config_path" and isinstance(data, str) and data and not os.path.isabs(data) \
            and not isinstance(data, Unknown) and not data.startswith("${"):
        return Unknown(data, "relative to the directory the script `cd`s to, which cannot be known here")
    return data


def validate_script(path: str, options=None) -> Report:
    """Every main_ppo invocation in the script, composed and validated; findings at script positions."""
    from verl_pdbg_conf.context import Options
    from verl_pdbg_conf.core.loaders import read_text
    from verl_pdbg_conf.validate import validate_document

    options = options or Options()
    report = Report(files=[path])
    text, errs = read_text(path, "launch script")
    if text is None:
        report.findings += errs
        return report
    invocations, findings = read_script(path, text, launch_dir=options.base_dir)
    report.findings += findings
    if not invocations:
        report.findings.append(Finding(
            "no-profiler-config", I, "no `python3 -m verl.trainer.main_ppo` invocation in this script: nothing to "
            "check", path, 1, 1))
        return report
    for inv in invocations:
        if inv.unjudged:  # one root cause, one finding: no notes about words that are not judged anyway
            report.findings += [f for f in inv.findings if f.severity is not I]
            continue
        report.findings += inv.findings
        from verl_pdbg_conf.checks.verl_support import one_per_cause
        from verl_pdbg_conf.core.cascade import fold
        from verl_pdbg_conf.verl_facts.source import for_invocation

        opts = options.for_source(for_invocation(inv, options))  # the verl this launch imports
        report.verl_sources.append(opts.source)
        composed = compose_invocation(inv, opts.release[0])
        found = _not_installed(inv, [_relocate(f, inv) for f in composed.findings])
        if composed.document is not None:
            if inv.cwd and inv.cwd != opts.base_dir:
                opts = opts.replace(base_dir=os.path.join(options.base_dir, inv.cwd))
            sub = validate_document(composed.document, opts)
            found += [_relocate(f, inv) for f in sub.findings]
            report.files += [f for f in sub.files if f not in report.files and not f.startswith("<")]
        report.findings += fold(one_per_cause(found, opts.target))
    report.findings = list(dict.fromkeys(report.findings))  # a base script reached twice through wrappers
    return report


def _relocate(f: Finding, inv: Invocation) -> Finding:
    """A finding about a value verl's defaults set (no line of its own) points at the invocation."""
    if not f.file.startswith("<"):
        return f
    return f.replace(file=inv.file, line=inv.line, column=inv.column,
                   message=f.message + f" (set by verl's {inv.config_name} defaults, not by this script)")
