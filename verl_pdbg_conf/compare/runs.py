"""Compare two whole runs: pair every (step, stage, rank) dump both hold, compare each pair with the
engine (engine.py; in local worker processes, or on a Ray cluster with `ray`) for the first node in
execution order whose difference passes a threshold, and run msprobe's own compare for its CSV only
when asked (msprobe_csv). compare_ranks pairs the ranks of one run against one reference rank instead.

TARGET and GOLDEN are two save_paths, two directories further down the layout (step_N, step_N/stage,
its step0, a rank directory) or two dump.json files. Nothing is written under either: summaries and
msprobe's result files go to an output directory outside both (with msprobe_csv and no -o, a temporary
one; remove_output deletes it). Records no comparison can judge are left out (ignores.py). Returns
data; nothing is printed here."""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field

from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.compare.engine import PairJob, PairOutcome, compare_pair, header_of
from verl_pdbg_conf.compare.ignores import DEFAULT_IGNORES
from verl_pdbg_conf.compare.nodes import (DEFAULT_METRIC, DEFAULT_THRESHOLD, MAX_LAYERS, METRICS, Analysis, _json_number,
                                          fold_layers)
from verl_pdbg_conf.run.inspect_run import _INNER, _RANK, _STAGE, _STEP, scan

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO
DEFAULT_TOP = 5
EXIT_OK, EXIT_DIVERGED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
# Each worker holds torch and msprobe (a few hundred MB) and msprobe's tensor compare starts its own pool.
MAX_DEFAULT_JOBS = 4
SUMMARY = "summary.json"  # with an output directory: per pair in its directory, the whole comparison at the top


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_JOBS))


class UsageError(ValueError):
    """Arguments that cannot be compared at all (exit code 2)."""


@dataclass
class Side:
    """One rank directory of one run."""
    key: tuple  # path parts between the given root and the rank directory, e.g. (step_1, actor_update, step0)
    rank_dir: str  # rank0 or proc<pid> ("" for a dump.json given directly)
    path: str  # its dump.json (may not exist)

    @property
    def label(self) -> str:
        return "/".join(p for p in (*self.key, self.rank_dir) if p) or os.path.basename(self.path)

    @property
    def file_label(self) -> str:
        return f"{self.label}/dump.json" if self.rank_dir or self.key else self.path


@dataclass
class Pair:
    target: Side
    golden: Side
    step: int | None
    stage: str | None
    rank: int | None
    out_dir: str = ""
    note: str = ""
    status: str = "pending"  # same | diverged | mismatch (collected differently) | error
    analysis: Analysis | None = None
    result_file: str | None = None
    log_file: str | None = None
    findings: list[Finding] = field(default_factory=list)
    ran_on: str = ""  # the Ray node that compared it (--ray)

    @property
    def rank_label(self) -> str:
        t, g = self.target.rank_dir, self.golden.rank_dir
        return (t if t == g else f"{t or 'dump'}_vs_{g or 'dump'}") or "dump"

    @property
    def label(self) -> str:
        return "/".join((*self.target.key, self.rank_label))


@dataclass
class Comparison:
    target: str
    golden: str
    out_dir: str
    metric: str
    threshold: float
    top: int
    ignore_dtype: bool = False
    dtype_aware: bool = False
    msprobe_csv: str | None = None  # diverged | all: msprobe's own compare also ran on those pairs
    ignores: tuple = ()  # the patterns in force (the default's first, then --ignore's)
    ray: str | None = None  # a Ray cluster's address (or "auto"): pairs run there, not in local workers
    ray_resource: str | None = None  # only Ray nodes holding this custom resource
    temporary: bool = False  # out_dir was made here (no -o): remove_output() deletes it
    reference_rank: int | None = None  # rank against rank in one run (compare_ranks): the golden side's rank
    keep_nodes: int = 0  # nodes each pair's analysis keeps (for a per-node plot)
    pairs: list[Pair] = field(default_factory=list)
    only_in_target: list[Side] = field(default_factory=list)
    only_in_golden: list[Side] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # not tied to a pair

    @property
    def all_findings(self) -> list[Finding]:
        return self.findings + [f for p in self.pairs for f in p.findings]

    @property
    def exit_code(self) -> int:
        """1 a divergence was found; 3 none was, but a pair could not be compared or a (step, stage,
        rank) is in one run only; 2 nothing could be compared; 0 every pair compared, none diverged."""
        if any(p.status == "diverged" for p in self.pairs):
            return EXIT_DIVERGED
        if not self.pairs or all(p.status in ("error", "mismatch") for p in self.pairs):
            return EXIT_USAGE
        if any(p.status in ("error", "mismatch") for p in self.pairs) or self.only_in_target or self.only_in_golden:
            return EXIT_INCOMPLETE
        return EXIT_OK


def _finding(rule, sev, msg, path, hint="") -> Finding:
    return Finding(rule, sev, msg, path, 1, 1, "", hint)


# ----------------------------------------------------------------------------- finding the dumps

def collect(root: str) -> list[Side]:
    """Every rank directory under root (root itself may be one, or a dump.json).
    A save_path goes through inspect_run.scan, the layout's one reader."""
    root = os.path.abspath(root)
    if os.path.isfile(root):
        parent = os.path.basename(os.path.dirname(root))
        return [Side((), parent if _RANK.match(parent) else "", root)]
    if not os.path.isdir(root):
        return []
    if _RANK.match(os.path.basename(root)) or os.path.isfile(os.path.join(root, "dump.json")):
        return [Side((), os.path.basename(root) if _RANK.match(os.path.basename(root)) else "",
                     os.path.join(root, "dump.json"))]
    dumps, _ = scan(root)
    ranked = [d for d in dumps if d.rank]
    if ranked:
        return [Side((f"step_{d.step}", d.stage_dir, d.inner), d.rank, d.path) for d in ranked]
    sides = []
    for here, dirs, _files in os.walk(root):
        dirs.sort()
        for d in list(dirs):
            if _RANK.match(d):
                rel = os.path.relpath(here, root)
                key = () if rel == "." else tuple(rel.split(os.sep))
                sides.append(Side(key, d, os.path.join(here, d, "dump.json")))
                dirs.remove(d)
    return sides


def _layout_of(path: str) -> tuple[int | None, str | None]:
    """step and stage directory read off a rank directory's path (.../step_N/<stage>/stepM/rankR)."""
    parts = os.path.abspath(path).split(os.sep)
    if parts and parts[-1] == "dump.json":
        parts = parts[:-1]
    if len(parts) >= 4 and _RANK.match(parts[-1]) and _INNER.match(parts[-2]) and _STAGE.match(parts[-3]):
        m = _STEP.match(parts[-4])
        return (int(m.group(1)) if m else None), parts[-3]
    return None, None


def _rank_number(rank_dir: str) -> int | None:
    m = _RANK.match(rank_dir or "")
    return int(m.group(2)) if m and m.group(2) is not None else None


def _sort_key(p: Pair):
    from verl_pdbg_conf.run.plan import RUN_ORDER

    order = {s: i for i, s in enumerate(RUN_ORDER)}
    stage = _STAGE.match(p.stage or "")
    return (p.step if p.step is not None else -1, order.get(stage.group("stage") if stage else "", 99),
            p.stage or "", p.target.key, p.rank if p.rank is not None else 1 << 30, _pid(p.target.rank_dir),
            p.target.rank_dir)


def pair_up(target: list[Side], golden: list[Side]) -> tuple[list[Pair], list[Side], list[Side], list[Finding]]:
    """Pair rank directories by their place in the layout; rank<N> by name, proc<pid> by sorted pid
    when both sides hold the same number of them (pids differ between runs)."""
    by_t: dict[tuple, dict[str, Side]] = {}
    by_g: dict[tuple, dict[str, Side]] = {}
    for sides, into in ((target, by_t), (golden, by_g)):
        for s in sides:
            into.setdefault(s.key, {})[s.rank_dir] = s
    # Two stage (or rank) directories or two files: one place each, compared whatever its name (step_2
    # against step_1 is a question the guide asks). Two save_paths pair by step and stage, strictly.
    single = len(by_t) == 1 and len(by_g) == 1 and not any(k and _STEP.match(k[0]) for k in (*by_t, *by_g))
    if single:
        (kt, t), (kg, g) = next(iter(by_t.items())), next(iter(by_g.items()))
        by_t, by_g = {(): t}, {(): g}
    pairs, only_t, only_g, notes = [], [], [], []
    for key in sorted(set(by_t) | set(by_g)):
        t, g = by_t.get(key, {}), by_g.get(key, {})
        named = sorted(set(t) & set(g) - {""} - {r for r in t if r.startswith("proc")},
                       key=lambda r: (_rank_number(r) is None, _rank_number(r) or 0, r))
        matched = [(t[r], g[r]) for r in named]
        rest_t = [r for r in t if r not in named]
        rest_g = [r for r in g if r not in named]
        if rest_t and len(rest_t) == len(rest_g) and all(_is_proc(r) for r in rest_t + rest_g):
            rest_t.sort(key=_pid)
            rest_g.sort(key=_pid)
            for rt, rg in zip(rest_t, rest_g):
                matched.append((t[rt], g[rg]))
            where = "/".join(key) or "the given directories"
            if len(rest_t) == 1:
                msg = (f"{where}: {rest_t[0]} paired with {rest_g[0]} (msprobe writes proc<pid> without a process "
                       "group; one on each side)")
                notes.append(_finding("compare-pairing", I, msg, t[rest_t[0]].path))
            else:
                msg = (f"{where}: {len(rest_t)} proc<pid> directories on each side paired in sorted pid order "
                       f"({', '.join(f'{a}~{b}' for a, b in zip(rest_t, rest_g))}): pids say nothing of ranks, "
                       "check the pairing")
                notes.append(_finding("compare-pairing", W, msg, t[rest_t[0]].path,
                                      "initialize a torch.distributed process group so msprobe writes rank<N>"))
            rest_t, rest_g = [], []
        elif single and len(rest_t) == 1 and len(rest_g) == 1 and not named:
            matched.append((t[rest_t[0]], g[rest_g[0]]))  # two rank dirs or two dump.json files given
            rest_t, rest_g = [], []
        only_t += [t[r] for r in rest_t]
        only_g += [g[r] for r in rest_g]
        for st, sg in matched:
            step, stage = _layout_of(st.path)
            rank = _rank_number(st.rank_dir) if st.rank_dir == sg.rank_dir else None
            pairs.append(Pair(st, sg, step, stage, rank))
    pairs.sort(key=_sort_key)
    return pairs, only_t, only_g, notes


def _is_proc(r: str) -> bool:
    return r.startswith("proc")


def _pid(r: str) -> int:
    return int(r[4:]) if r[4:].isdigit() else 0


# ----------------------------------------------------------------------------- running msprobe

def _inside(path: str, root: str) -> bool:
    """path is root or under it; for a dump.json root, under its directory (stack.json, construct.json).
    Symlinks and `..` resolved on both sides."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    if os.path.isfile(root):
        root = os.path.dirname(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def refuse_inside(outputs: dict[str, str | None], inputs: tuple[str, ...]) -> None:
    """UsageError if an output path (option -> path) is inside an input: nothing is ever written under
    TARGET or GOLDEN, whatever the option. Checked before anything runs."""
    for option, path in outputs.items():
        if not path:
            continue
        for root in inputs:
            if _inside(path, root):
                real = os.path.realpath(path)
                shown = path if real == os.path.abspath(path) else f"{path} (that is {real})"
                where = f"the directory of {root}" if os.path.isfile(root) else root
                raise UsageError(f"{option} {shown} is inside {where}: nothing is written under TARGET or GOLDEN; "
                                 "choose a path outside both")


def _msprobe_compare(job: tuple[str, str, str]) -> dict:
    """In a worker process: `msprobe compare -tp T -gp G -o OUT` through msprobe's own CLI code, its
    output to OUT/msprobe.log. Returns the result file it wrote, or the error."""
    tp, gp, out = job
    log = os.path.join(out, "msprobe.log")
    before = set(os.listdir(out))
    error = ""
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import argparse
        import sys

        import msprobe

        if "fork" in multiprocessing.get_all_start_methods() and multiprocessing.get_start_method() != "fork":
            # This worker was spawned and inherited "spawn"; msprobe's tensor compare starts its own pool,
            # as under its command (fork on Linux), not one that imports torch and msprobe again per pair.
            multiprocessing.set_start_method("fork", force=True)
        extra = os.path.join(os.path.dirname(msprobe.__file__), "msaccucmp")
        if extra not in sys.path:
            sys.path.append(extra)  # as msprobe's own command does before importing its compare code
        from msprobe.core.compare.compare_cli import compare_cli
        from msprobe.core.compare.utils import _compare_parser

        argv = ["-tp", tp, "-gp", gp, "-o", out]
        parser = argparse.ArgumentParser(prog="msprobe compare")
        _compare_parser(parser)
        compare_cli(parser.parse_args(argv), argv)
    except BaseException as e:  # msprobe raises CompareException, or exits: report it, keep the worker
        error = f"{type(e).__name__}: {e}".strip()
    finally:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
    new = sorted(f for f in os.listdir(out) if f not in before and f.startswith("compare_result") and
                 f.endswith(".csv"))
    return {"result": os.path.join(out, new[-1]) if new else None, "error": error, "log": log}


def _log_tail(log: str | None, n: int = 3) -> str:
    """msprobe's last errors and warnings (not its CANN complaint, which every CPU run logs)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            lines = [ln.strip() for ln in fh if ("[ERROR]" in ln or "[WARNING]" in ln) and "CANN" not in ln]
    except (OSError, TypeError):
        return ""
    return " | ".join(re.sub(r"^.*?\[(ERROR|WARNING)\]\s*", r"\1: ", ln) for ln in lines[-n:])


def _precheck(side: Side) -> Finding | None:
    """A dump.json msprobe should not even be given: absent or empty."""
    if not os.path.isfile(side.path):
        return _finding("dump-missing", E, f"{side.label}: no dump.json", os.path.dirname(side.path),
                        "the session was started but never stopped (a crash inside the stage?)")
    if os.path.getsize(side.path) == 0:
        return _finding("dump-empty", E, f"{side.file_label} is empty (0 bytes)", side.path,
                        "the writer was interrupted or the stage collected nothing; collect it again")
    return None


def _diagnose(pair: Pair, outcome: dict) -> Finding:
    """msprobe wrote no result: say which dump.json is at fault, or quote msprobe."""
    import json

    for side in (pair.target, pair.golden):
        try:
            with open(side.path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except ValueError as e:
            return _finding("dump-corrupt", E, f"{side.file_label} is not valid JSON ({e.msg} at line "
                            f"{e.lineno if hasattr(e, 'lineno') else '?'}): truncated or overwritten", side.path,
                            "the writer was interrupted (a killed worker, a full disk); collect this stage again")
        except OSError as e:
            return _finding("dump-missing", E, f"{side.file_label} cannot be read ({e.strerror})", side.path)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict):
            return _finding("dump-corrupt", E, f"{side.file_label} has no \"data\" mapping: not an msprobe "
                            "dump", side.path)
        if not data:
            return _finding("dump-empty", E, f"{side.file_label} holds no records", side.path,
                            "the stage ran no hooked API or module (config.json scope/list/level, or the stage's "
                            "model was not resolved)")
    said = outcome.get("log_tail") or _log_tail(outcome.get("log")) or outcome.get("error") or "no result file"
    return _finding("compare-failed", E, f"{pair.label}: msprobe compare wrote no result: {said}",
                    outcome.get("log") or pair.target.path,
                    "the two dumps may be of different tasks or levels, or hold no call in common; "
                    "see msprobe.log beside it")


def compare_runs(target: str, golden: str, out_dir: str | None = None, metric: str = DEFAULT_METRIC,
                 threshold: float = DEFAULT_THRESHOLD, top: int = DEFAULT_TOP, jobs: int | None = None,
                 progress=None, ignore_dtype: bool = False, pool: cf.Executor | None = None,
                 msprobe_csv: str | None = None, ignores: tuple = (), default_ignores: bool = True,
                 dtype_aware: bool = False, keep_nodes: int = 0, ray: str | None = None,
                 ray_resource: str | None = None, job_fn=compare_pair) -> Comparison:
    """Pair, compare (the engine, per pair) and analyze. progress(done, total) is called as pairs
    finish. msprobe_csv: None, "diverged" or "all": also run msprobe's own compare on those pairs for
    its result file. `ignores`: record patterns left out (ignores.py), after DEFAULT_IGNORES unless
    default_ignores is False. `pool` (from worker_pool()) lets several comparisons share workers; `ray`
    (an address, or "auto") runs the pairs on a Ray cluster instead (ray_runner). job_fn(PairJob) ->
    PairOutcome is the per-pair job. With an output directory, a summary.json per pair and one for the
    whole are written there."""
    patterns = _check_args(metric, ignores, default_ignores, out_dir, (target, golden), msprobe_csv)
    t_sides, g_sides = _sides(target), _sides(golden)
    pairs, only_t, only_g, notes = pair_up(t_sides, g_sides)
    if not pairs and {s.key for s in t_sides}.isdisjoint({s.key for s in g_sides}):
        raise UsageError(f"{target} and {golden} have no (step, stage, rank) in common: give two paths of the "
                         "same kind (two save_paths, two step_N/stage directories, two dump.json files)")
    cmp = Comparison(os.path.abspath(target), os.path.abspath(golden), "", metric, threshold, top,
                     ignore_dtype=ignore_dtype, ignores=patterns, msprobe_csv=msprobe_csv, dtype_aware=dtype_aware,
                     keep_nodes=keep_nodes, ray=ray, ray_resource=ray_resource)
    cmp.pairs, cmp.only_in_target, cmp.only_in_golden, cmp.findings = pairs, only_t, only_g, notes
    return _execute(cmp, out_dir, jobs, progress, pool, job_fn)


def compare_ranks(run: str, reference: int = 0, out_dir: str | None = None, metric: str = DEFAULT_METRIC,
                  threshold: float = DEFAULT_THRESHOLD, top: int = DEFAULT_TOP, jobs: int | None = None,
                  progress=None, ignore_dtype: bool = False, pool: cf.Executor | None = None,
                  msprobe_csv: str | None = None, ignores: tuple = (), default_ignores: bool = True,
                  dtype_aware: bool = False, keep_nodes: int = 0, ray: str | None = None,
                  ray_resource: str | None = None, job_fn=compare_pair) -> Comparison:
    """Rank against rank in one run: every rank's dump against the reference rank's dump of the same
    (step, stage), for every step and stage under `run`. Each pair's target is the other rank; the
    options are compare_runs'."""
    patterns = _check_args(metric, ignores, default_ignores, out_dir, (run,), msprobe_csv)
    ref_dir = f"rank{reference}"
    by_key: dict[tuple, dict[str, Side]] = {}
    for s in _sides(run):
        by_key.setdefault(s.key, {})[s.rank_dir] = s
    if not any(_rank_number(r) is not None for ranks in by_key.values() for r in ranks):
        raise UsageError(f"{run}: no rank<N> directory (msprobe writes proc<pid> without a process group, and "
                         "pids say nothing of ranks): --ranks needs a run with a torch.distributed process group")
    cmp = Comparison(os.path.abspath(run), os.path.abspath(run), "", metric, threshold, top,
                     ignore_dtype=ignore_dtype, ignores=patterns, msprobe_csv=msprobe_csv, dtype_aware=dtype_aware,
                     keep_nodes=keep_nodes, ray=ray, ray_resource=ray_resource, reference_rank=reference)
    for key in sorted(by_key):
        ranks = by_key[key]
        others = sorted((r for r in ranks if r != ref_dir), key=lambda r: (_rank_number(r) is None,
                                                                           _rank_number(r) or 0, r))
        ref = ranks.get(ref_dir)
        if ref is None:
            cmp.only_in_target += [ranks[r] for r in others]
            where = "/".join(key) or run
            cmp.findings.append(_finding("compare-pairing", W, f"{where}: no {ref_dir} to compare "
                                         f"{', '.join(others)} against", os.path.dirname(ranks[others[0]].path),
                                         "the reference rank did not collect this stage; choose another "
                                         "with --ranks N"))
            continue
        for r in others:
            step, stage = _layout_of(ranks[r].path)
            cmp.pairs.append(Pair(ranks[r], ref, step, stage, _rank_number(r)))
    cmp.pairs.sort(key=_sort_key)
    if not cmp.pairs and not cmp.only_in_target:
        raise UsageError(f"{run}: only {ref_dir} there, no other rank to compare against it")
    return _execute(cmp, out_dir, jobs, progress, pool, job_fn)


def _check_args(metric: str, ignores, default_ignores: bool, out_dir: str | None, inputs: tuple,
                msprobe_csv: str | None) -> tuple:
    """What can be refused before anything runs; returns the ignore patterns in force."""
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    if msprobe_csv not in (None, "diverged", "all"):
        raise UsageError(f"--msprobe-csv {msprobe_csv!r}: diverged or all")
    patterns = ignore_patterns(ignores, default_ignores)
    for p in inputs:
        if not os.path.exists(p):
            raise UsageError(f"{p}: no such file or directory")
    refuse_inside({"-o": out_dir}, inputs)
    return patterns


def _sides(root: str) -> list[Side]:
    sides = collect(root)
    if not sides:
        raise UsageError(f"{root}: no rank directory or dump.json there (give a save_path, a step_N/stage "
                         "directory or a dump.json)")
    return sides


def _execute(cmp: Comparison, out_dir: str | None, jobs, progress, pool, job_fn) -> Comparison:
    inputs = (cmp.target, cmp.golden)
    if out_dir is not None:  # -o beside an input must not reach into it through a pair's subdirectory either
        for p in cmp.pairs:
            refuse_inside({"-o": _pair_dir(out_dir, p)}, inputs)
    for side, which in [(s, "target") for s in cmp.only_in_target] + [(s, "golden") for s in cmp.only_in_golden]:
        if cmp.reference_rank is None:
            cmp.findings.append(_finding("compare-pairing", W, f"{side.label} is in the {which} run only",
                                         os.path.dirname(side.path), "the other run did not collect it"))
    todo = _prechecked(cmp)
    _refuse_metric(cmp, todo)
    if out_dir is None and cmp.msprobe_csv:  # the engine alone writes nothing without -o
        out_dir = tempfile.mkdtemp(prefix="verl-pdbg-compare-")
        try:  # an input under the temporary directory's parent (TMPDIR) is no excuse either
            refuse_inside({"the temporary output directory": out_dir}, inputs)
        except UsageError:
            os.rmdir(out_dir)
            raise
        cmp.temporary = True
    cmp.out_dir = os.path.abspath(out_dir) if out_dir else ""
    try:
        _run_engine(cmp, todo, jobs, progress, pool, job_fn)
        if cmp.msprobe_csv:
            _run_msprobe(cmp, jobs, pool)
        if cmp.out_dir:
            write_summaries(cmp)
    except BaseException:
        remove_output(cmp)
        raise
    return cmp


def _prechecked(cmp: Comparison) -> list[Pair]:
    todo = []
    for p in cmp.pairs:
        bad = [f for f in (_precheck(p.target), _precheck(p.golden)) if f]
        if bad:
            p.status, p.findings = "error", bad
        else:
            todo.append(p)
    return todo


def _refuse_metric(cmp: Comparison, todo: list[Pair]) -> None:
    """A metric no dump here can give is refused before anything runs (exit 2)."""
    spec = METRICS[cmp.metric]
    for p in todo:
        for side in (p.target, p.golden):
            head = header_of(side.path)
            task = "md5" if head.get("summary_mode") == "md5" else head.get("task")
            if task and task not in spec.tasks:
                offered = ", ".join(m for m, s in METRICS.items() if task in s.tasks)
                raise UsageError(f"--metric {cmp.metric} cannot be computed from {side.file_label}: a {task} dump "
                                 f"(metrics for it: {offered})")


def _pair_dir(out_dir: str, p: Pair) -> str:
    return os.path.join(out_dir, *p.target.key, p.rank_label)


def ignore_patterns(ignores, default_ignores: bool = True) -> tuple[str, ...]:
    """The patterns in force, each once: the default's, then the user's; an unusable one is a UsageError."""
    out = [p for p, _why in DEFAULT_IGNORES] if default_ignores else []
    for p in ignores or ():
        if not isinstance(p, str) or not p.partition("@")[0].strip():
            raise UsageError(f"--ignore {p!r}: give a record name pattern, e.g. 'Tensor.narrow.*' "
                             "or 'Tensor.narrow.*@*/_fsdp_collectives.py:*'")
        if p not in out:
            out.append(p)
    return tuple(out)


def worker_pool(jobs: int | None = None) -> cf.ProcessPoolExecutor:
    """Worker processes for the engine and msprobe compare. spawn, not fork: the caller may have torch
    loaded."""
    return cf.ProcessPoolExecutor(max_workers=jobs or default_jobs(),
                                  mp_context=multiprocessing.get_context("spawn"))


def _run_engine(cmp: Comparison, todo: list[Pair], jobs: int | None, progress, shared: cf.Executor | None,
                job_fn=compare_pair) -> None:
    def job(p: Pair) -> PairJob:
        return PairJob(p.target.path, p.golden.path, cmp.metric, cmp.threshold, cmp.top, cmp.ignore_dtype,
                       cmp.dtype_aware, cmp.ignores, cmp.keep_nodes)

    done = len(cmp.pairs) - len(todo)
    if progress:
        progress(done, len(cmp.pairs))
    if not todo:
        return
    if cmp.ray:
        _spread(cmp, todo, job_fn, job, lambda p, out: _finish_engine(cmp, p, out), progress, done, len(cmp.pairs),
                lambda p, error: PairOutcome(error=error, rule="compare-failed", path=p.target.path,
                                             hint="see the Ray cluster's logs for that node"))
        return
    workers = max(1, min(jobs or default_jobs(), len(todo)))
    if shared is None and workers == 1:  # one pair or -j 1: no worker process to start
        for p in todo:
            _finish_engine(cmp, p, job_fn(job(p)))
            done += 1
            if progress:
                progress(done, len(cmp.pairs))
        return
    retry = _pool(todo, shared or worker_pool(workers), job_fn, job,
                  lambda p, out: _finish_engine(cmp, p, out), progress, done, len(cmp.pairs), shared is None)
    for p in retry:  # a worker died (killed, out of memory) and took the pool: each again, in this process
        _finish_engine(cmp, p, job_fn(job(p)))


def _run_msprobe(cmp: Comparison, jobs: int | None, shared: cf.Executor | None) -> None:
    """msprobe's own compare, for its CSV: on the diverged pairs, or on every compared pair."""
    todo = [p for p in cmp.pairs if p.status == "diverged" or (cmp.msprobe_csv == "all" and p.status == "same")]
    if not todo:
        return
    for p in todo:
        p.out_dir = _pair_dir(cmp.out_dir, p)
        os.makedirs(p.out_dir, mode=0o750, exist_ok=True)
    if cmp.ray:  # the CSV comes back as data and is written here, by the driver
        _spread(cmp, todo, msprobe_remote, lambda p: (p.target.path, p.golden.path),
                lambda p, out: _finish_csv(p, _csv_written(p, out)), None, 0, len(todo),
                lambda p, error: {"result": None, "error": error, "log": None})
        return
    workers = max(1, min(jobs or default_jobs(), len(todo)))
    lost = _pool(todo, shared or worker_pool(workers), _msprobe_compare,
                 lambda p: (p.target.path, p.golden.path, p.out_dir), lambda p, out: _finish_csv(p, out),
                 None, 0, len(todo), shared is None)
    if lost:
        _pool(lost, worker_pool(1), _msprobe_compare, lambda p: (p.target.path, p.golden.path, p.out_dir),
              lambda p, out: _finish_csv(p, out), None, 0, len(lost), True,
              died={"result": None, "error": "the msprobe compare worker process died", "log": None})


def _pool(todo: list[Pair], pool: cf.Executor, fn, make_job, finish, progress, done: int, total: int, own: bool,
          died: dict | None = None) -> list[Pair]:
    """Run fn(make_job(p)) for each pair; finish(p, outcome) as they complete. Returns the pairs lost to a
    worker that died (when `died` is None; otherwise they finish with it)."""
    lost = []
    try:
        try:
            futures = {pool.submit(fn, make_job(p)): p for p in todo}
        except cf.process.BrokenProcessPool:
            return list(todo)  # a shared pool broken earlier
        for fut in cf.as_completed(futures):
            p = futures[fut]
            try:
                outcome = fut.result()
            except cf.process.BrokenProcessPool:
                if died is None:
                    lost.append(p)
                    continue
                outcome = died
            finish(p, outcome)
            done += 1
            if progress:
                progress(done, total)
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
    return lost


def _spread(cmp: Comparison, todo: list[Pair], fn, make_job, finish, progress, done: int, total: int, failed) -> None:
    """On the Ray cluster: fn(make_job(p)) per pair, finish(p, outcome) as they come back; a pair the
    cluster could not run finishes with failed(p, error). Ray is imported here only."""
    from verl_pdbg_conf.compare.ray_runner import ClusterError, run_ray

    notes: list[str] = []
    try:
        for i, outcome, node, error in run_ray(fn, [make_job(p) for p in todo], _reads, cmp.ray, cmp.ray_resource,
                                               notes):
            p = todo[i]
            p.ran_on = node or p.ran_on
            finish(p, failed(p, error) if error else outcome)
            done += 1
            if progress:
                progress(done, total)
    except ClusterError as e:
        raise UsageError(str(e)) from e
    cmp.findings += [_finding("compare-ray", W, n, cmp.ray) for n in notes if n not in
                     {f.message for f in cmp.findings}]


def _reads(job) -> tuple[str, str]:
    """The two dump.json files a job reads (a PairJob, or msprobe's (target, golden))."""
    return (job.target, job.golden) if isinstance(job, PairJob) else tuple(job[:2])


def msprobe_remote(job: tuple[str, str]) -> dict:
    """On a Ray node: msprobe's own compare into a temporary directory there; its CSV comes back as bytes
    (the driver writes it), with the tail of msprobe's log."""
    out = tempfile.mkdtemp(prefix="verl-pdbg-csv-")
    try:
        outcome = _msprobe_compare((job[0], job[1], out))
        outcome["log_tail"] = _log_tail(outcome["log"])
        if outcome["result"]:
            with open(outcome["result"], "rb") as fh:
                outcome["csv"] = (os.path.basename(outcome["result"]), fh.read())
        outcome["result"] = outcome["log"] = None
        return outcome
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _csv_written(p: Pair, outcome: dict) -> dict:
    if outcome.get("csv"):
        name, data = outcome.pop("csv")
        outcome["result"] = os.path.join(p.out_dir, name)
        with open(outcome["result"], "wb") as fh:
            fh.write(data)
    return outcome


def _finish_engine(cmp: Comparison, p: Pair, out: PairOutcome) -> None:
    for rule, msg, hint in out.notes:
        p.findings.append(_finding(rule, I, f"{p.label}: {msg}", p.target.path, hint))
    if out.analysis is None:
        p.status = "mismatch" if out.rule == "compare-mismatch" else "error"
        sev = W if p.status == "mismatch" else E
        side = p.golden if out.path == p.golden.path else p.target
        what = f"{side.file_label} {out.error}" if out.rule.startswith("dump-") else f"{p.label}: {out.error}"
        p.findings.append(_finding(out.rule, sev, what, out.path or p.target.path, out.hint))
        return
    p.analysis = out.analysis
    p.status = "diverged" if p.analysis.first else "same"


def _finish_csv(p: Pair, outcome: dict) -> None:
    p.log_file = outcome.get("log")
    if outcome.get("result"):
        p.result_file = outcome["result"]
    else:
        f = _diagnose(p, outcome)  # the engine's verdict stands; only msprobe's CSV is missing
        p.findings.append(Finding(f.rule, W, f.message, f.file, f.line, f.column, f.path, f.hint))


def remove_output(cmp: Comparison) -> bool:
    """Delete the temporary output directory (no -o given) once the report is out; True if removed.
    The pairs' result and log paths are cleared: they no longer exist."""
    if not cmp.temporary:
        return False
    shutil.rmtree(cmp.out_dir, ignore_errors=True)
    for p in cmp.pairs:
        p.result_file = p.log_file = None
    return True


# ----------------------------------------------------------------------------- data out

def side_dict(s: Side) -> dict:
    step, stage = _layout_of(s.path)
    return {"step": step, "stage": stage, "rank": _rank_number(s.rank_dir), "rank_dir": s.rank_dir,
            "path": s.path}


def layer_dict(layer) -> dict:
    return {"label": layer.label, "first_order": layer.first_order, "nodes": layer.n_nodes,
            "worst": _json_number(layer.worst), "nan": layer.nan, "inf": layer.inf, "diverged": layer.diverged}


def pair_dict(p: Pair, metric: str, layers: bool = False) -> dict:
    """One pair as data, bounded whatever the dump's size: its first divergence, top nodes and counts;
    with `layers`, its per-layer summary (Analysis.layers folded to at most MAX_LAYERS entries)."""
    an = p.analysis
    d = {
        "step": p.step, "stage": p.stage, "rank": p.rank,
        "rank_dir": {"target": p.target.rank_dir, "golden": p.golden.rank_dir},
        "status": p.status,
        "first_divergence": an.first.as_dict(metric) if an and an.first else None,
        "top": [n.as_dict(metric) for n in an.top] if an else [],
        "result_file": p.result_file,
        "task": an.task if an else None,
        "nodes": an.n_nodes if an else 0,
        "minibatches": an.minibatches if an else None,
        "ignored": {k: v for k, v in an.ignored.items() if v} if an else {},
        "both_nonfinite": an.both_nonfinite.as_dict(metric) if an and an.both_nonfinite else None,
        "target": p.target.path, "golden": p.golden.path,
        "findings": [f.to_dict() for f in p.findings],
    }
    if p.ran_on:
        d["ran_on"] = p.ran_on
    if layers:
        d["layers"] = [layer_dict(lay) for lay in fold_layers(an.layers, MAX_LAYERS)] if an else []
    return d


def write_summaries(cmp: Comparison) -> None:
    """OUT/<step>/<stage>/<inner>/<rank>/summary.json per pair (with its layers) and OUT/summary.json (the
    whole comparison, without them): bounded files, written by this process only."""
    for p in cmp.pairs:
        d = _pair_dir(cmp.out_dir, p)
        os.makedirs(d, mode=0o750, exist_ok=True)
        _write_json(os.path.join(d, SUMMARY), pair_dict(p, cmp.metric, layers=True))
    _write_json(os.path.join(cmp.out_dir, SUMMARY), as_dict(cmp))


def _write_json(path: str, doc: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


def ignored_summary(cmp: Comparison) -> list[dict]:
    """Each pattern in force: why (the default's), the records it left out and in how many pairs."""
    why = dict(DEFAULT_IGNORES)
    out = []
    for pat in cmp.ignores:
        counts = [p.analysis.ignored.get(pat, 0) for p in cmp.pairs if p.analysis]
        out.append({"pattern": pat, "default": pat in why, "why": why.get(pat, ""), "records": sum(counts),
                    "pairs": sum(1 for c in counts if c)})
    return out


def as_dict(cmp: Comparison) -> dict:
    pairs = [pair_dict(p, cmp.metric) for p in cmp.pairs]
    return {
        "target": cmp.target, "golden": cmp.golden,
        "output_dir": None if not cmp.out_dir or (cmp.temporary and not os.path.isdir(cmp.out_dir)) else cmp.out_dir,
        "metric": cmp.metric, "threshold": cmp.threshold,
        "ignore_patterns": list(cmp.ignores),
        "msprobe_csv": cmp.msprobe_csv,
        "reference_rank": cmp.reference_rank,
        "ignored": ignored_summary(cmp),
        "pairs": pairs,
        "only_in_target": [side_dict(s) for s in cmp.only_in_target],
        "only_in_golden": [side_dict(s) for s in cmp.only_in_golden],
        "diagnostics": [f.to_dict() for f in cmp.findings],
        "exit_code": cmp.exit_code,
    }
