"""Launch scripts: find the `python3 -m verl.trainer.main_ppo ...` invocations in a shell
script, take their Hydra overrides as bash would pass them, compose verl's config with them
and validate it, with every finding at the script's line and column.

A value that depends on the environment (`$HOME`, `${MODEL_PATH:-...}` with no assignment in
the script, `$(...)`, `$@`) is an Unknown: composed as a placeholder, then not judged.
Simple `VAR=value` assignments earlier in the script are substituted."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from verl_pdbg_conf.core.document import Unknown
from verl_pdbg_conf.core.findings import Finding, Report, Severity
from verl_pdbg_conf.launch_scripts.shell_words import Command, Reader, Variables, Word

RULE = "launch-script"
E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

# Entry points this tool composes, with the config each one loads.
ENTRY_POINTS = {"verl.trainer.main_ppo": "ppo_trainer"}
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


@dataclass
class Invocation:
    file: str
    line: int  # of the python word
    column: int
    module: str
    config_name: str
    overrides: list[ScriptOverride] = field(default_factory=list)
    config_dir: str | None = None  # --config-path, when given
    cwd: str | None = None  # directory after the script's `cd`s ("" = unknown); None = launch dir
    findings: list[Finding] = field(default_factory=list)


# ----------------------------------------------------------------------------- reading

def read_script(path: str, text: str | None = None) -> tuple[list[Invocation], list[Finding]]:
    """The script's main_ppo invocations and the findings about the script itself."""
    if text is None:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    variables = Variables()
    reader = Reader(text, variables)
    invocations: list[Invocation] = []
    findings: list[Finding] = []
    cwd: str | None = None
    last: Invocation | None = None
    for cmd in reader.commands():
        words = cmd.words
        inv = _invocation(path, cmd, cwd)
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
        cwd = _track(cmd, variables, cwd)
    return invocations, findings


def _is_assignment(w: Word) -> bool:
    m = _ASSIGN.match(w.text)
    return bool(m) and (w.unknown_at == -1 or w.unknown_at >= m.start(3))


def _only_assignments(words: list[Word]) -> bool:
    return all(_is_assignment(w) for w in words)


def _track(cmd: Command, variables: Variables, cwd: str | None) -> str | None:
    """Record the variables a command assigns, and where a `cd` moves; returns the new cwd."""
    words = cmd.words
    where = f"line {cmd.line}"

    def assign(w: Word):
        if not _is_assignment(w):
            return
        m = _ASSIGN.match(w.text)
        name, append, value = m.group(1), m.group(2), m.group(3)
        if cmd.depth > 0:
            variables.set(name, None, f"${name} is assigned inside an if/for/while block or a function ({where})")
        elif not w.known:
            variables.set(name, None, f"${name} is set from a value that cannot be known here ({w.unknown})")
        elif append:
            old, _ = variables.get(name)
            variables.set(name, None if old is None else old + value, f"${name} is appended to ({where})")
        else:
            variables.set(name, value)

    if _only_assignments(words):
        for w in words:
            assign(w)
        return cwd
    head = words[0].text if words[0].known else ""
    if head in ("export", "declare", "typeset", "local", "readonly"):
        for w in words[1:]:
            if not w.text.startswith("-"):
                assign(w)
    elif head == "unset":
        for w in words[1:]:
            variables.values.pop(w.text, None)
    elif head in ("source", "."):
        variables.taint_all(f"`{' '.join(w.raw for w in words)}` ({where}) may change it")
    elif head in ("read", "mapfile", "readarray", "getopts"):
        for w in words[1:]:
            if re.fullmatch(r"[A-Za-z_]\w*", w.text):
                variables.set(w.text, None, f"${w.text} is read at launch time ({where})")
    elif head in ("cd", "pushd"):
        target = words[1] if len(words) > 1 else None
        if target is None or not target.known or cmd.depth > 0 or cwd == "":
            return ""
        return os.path.join(cwd or "", target.text) if not os.path.isabs(target.text) else target.text
    elif head == "popd":
        return ""
    return cwd


def _invocation(path: str, cmd: Command, cwd: str | None) -> Invocation | None:
    words = cmd.words
    if words[0].known and words[0].text in _NOT_LAUNCHERS:
        return None
    for i, w in enumerate(words):
        if not (w.known and _PYTHON.match(w.text)):
            continue
        module, j = _python_module(words, i + 1)
        if module is None:
            continue
        if module not in ENTRY_POINTS:
            return None
        inv = Invocation(path, w.line, w.column, module, ENTRY_POINTS[module], cwd=cwd)
        _hydra_args(inv, words[j:])
        return inv
    return None


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
    while k < len(words):
        w = words[k]
        t = w.text
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
        m = re.match(r"^(--config-path|--config-name|--config-dir)=(.*)$", t)
        if m:
            _hydra_flag(inv, m.group(1), w, m.group(2))
            k += 1
            continue
        if t.startswith("-") and w.known:  # --multirun, --cfg job, --resolve ...: not overrides
            k += 2 if t in ("--cfg", "-c", "--package", "-p", "--info", "-i") and k + 1 < len(words) else 1
            continue
        _override(inv, w)
        k += 1


def _hydra_flag(inv: Invocation, flag: str, w: Word, value: str | None = None) -> None:
    value = w.text if value is None else value
    if not w.known:
        inv.findings.append(_at(inv, w, W, f"{flag} is {w.raw}, which cannot be known here ({w.unknown}); "
                                "verl's default config is composed instead", "pass it literally to check it"))
        return
    if flag in ("--config-name", "-cn"):
        inv.config_name = value[:-5] if value.endswith(".yaml") else value
    elif flag in ("--config-path", "-cp"):
        base = os.path.dirname(os.path.abspath(inv.file))
        inv.config_dir = value if os.path.isabs(value) else os.path.normpath(os.path.join(base, value))
    else:
        inv.findings.append(_at(inv, w, I, f"{flag} {value}: its configs are not on this check's search path",
                                ""))


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
    if key.startswith("hydra.") or bare.startswith("hydra."):
        return  # Hydra's own settings (run dir, job name): nothing this tool checks
    if w.known:
        inv.overrides.append(ScriptOverride(t, w.line, w.column, bare))
        return
    ph = PLACEHOLDER.format(len(inv.overrides))
    shown = _shown(w.raw.partition("=")[2] or value)
    inv.overrides.append(ScriptOverride(f"{key}={ph}", w.line, w.column, bare, Unknown(shown, w.unknown), ph))


def _shown(raw: str) -> str:
    """The value as written, quotes dropped and `${NAME...}` shown as `$NAME` (an Unknown must not
    look like an OmegaConf interpolation)."""
    raw = raw.replace('"', "").replace("'", "")
    return re.sub(r"\$\{([^}]*)\}", lambda m: "$" + re.split(r"[^A-Za-z0-9_@*#]", m.group(1) or "?")[0], raw)


def _at(inv: Invocation, w: Word, sev: Severity, msg: str, hint: str) -> Finding:
    return Finding(RULE, sev, msg, inv.file, w.line, w.column, "", hint)


# ----------------------------------------------------------------------------- composing

@dataclass
class ComposedInvocation:
    invocation: Invocation
    document: object  # Document | None
    findings: list[Finding]


def compose_invocation(inv: Invocation) -> ComposedInvocation:
    """Compose verl's config with the invocation's overrides; unknown values become Unknown."""
    from verl_pdbg_conf.verl_facts.compose import Override, compose_verl

    overrides = [Override(o.text, inv.file, o.line, o.column) for o in inv.overrides]
    result = compose_verl([], overrides, config_name=inv.config_name, config_dir=inv.config_dir)
    doc = result.document
    if doc is not None:
        unknowns = {o.placeholder: o.unknown for o in inv.overrides if o.unknown is not None}
        if unknowns:
            doc.data = _replace(doc.data, unknowns)
        if inv.cwd == "":
            doc.data = _unknown_relative_config_path(doc.data)
    return ComposedInvocation(inv, doc, list(result.findings))


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
    invocations, findings = read_script(path, text)
    report.findings += findings
    if not invocations:
        report.findings.append(Finding(
            "no-profiler-config", I, "no `python3 -m verl.trainer.main_ppo` invocation in this script: nothing to "
            "check", path, 1, 1))
        return report
    for inv in invocations:
        report.findings += inv.findings
        composed = compose_invocation(inv)
        report.findings += [_relocate(f, inv) for f in composed.findings]
        if composed.document is None:
            continue
        opts = options
        if inv.cwd:
            from dataclasses import replace

            opts = replace(options, base_dir=os.path.join(options.base_dir, inv.cwd))
        sub = validate_document(composed.document, opts)
        report.findings += [_relocate(f, inv) for f in sub.findings]
        report.files += [f for f in sub.files if f not in report.files and not f.startswith("<")]
    return report


def _relocate(f: Finding, inv: Invocation) -> Finding:
    """A finding about a value verl's defaults set (no line of its own) points at the invocation."""
    if not f.file.startswith("<"):
        return f
    from dataclasses import replace

    return replace(f, file=inv.file, line=inv.line, column=inv.column,
                   message=f.message + f" (set by verl's {inv.config_name} defaults, not by this script)")
