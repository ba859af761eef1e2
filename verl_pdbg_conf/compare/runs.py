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
import importlib.util
import os

from verl_pdbg_conf.compare.parallel import layout
from verl_pdbg_conf.compare.engine import compare_pair
from verl_pdbg_conf.compare.execute import default_jobs, execute, remove_output, worker_pool  # noqa: F401
from verl_pdbg_conf.compare.ignores import DEFAULT_IGNORES
from verl_pdbg_conf.compare.nodes import DEFAULT_METRIC, DEFAULT_THRESHOLD, METRICS
from verl_pdbg_conf.compare.pipeline.coverage import DEFAULT_MIN_COVERAGE
from verl_pdbg_conf.compare.report.document import as_dict  # noqa: F401
from verl_pdbg_conf.compare.inputs import check_kinds
from verl_pdbg_conf.install_hints import MSPROBE
from verl_pdbg_conf.compare.output_paths import check_outputs
from verl_pdbg_conf.compare.pairs import (W, Comparison, Pair, RankDump, collect, finding, layout_of, pair_up, rank_number,
                                          sort_key)
from verl_pdbg_conf.compare.verdict import UsageError

DEFAULT_TOP = 5


def compare_runs(target: str, golden: str, out_dir: str | None = None, metric: str = DEFAULT_METRIC,
                 threshold: float = DEFAULT_THRESHOLD, top: int = DEFAULT_TOP, jobs: int | None = None,
                 progress=None, ignore_dtype: bool = False, pool: cf.Executor | None = None,
                 msprobe_csv: str | None = None, ignores: tuple = (), default_ignores: bool = True,
                 dtype_aware: bool = False, keep_nodes: int = 0, ray: str | None = None,
                 ray_resource: str | None = None, job_fn=None,
                 min_coverage: float = DEFAULT_MIN_COVERAGE, confs: dict | None = None) -> Comparison:
    """Pair, compare (the engine, per pair) and analyze. progress(done, total) is called as pairs
    finish. msprobe_csv: None, "diverged" or "all": also run msprobe's own compare on those pairs for
    its result file. `ignores`: record patterns left out (ignores.py), after DEFAULT_IGNORES unless
    default_ignores is False. `pool` (from worker_pool()) lets several comparisons share workers; `ray`
    (an address, or "auto") runs the pairs on a Ray cluster instead (ray_runner). job_fn(PairJob) ->
    PairOutcome is the per-pair job (default: the engine's compare_pair). With an output directory, a summary.json per pair and one for the
    whole are written there. A pair with no divergence is "same" only where it compared at least
    `min_coverage` of each side's records and every module (pipeline/coverage.py), else "partial".
    `confs` (side -> a verl config) gives a Megatron run's parallel layout (parallel/layout.py); else the dumps do."""
    patterns = _check_args(metric, ignores, default_ignores, out_dir, (target, golden), msprobe_csv, min_coverage)
    t_sides, g_sides = _sides(target), _sides(golden)
    try:
        t_sides, g_sides, said = layout.apply(t_sides, g_sides, confs)
    except layout.LayoutError as e:
        raise UsageError(str(e)) from None
    pairs, only_t, only_g, notes = pair_up(t_sides, g_sides)
    notes = said + notes
    if not pairs and {s.key for s in t_sides}.isdisjoint({s.key for s in g_sides}):
        raise UsageError(f"{target} and {golden} have no (step, stage, rank) in common: give two paths of the "
                         "same kind (two save_paths, two step_N/stage directories, two dump.json files)")
    cmp = Comparison(os.path.abspath(target), os.path.abspath(golden), "", metric, threshold, top,
                     ignore_dtype=ignore_dtype, ignores=patterns, msprobe_csv=msprobe_csv, dtype_aware=dtype_aware,
                     keep_nodes=keep_nodes, ray=ray, ray_resource=ray_resource, min_coverage=min_coverage)
    cmp.pairs, cmp.only_in_target, cmp.only_in_golden, cmp.findings = pairs, only_t, only_g, notes
    return execute(cmp, out_dir, jobs, progress, pool, job_fn or compare_pair)


def compare_ranks(run: str, reference: int = 0, out_dir: str | None = None, metric: str = DEFAULT_METRIC,
                  threshold: float = DEFAULT_THRESHOLD, top: int = DEFAULT_TOP, jobs: int | None = None,
                  progress=None, ignore_dtype: bool = False, pool: cf.Executor | None = None,
                  msprobe_csv: str | None = None, ignores: tuple = (), default_ignores: bool = True,
                  dtype_aware: bool = False, keep_nodes: int = 0, ray: str | None = None,
                  ray_resource: str | None = None, job_fn=None,
                  min_coverage: float = DEFAULT_MIN_COVERAGE) -> Comparison:
    """Rank against rank in one run: every rank's dump against the reference rank's dump of the same
    (step, stage), for every step and stage under `run`. Each pair's target is the other rank; the
    options are compare_runs'."""
    patterns = _check_args(metric, ignores, default_ignores, out_dir, (run,), msprobe_csv, min_coverage)
    ref_dir = f"rank{reference}"
    by_key: dict[tuple, dict[str, RankDump]] = {}
    for s in _sides(run):
        by_key.setdefault(s.key, {})[s.rank_dir] = s
    if not any(rank_number(r) is not None for ranks in by_key.values() for r in ranks):
        raise UsageError(f"{run}: no rank<N> directory (msprobe writes proc<pid> without a process group, and "
                         "pids say nothing of ranks): --ranks needs a run with a torch.distributed process group")
    cmp = Comparison(os.path.abspath(run), os.path.abspath(run), "", metric, threshold, top,
                     ignore_dtype=ignore_dtype, ignores=patterns, msprobe_csv=msprobe_csv, dtype_aware=dtype_aware,
                     keep_nodes=keep_nodes, ray=ray, ray_resource=ray_resource, reference_rank=reference,
                     min_coverage=min_coverage)
    for key in sorted(by_key):
        ranks = by_key[key]
        others = sorted((r for r in ranks if r != ref_dir), key=lambda r: (rank_number(r) is None,
                                                                           rank_number(r) or 0, r))
        ref = ranks.get(ref_dir)
        if ref is None:
            cmp.only_in_target += [ranks[r] for r in others]
            where = "/".join(key) or run
            cmp.findings.append(finding("compare-pairing", W, f"{where}: no {ref_dir} to compare "
                                         f"{', '.join(others)} against", os.path.dirname(ranks[others[0]].path),
                                         "the reference rank did not collect this stage; choose another "
                                         "with --ranks N"))
            continue
        for r in others:
            step, stage = layout_of(ranks[r].path)
            cmp.pairs.append(Pair(ranks[r], ref, step, stage, rank_number(r)))
    cmp.pairs.sort(key=sort_key)
    if not cmp.pairs and cmp.only_in_target:
        others = sorted({s.rank_dir for s in cmp.only_in_target},
                        key=lambda r: (rank_number(r) is None, rank_number(r) or 0, r))
        raise UsageError(f"{run}: no {ref_dir} to compare {', '.join(others)} against; choose another with --ranks N")
    if not cmp.pairs:
        raise UsageError(f"{run}: only {ref_dir} there, no other rank to compare against it")
    return execute(cmp, out_dir, jobs, progress, pool, job_fn or compare_pair)


def _check_args(metric: str, ignores, default_ignores: bool, out_dir: str | None, inputs: tuple,
                msprobe_csv: str | None, min_coverage: float = DEFAULT_MIN_COVERAGE) -> tuple:
    """What can be refused before anything runs; returns the ignore patterns in force."""
    if not 0.0 <= min_coverage <= 1.0:
        raise UsageError(f"--min-coverage {min_coverage!r}: a share from 0 to 1")
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    if msprobe_csv not in (None, "diverged", "all"):
        raise UsageError(f"--msprobe-csv {msprobe_csv!r}: diverged or all")
    patterns = ignore_patterns(ignores, default_ignores)
    check_kinds(inputs)
    check_outputs({"-o": out_dir}, {}, inputs)
    require_msprobe(msprobe_csv)
    return patterns


def require_msprobe(msprobe_csv: str | None) -> None:
    """--msprobe-csv runs msprobe's own compare: refused before anything runs where msprobe is not installed
    (found, not imported: the compare stays light)."""
    if msprobe_csv and importlib.util.find_spec("msprobe") is None:
        raise UsageError(f"--msprobe-csv runs msprobe's own compare, and msprobe is not installed here: "
                         f"{MSPROBE}")


def _sides(root: str) -> list[RankDump]:
    sides = collect(root)
    if not sides:
        raise UsageError(f"{root}: no rank directory or dump.json there (give a save_path, a step_N/stage "
                         "directory or a dump.json)")
    return sides


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
