"""One input through the validator, and the promises checked on what comes out.

Shared by the fuzz tests (tests/fuzz) and the long campaign (bench/fuzz_campaign.py).
The promises: every input ends in findings (each with a file, a line >= 1, a column >= 1
and a rule from verl_pdbg_conf.core.rules.RULES) or a clean result, never an exception; within
TIME_LIMIT seconds and MEMORY_LIMIT bytes of peak traced allocation per file; and nothing
on disk changes. Every reporter must render the result as encodable UTF-8 text, since
the CLI writes it to stdout.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import time
import traceback
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Finding, Report, Severity
from verl_pdbg_conf.core.reading import MAX_BYTES
from verl_pdbg_conf.core.rules import RULES
from verl_pdbg_conf.validate import validate_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "examples"

TIME_LIMIT = 2.0  # seconds per file
MEMORY_LIMIT = 64 * 1024 * 1024  # peak bytes traced while validating one file

# Characters PyYAML and libyaml count as line breaks (`\r\n` is one break).
_YAML_BREAKS = ("\r\n", "\r", "\x85", "\u2028", "\u2029")


def corpus_files() -> list[Path]:
    """Real configs to mutate: verl confs, the msprobe config.json files they point to, and
    any msprobe positive examples."""
    out = sorted((EXAMPLES / "verl" / "positive").glob("*.yaml"))
    out += sorted(p for p in (EXAMPLES / "verl" / "configs").glob("*.json") if p.is_file())
    out += sorted(p for p in (EXAMPLES / "msprobe" / "positive").glob("*.json") if p.is_file())
    return out


class Workspace:
    """A scratch directory that a case's relative config_path resolves against: it holds a
    copy of tests/examples/verl/configs (and msprobe's positive examples), and the case file."""

    def __init__(self, root: str | None = None):
        self._tmp = None if root else tempfile.mkdtemp(prefix="verl-pdbg-fuzz-")
        self.root = Path(root or self._tmp)
        self.root.mkdir(parents=True, exist_ok=True)
        for src in (EXAMPLES / "verl" / "configs", EXAMPLES / "msprobe" / "positive"):
            if src.is_dir():
                dst = self.root / ("configs" if src.name == "configs" else "msprobe")
                if not dst.exists():
                    shutil.copytree(src, dst)
        self.cases = self.root / "cases"
        self.cases.mkdir(exist_ok=True)

    def write(self, name: str, data: bytes) -> Path:
        p = self.cases / name
        p.write_bytes(data)
        return p

    def snapshot(self) -> dict[str, str]:
        """Every file under the workspace with its content hash (directories and special files by type)."""
        snap = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                rel = os.path.relpath(p, self.root)
                if os.path.islink(p):
                    snap[rel] = "link:" + os.readlink(p)
                elif os.path.isfile(p):
                    with open(p, "rb") as fh:
                        snap[rel] = hashlib.sha256(fh.read()).hexdigest()
                else:
                    snap[rel] = "dir" if os.path.isdir(p) else "special"
        return snap

    def clean_cases(self) -> None:
        for p in self.cases.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


@dataclass
class Outcome:
    name: str
    size: int
    seconds: float = 0.0
    peak: int = 0
    findings: list[Finding] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _text_of(path: str) -> str | None:
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_BYTES:
            return None
        raw = Path(path).read_bytes()
    except OSError:
        return None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _line_lengths(text: str, kind: str) -> list[int]:
    if kind == "json":  # json counts only \n
        return [len(x) for x in text.split("\n")]
    for b in _YAML_BREAKS:
        text = text.replace(b, "\n")
    return [len(x) for x in text.split("\n")]


def check_finding_positions(findings: list[Finding], texts: dict[str, str | None]) -> list[str]:
    """Line and column must point inside the file the finding names (or just past its end)."""
    problems = []
    for f in findings:
        text = texts.get(f.file)
        if text is None:
            continue
        lines = _line_lengths(text, "json" if f.file.lower().endswith(".json") else "yaml")
        if f.line > len(lines):
            problems.append(f"bad position: {f.rule} at {f.file}:{f.line}:{f.column}, the file has {len(lines)} lines")
        elif f.column > lines[f.line - 1] + 1:
            problems.append(f"bad position: {f.rule} at {f.file}:{f.line}:{f.column}, "
                            f"line {f.line} has {lines[f.line - 1]} characters")
    return problems


def check_report(report: Report, files: list[str]) -> list[str]:
    problems = []
    known = set(files) | set(report.files)
    for f in report.findings:
        where = f"{f.rule!r} at {f.file!r}:{f.line!r}:{f.column!r}"
        if not isinstance(f, Finding):
            problems.append(f"not a Finding: {f!r}")
            continue
        if f.rule not in RULES:
            problems.append(f"rule not in RULES: {where}")
        if not isinstance(f.severity, Severity):
            problems.append(f"bad severity {f.severity!r}: {where}")
        if not isinstance(f.file, str) or not f.file:
            problems.append(f"finding without a file: {where}")
        elif f.file not in known:
            problems.append(f"finding names a file that was not validated: {where}")
        for what in ("line", "column"):
            v = getattr(f, what)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                problems.append(f"{what} is not an integer >= 1: {where}")
        if not isinstance(f.message, str) or not f.message:
            problems.append(f"finding without a message: {where}")
    if not problems:
        texts = {fn: _text_of(fn) for fn in {f.file for f in report.findings}}
        problems += check_finding_positions(report.findings, texts)
    return problems


def check_rendering(report: Report) -> list[str]:
    """The CLI writes a reporter's output to stdout: it must render and encode as UTF-8."""
    from verl_pdbg_conf.reporters import REPORTERS

    problems = []
    for fmt, render in REPORTERS.items():
        try:
            render(report).encode("utf-8")
        except Exception as e:  # noqa: BLE001 - any failure here is a traceback in the CLI
            problems.append(f"reporter {fmt} fails: {type(e).__name__}: {e}"[:500])
    return problems


def _validate(path: str, options: Options, out: Outcome, traced: bool) -> Report | None:
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        return validate_files([path], options)
    except Exception:  # noqa: BLE001 - the promise is that nothing escapes
        out.problems.append("exception escaped validate_files:\n" + traceback.format_exc(limit=8))
        return None
    finally:
        if traced:
            out.peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        else:
            out.seconds = time.perf_counter() - t0


def run_file(path: str | Path, workspace: Workspace, *, memory: bool = True, options: Options | None = None,
             render: bool = True, time_limit: float = TIME_LIMIT, memory_limit: int = MEMORY_LIMIT) -> Outcome:
    """Validate one existing file and check every promise. Time is measured on a plain run;
    with memory=True a second run under tracemalloc (2-3x slower) measures the peak."""
    path = str(path)
    out = Outcome(os.path.basename(path), os.path.getsize(path) if os.path.isfile(path) else 0)
    options = options or Options(base_dir=str(workspace.root))
    before = workspace.snapshot()
    report = _validate(path, options, out, traced=False)
    if out.seconds > time_limit and report is not None:  # timing noise: the best of two runs counts
        first = out.seconds
        _validate(path, options, out, traced=False)
        out.seconds = min(first, out.seconds)
    if report is not None:
        out.findings = list(report.findings)
        out.problems += check_report(report, [path])
        if render:
            out.problems += check_rendering(report)
    if out.seconds > time_limit:
        out.problems.append(f"took {out.seconds:.2f} s, over the {time_limit} s bound")
    if memory and report is not None:
        _validate(path, options, out, traced=True)
        if out.peak > memory_limit:
            out.problems.append(f"peak memory {out.peak / 2**20:.1f} MiB, "
                                f"over the {memory_limit / 2**20:.0f} MiB bound")
    after = workspace.snapshot()
    if before != after:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        out.problems.append(f"files changed on disk: {changed[:10]}")
    return out


def run_case(name: str, data: bytes, workspace: Workspace, **kw) -> Outcome:
    """Write `data` as cases/<name> in the workspace and run it."""
    p = workspace.write(name, data)
    try:
        out = run_file(p, workspace, **kw)
    finally:
        try:
            p.unlink()
        except OSError:
            pass
    out.name = name
    return out


def via_config_path(name: str, data: bytes, workspace: Workspace, **kw) -> Outcome:
    """The same config.json, reached the way verl reaches it: through a conf's config_path."""
    target = workspace.write(name, data)
    conf = workspace.write(name + ".conf.yaml", (
        "global_profiler:\n  tool: precision_debugger\n  steps: [1]\n  global_tool_config:\n"
        f"    precision_debugger:\n      config_path: {target}\n"
        "actor_rollout_ref:\n  actor:\n    profiler:\n      enable: True\n").encode())
    try:
        out = run_file(conf, workspace, **kw)
    finally:
        for path in (target, conf):
            path.unlink(missing_ok=True)
    out.name = name + " (via config_path)"
    return out


def describe(outcomes: list[Outcome]) -> str:
    """The failures, for an assertion message."""
    bad = [o for o in outcomes if not o.ok]
    return "\n".join(f"--- {o.name} ({o.size} bytes)\n" + "\n".join(o.problems) for o in bad[:20])


def same_json_value(a, b) -> bool:
    """Equality that treats NaN as equal to NaN and keeps int and float apart."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json_value(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json_value(x, y) for x, y in zip(a, b))
    return a == b


_warmed = False


def warm_up(workspace: Workspace) -> None:
    """Import everything the validator imports lazily, so the first measured case does not
    count import-time allocations (omegaconf, the msprobe checks, reporters)."""
    global _warmed
    if _warmed:
        return
    conf = (b"x: 1\nglobal_profiler:\n  tool: precision_debugger\n  steps: [1]\n  save_path: ${x}\n"
            b"  global_tool_config:\n    precision_debugger:\n      config_path: configs/statistics_l1.json\n")
    for name, data in (("warm.yaml", conf), ("warm.json", b'{"task": "statistics", "level": "L1"}')):
        run_case(name, data, workspace, memory=False, time_limit=60)
    _warmed = True
