"""Real bash as the oracle of the launch-script reader: a script is run by bash with `python`,
`python3` (and `$PYTHON`) replaced by a recorder that writes its argv as JSON and exits 0, so
the words recorded are the words bash really passes.

The run is made harmless, not faithful beyond the words: it happens in a shadow copy of the
repository (its directories and small files; the redirections of the script land there), with
HOME a temporary folder, stdin empty and a time limit; PATH holds only the recorder and a few
read-only tools (dirname, realpath, sed, awk ...). Any other command (`ray`, `nohup`, `pip`,
`rm`, `nvidia-smi` ...) is not found and does nothing (bash's `command_not_found_handle`, set in
BASH_ENV), except that a Python word among its arguments (`ray job submit -- python3 -m ...`,
`nohup python3 ...`) is recorded from there on. `set -e`/`-u` are turned off before every command
(a DEBUG trap), so a failing or empty probe does not end the script before its launch."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOOLS = ("bash", "sh", "dirname", "basename", "realpath", "readlink", "pwd", "date", "nproc", "cat", "seq",
         "expr", "cut", "tr", "sed", "awk", "grep", "head", "tail", "wc", "sort", "uniq", "which", "env",
         "printf", "echo", "test", "true", "false", "id", "whoami", "uname", "hostname", "ls", "bc")
PYTHONS = ("python", "python3", "python3.10", "python3.11", "python3.12")
MAX_COPY = 256 << 10  # files larger than this are not copied into the shadow (scripts only read small ones)

_BASH_ENV = r"""
__oracle_ran() {  # an override run as a command: a `\` continuation was broken before it
  if [[ "$BASH_COMMAND" =~ ^[[:space:]]*(\+\+?|~)?[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)+= ]]; then
    BASH_ORACLE_RAN="${BASH_COMMAND%% *}" "$BASH_ORACLE_STUBS/python3"
  fi
}
trap 'builtin set +eu; export BASH_ORACLE_LINE=$LINENO BASH_ORACLE_SRC="${BASH_SOURCE[0]}"; __oracle_ran' DEBUG
command_not_found_handle() {
  local args=("$@") k
  # a missing command reading a pipe (`... | tee log`) drains it, so the writer is not cut short
  if [ -p /dev/stdin ]; then cat > /dev/null; fi
  for ((k = 1; k < $#; k++)); do
    case "${args[k]##*/}" in
      python|python3|python3.[0-9]*|python[0-9])
        BASH_ORACLE_VIA="${args[*]:0:k}" "$BASH_ORACLE_STUBS/python3" "${args[@]:k+1}"
        return 0;;
    esac
  done
  return 0
}
"""

_RECORDER = """#!{python} -I
import json, os, sys
rec = {{"argv0": os.path.basename(sys.argv[0]), "args": sys.argv[1:], "cwd": os.getcwd(),
       "pythonpath": os.environ.get("PYTHONPATH"), "via": os.environ.get("BASH_ORACLE_VIA", ""),
       "line": int(os.environ.get("BASH_ORACLE_LINE") or 0), "src": os.environ.get("BASH_ORACLE_SRC", ""),
       "ran_as_command": os.environ.get("BASH_ORACLE_RAN", "")}}
with open(os.environ["BASH_ORACLE_LOG"], "a") as fh:
    fh.write(json.dumps(rec) + "\\n")
"""


class Sandbox:
    """A shadow of `root` and the recorder; `run(script)` gives the recorded Python calls, with
    paths of the shadow mapped back to `root`."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.tmp = tempfile.mkdtemp(prefix="bash-oracle-")
        self.shadow = os.path.join(self.tmp, "tree")
        self.stubs = os.path.join(self.tmp, "stubs")
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.stubs)
        os.makedirs(self.home)
        self._copy()
        rec = os.path.join(self.stubs, "python3")
        with open(rec, "w") as fh:
            fh.write(_RECORDER.format(python=sys.executable))
        os.chmod(rec, 0o755)
        for name in PYTHONS:
            if name != "python3":
                os.symlink(rec, os.path.join(self.stubs, name))
        for tool in TOOLS:
            found = shutil.which(tool)
            if found and not os.path.exists(os.path.join(self.stubs, tool)):
                os.symlink(found, os.path.join(self.stubs, tool))
        self.bash_env = os.path.join(self.tmp, "bash_env.sh")
        with open(self.bash_env, "w") as fh:
            fh.write(_BASH_ENV)

    def _copy(self) -> None:
        for d, dirs, files in os.walk(self.root):
            dirs[:] = [x for x in dirs if x not in (".git", "node_modules", "__pycache__")]
            dst = os.path.join(self.shadow, os.path.relpath(d, self.root))
            os.makedirs(dst, exist_ok=True)
            for f in files:
                src = os.path.join(d, f)
                try:
                    if os.path.islink(src) or os.path.getsize(src) > MAX_COPY:
                        continue
                    shutil.copyfile(src, os.path.join(dst, f))
                except OSError:
                    pass

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, script: str, timeout: float = 60.0, cwd: str | None = None,
            env: dict | None = None) -> tuple[list[dict], str]:
        """The Python calls bash makes running `script` (a file under root) from `cwd` (default: the
        repository root) with `env` added to its environment, and how the run ended ("" when bash
        exited by itself)."""
        rel = os.path.relpath(os.path.abspath(script), self.root)
        log = os.path.join(self.tmp, "calls.jsonl")
        with open(log, "w"):
            pass
        env = {"PATH": self.stubs, "HOME": self.home, "BASH_ENV": self.bash_env, "BASH_ORACLE_LOG": log,
               "BASH_ORACLE_STUBS": self.stubs, "PYTHON": "python3", "LANG": "C.UTF-8", "TMPDIR": self.tmp,
               "USER": "oracle", **(env or {})}
        run_dir = os.path.join(self.shadow, os.path.relpath(cwd or self.root, self.root))
        ended = ""
        try:
            subprocess.run(["bash", os.path.join(self.shadow, rel)], cwd=run_dir, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout,
                           start_new_session=True)
        except subprocess.TimeoutExpired:
            ended = f"bash did not end within {timeout:.0f} s"
        calls = []
        with open(log) as fh:
            for ln in fh:
                calls.append(json.loads(self.unshadow(json.loads(ln))))
        return calls, ended

    def unshadow(self, rec):
        """The record with every path of the shadow written as the same path of the repository."""
        return json.dumps(rec).replace(json.dumps(self.shadow)[1:-1], json.dumps(self.root)[1:-1])


# ----------------------------------------------------------------------------- main_ppo's words

_PY_OPT = re.compile(r"-([bBdEiIOPqRsSuvx]*)([cmXW]?)(.*)", re.S)  # python's own short options


def module_args(args: list[str]) -> tuple[str | None, list[str]]:
    """After the interpreter, as python parses its options: the module of `-m MOD` (or a script
    path) and the words it is given; (None, []) for `-c`, `--version` and the like."""
    i = 0
    while i < len(args):
        if not args[i].startswith("-") or args[i] == "-":
            return args[i], args[i + 1:]
        m = _PY_OPT.fullmatch(args[i])
        if args[i].startswith("--") or m is None:
            return None, []
        _, opt, rest = m.groups()
        if not opt:
            i += 1
            continue
        value = rest or (args[i + 1] if i + 1 < len(args) else None)
        i += 1 if rest else 2
        if opt == "m":
            return value, args[i:]
        if opt == "c":
            return None, []
    return None, []


def entry(module: str | None) -> str | None:
    if module and module.endswith("verl/trainer/main_ppo.py"):
        return "verl.trainer.main_ppo"
    return module


def launches(calls: list[dict]) -> list[dict]:
    """The main_ppo-like Python calls bash made, each with its file, command line, module, words."""
    from verl_pdbg_conf.launch_scripts.hydra_config import _MAIN_PPO_LIKE

    out = []
    for c in calls:
        if c.get("ran_as_command"):
            continue
        module, words = module_args(c["args"])
        module = entry(module)
        if module is None or not (module == "verl.trainer.main_ppo" or _MAIN_PPO_LIKE.search(module)):
            continue
        src = os.path.normpath(os.path.join(c["cwd"], c["src"])) if c["src"] else ""
        out.append({"file": src, "line": c["line"], "module": module, "words": words})
    return out


def overrides_run_as_commands(calls: list[dict]) -> list[str]:
    """The override words bash ran as commands of their own (a comment or blank line, or a space
    after a backslash, ended the launch before them): evidence that the script drops them."""
    return [c["ran_as_command"] for c in calls if c.get("ran_as_command")]


def compare_words(script: str, root: str, runs: list[dict]) -> tuple[list[str], int]:
    """Each bash launch against the reader's invocation of the same command: mismatches, launches paired."""
    from verl_pdbg_conf.launch_scripts.launch_script import read_script

    invs, _ = read_script(script, launch_dir=root)
    by_place = {(os.path.abspath(i.file), i.cmd_line): i for i in invs}
    problems, paired = [], 0
    for r in runs:
        inv = by_place.get((r["file"], r["line"]))
        if inv is None:
            problems.append(f"{os.path.relpath(r['file'], root)}:{r['line']}: bash launches {r['module']}, "
                            "the reader sees no invocation there")
            continue
        paired += 1
        diff = same_words(inv.args, r["words"])
        if diff:
            problems.append(f"{os.path.relpath(r['file'], root)}:{r['line']}: {diff}")
    return list(dict.fromkeys(problems)), paired



# ----------------------------------------------------------------------------- comparing words

_MANY = re.compile(r'^"?\$\{?[@*](?::\d+(?::\d+)?)?\}?"?$|^"?\$\{[A-Za-z_]\w*\[[@*]\](?::\d+(?::\d+)?)?\}"?$')


def pattern(w) -> tuple[re.Pattern, int, int]:
    """What bash may pass for one word of the reader: (regex of one word, fewest, most words).
    An unknown part matches anything; a whole-word expansion that cannot be known (`"$@"`, an
    unknown array, an unquoted `$V` from the environment) may be any number of words; an element
    the reader marks as passed only when a branch runs may be absent."""
    if w.known:
        rx = re.compile(re.escape(w.text), re.S)
    else:
        rx = re.compile("".join(re.escape(t) if known else ".*" for t, known, _ in w.parts) or ".*", re.S)
    lo, hi = 1, 1
    if not w.known and (_MANY.match(w.raw) or (not w.quoted and not any(k for _, k, _ in w.parts))):
        lo, hi = 0, 10 ** 6
    if getattr(w, "maybe", ""):
        lo = 0
    return rx, lo, hi


def braces(text: str) -> list[str]:
    """bash's brace expansion of a word (`k={a,b}` -> `k=a`, `k=b`), which the reader reports
    instead of performing."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", text)
    if m is None:
        return [text]
    return [x for alt in m.group(1).split(",") for x in braces(text[:m.start()] + alt + text[m.end():])]


def same_words(ours: list, bash: list[str]) -> str:
    """Empty when bash's words fit the reader's, else where they first part."""
    pats = []
    for w in ours:
        if w.brace and w.known:
            pats += [(re.compile(re.escape(t), re.S), 1, 1) for t in braces(w.text)]
        else:
            pats.append(pattern(w))
    memo: dict = {}

    def fits(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(pats):
            ok = j == len(bash)
        else:
            rx, lo, hi = pats[i]
            ok = False
            k = 0
            while not ok and k <= hi and j + k <= len(bash):
                if k >= lo and fits(i + 1, j + k):
                    ok = True
                    break
                if j + k == len(bash) or not rx.fullmatch(bash[j + k]):
                    break
                k += 1
        memo[(i, j)] = ok
        return ok

    if fits(0, 0):
        return ""
    i = j = 0  # the first place they differ, for the message
    while i < len(pats) and j < len(bash) and pats[i][0].fullmatch(bash[j]) and pats[i][1:] == (1, 1):
        i, j = i + 1, j + 1
    mine = ours[i].raw if i < len(ours) else "(nothing)"
    theirs = repr(bash[j]) if j < len(bash) else "(nothing)"
    return f"word {j + 1}: the reader has {mine!r}, bash passes {theirs}"
