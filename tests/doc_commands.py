"""The commands README.md and docs/ show, run as a user would run them, and their shown output.

    python tests/doc_commands.py            # rewrite every shown output in place (nothing else)
    python tests/doc_commands.py --check    # only say which shown outputs differ (exit 1 if any)

Every fenced `bash`, `sh`, `console` or `python` block in README.md, docs/*.md and conf/README.md
carries a marker on the line before it:

    <!-- run -->                   run it from the checkout's root; exit status 0 expected
    <!-- run rc=1 -->              ... exit status 1 expected
    <!-- run cwd=tmp -->           ... in a fresh temporary directory holding a copy of examples/ and conf/
    <!-- run show=1-19,-3 -->      the output block shows lines 1 to 19 and the last 3, "..." between
    <!-- run after=&& -->          run only what follows the first `&&` (the install before it is what
                                   .ci/run does in a fresh venv; the tests run in an installed one)
    <!-- not-run: KIND -->         not run, for the reason NOT_RUN[KIND] gives

A ```text block right after a run block (nothing but a blank line between) is its output: stdout and
stderr as the terminal shows them. Both sides are normalized before they are compared: this
checkout's path and the temporary directory become relative paths, an absolute path into an
installed verl_pdbg_conf becomes `verl_pdbg_conf/...`, and (compared only, never rewritten) the
version and source in `judged as ...` lines and durations are masked.

`verl-pdbg-validate`, `verl-pdbg-compare`, `python` and `python3` run this checkout's code with the
interpreter running the tests (shims first on PATH, the checkout on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = ("README.md", "conf/README.md", "docs/*.md")
COMMAND_LANGS = ("bash", "sh", "shell", "console", "python")
TIMEOUT = 900
README_MAX_LINES = 200

# The blocks the tests do not run, by kind, and why. Every not-run marker names one of these.
NOT_RUN = {
    "verl-run": "a verl training run (main_ppo on Ray with a model, data and a GPU or NPU)",
    "trainer": "verl's real trainer on CPU, minutes a run (tests/test_verl_trainer.py runs it, in the background)",
    "installs": "installs packages or builds venvs (never inside the test environment; .ci/run does the README's install in a fresh venv)",
    "suite": "the whole test suite: .ci/run runs it, tests/test_readme_commands.py keeps the two equal",
    "tests": "test files of the suite: the suite itself runs them",
    "long": "a campaign or bench of many minutes (its figures are quoted beside it, with the machine's load)",
    "network": "downloads from a package index or clones a repository",
    "rollout": "a rollout's dumps made by vLLM in its own venv (tests/test_compare_rollout.py makes them and runs "
               "these commands on them)",
}

_MARK = re.compile(r"^<!--\s*(run|not-run:)\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass
class Block:
    file: str  # relative to ROOT
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # "run" or "not-run" or None
    options: dict
    kind: str | None = None  # the not-run kind
    out_start: int | None = None  # 0-based index of the output block's first content line
    out_end: int | None = None  # 0-based index of the output block's closing fence
    shown: str | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    files = []
    for pattern in DOC_FILES:
        files += sorted(ROOT.glob(pattern))
    return files


def parse(path: Path) -> list[Block]:
    """Every fenced block of one file, with its marker and its output block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    fences = []  # (open index, close index, lang)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("```")), len(lines))
            fences.append((i, j, m.group(1)))
            i = j + 1
        else:
            i += 1
    blocks = []
    for n, (start, end, lang) in enumerate(fences):
        mark = _MARK.match(lines[start - 1]) if start else None
        marker, options, kind = None, {}, None
        if mark and mark.group(1) == "run":
            marker = "run"
            options = dict(opt.split("=", 1) for opt in mark.group(2).split() if "=" in opt)
        elif mark:
            marker, kind = "not-run", mark.group(2)
        block = Block(rel, start + 1, lang, "\n".join(lines[start + 1:end]) + "\n", marker, options, kind)
        if marker == "run" and n + 1 < len(fences):
            o_start, o_end, o_lang = fences[n + 1]
            if o_lang == "text" and all(not ln.strip() for ln in lines[end + 1:o_start]) and o_start - end <= 2:
                block.out_start, block.out_end = o_start + 1, o_end
                block.shown = "\n".join(lines[o_start + 1:o_end])
        blocks.append(block)
    return blocks


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in parse(path)]


def command_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang in COMMAND_LANGS or b.marker]


# --- running ---------------------------------------------------------------------------------------

_SHIMS = {
    "verl-pdbg-validate": "-m verl_pdbg_conf",
    "verl-pdbg-compare": "-m verl_pdbg_conf.compare.cli",
    "python": "",
    "python3": "",
}


def _shim_dir(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, args in _SHIMS.items():
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {args} "$@"\n')
        shim.chmod(0o755)
    return bin_dir


def _environment(bin_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "PYTHONSTARTUP", "FORCE_COLOR")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="100", PYTHONWARNINGS="ignore", PYTHONHASHSEED="0")
    return env


@dataclass
class Ran:
    rc: int
    output: str  # normalized, whole
    cwd: Path


def run(block: Block) -> Ran:
    """Run one block as a user would (bash, or python for a python block); stdout and stderr together."""
    with tempfile.TemporaryDirectory(prefix="doc-cmd-") as tmp:
        tmp_path = Path(tmp).resolve()
        bin_dir = _shim_dir(tmp_path)
        cwd = ROOT
        if block.options.get("cwd") == "tmp":
            cwd = tmp_path / "work"
            shutil.copytree(ROOT / "examples", cwd / "examples")
            shutil.copytree(ROOT / "conf", cwd / "conf")
        code = block.code
        if "after" in block.options:
            code = code.split(block.options["after"], 1)[1]
        if block.lang == "python":
            script = tmp_path / "block.py"
            script.write_text(code)
            argv = [sys.executable, str(script)]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        try:
            proc = subprocess.run(argv, cwd=cwd, env=_environment(bin_dir), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=TIMEOUT)
            out, rc = proc.stdout.decode("utf-8", "replace"), proc.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode("utf-8", "replace") + f"\n[timed out after {TIMEOUT} s]", -1
        return Ran(rc, normalize_paths(out, [cwd, tmp_path]), cwd)


def normalize_paths(text: str, dirs: list[Path]) -> str:
    """This machine's paths out of the text: the run's directories (then the checkout) become relative."""
    for d in sorted({str(p) for d in dirs + [ROOT] for p in (d, d.resolve())}, key=len, reverse=True):
        text = text.replace(d + os.sep, "").replace(d, ".")
    text = re.sub(r"(?<![\w.])(?:/[^\s/()'\"`]+)+/(?=verl_pdbg_conf/)", "", text)
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        text = text.replace(home + os.sep, "~/")
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def masked(text: str) -> str:
    """What may differ between machines and releases without the doc being wrong: compared masked."""
    text = re.sub(r"^judged as (verl|msprobe) \S+ \(.*\)$", r"judged as \1 <version> (<source>)", text, flags=re.M)
    text = re.sub(r"\b\d+(?:\.\d+)?\s?(?:ms|s)\b", "<time>", text)
    return text


def select(output: str, show: str | None) -> str:
    """The lines a `show=` spec keeps (1-based ranges, negative from the end), `...` where lines are left out."""
    lines = output.split("\n") if output else []
    if not show:
        return output
    keep: list[int] = []
    for part in show.split(","):
        a, _, b = part.partition("-") if not part.startswith("-") else ("", "", "")
        if part.startswith("-"):
            keep += range(max(len(lines) + int(part), 0), len(lines))
        else:
            keep += range(int(a) - 1, min(int(b or a), len(lines)))
    picked, last = [], -1
    for i in sorted(set(keep)):
        if i != last + 1:
            picked.append("...")
        picked.append(lines[i])
        last = i
    if last != len(lines) - 1:
        picked.append("...")
    return "\n".join(picked)


def expected_rc(block: Block) -> int:
    return int(block.options.get("rc", 0))


def diff(block: Block, ran: Ran) -> str:
    """Empty when the shown output (if any) and the exit status are what the command gives."""
    problems = []
    if ran.rc != expected_rc(block):
        problems.append(f"exit status {ran.rc}, the marker says rc={expected_rc(block)}")
    if block.shown is not None:
        got = select(ran.output, block.options.get("show"))
        if masked(got) != masked(block.shown):
            problems.append("".join(difflib.unified_diff(
                (block.shown + "\n").splitlines(keepends=True), (got + "\n").splitlines(keepends=True),
                f"{block.where} (shown)", "what the command prints now")))
    if problems:
        problems.append("if the new output is right: python tests/doc_commands.py  (rewrites the shown outputs)")
        if ran.rc != expected_rc(block) and block.shown is None:
            problems.insert(1, ran.output[-3000:])
    return "\n".join(problems)


# --- regeneration ----------------------------------------------------------------------------------

def regenerate(check_only: bool = False, only: str | None = None, paths: list[Path] | None = None) -> int:
    """Run every run block with an output block; write the new outputs in place (only those lines)."""
    status = 0
    for path in paths or doc_files():
        lines = path.read_text(encoding="utf-8").split("\n")
        changed = False
        # bottom-up, so earlier line numbers stay valid while blocks are replaced
        for block in reversed(parse(path)):
            if block.marker != "run" or (only and only not in block.where):
                continue
            ran = run(block)
            if ran.rc != expected_rc(block):
                print(f"{block.where}: exit status {ran.rc}, the marker says rc={expected_rc(block)}:"
                      " look at it, then fix the command or the marker", file=sys.stderr)
                status = 1
            if block.shown is None:
                continue
            new = select(ran.output, block.options.get("show"))
            if new == block.shown:
                continue
            print(f"{block.where}: shown output {'differs' if check_only else 'rewritten'}")
            status = status or (1 if check_only else 0)
            lines[block.out_start:block.out_end] = new.split("\n") if new else []
            changed = True
        if changed and not check_only:
            path.write_text("\n".join(lines), encoding="utf-8")
        n = len("\n".join(lines).splitlines())
        if path.name == "README.md" and path.parent == ROOT and n > README_MAX_LINES:
            print(f"{path.name} now has {n} lines (at most {README_MAX_LINES}): shorten a shown output"
                  " with show=... in its marker", file=sys.stderr)
            status = 1
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description="Rewrite the outputs README.md and docs/ show, from real runs.")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a shown output differs")
    ap.add_argument("--only", help="only blocks whose FILE:LINE contains this (e.g. README.md)")
    a = ap.parse_args()
    return regenerate(check_only=a.check, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
