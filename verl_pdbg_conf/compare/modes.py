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
from verl_pdbg_conf.compare.options import RANKS, CompareOptions
from verl_pdbg_conf.compare.report.document import as_dict  # noqa: F401
from verl_pdbg_conf.compare.inputs import check_kinds
from verl_pdbg_conf.install_hints import MSPROBE
from verl_pdbg_conf.compare.output_paths import check_outputs
from verl_pdbg_conf.compare.pairs import (W, Comparison, Pair, RankDump, collect, layout_of, pair_up, rank_number,
                                          sort_key)
from verl_pdbg_conf.compare.verdict import UsageError, finding



def compare_runs(target: str, golden: str, options: CompareOptions = CompareOptions(), progress=None,
                 pool: cf.Executor | None = None, job_fn=None) -> Comparison:
    """Pair, compare (the engine, per pair) and analyze, as `options` say (options.py). progress(done, total)
    is called as pairs finish; `pool` (from worker_pool()) lets several comparisons share workers; job_fn(PairJob)
    -> PairOutcome is the per-pair job (default: the engine's compare_pair). options.confs (side -> a verl
    config) gives a Megatron run's parallel layout (parallel/layout.py); else the dumps do."""
    _check_inputs(options, (target, golden))
    t_sides, g_sides = _sides(target), _sides(golden)
    try:
        t_sides, g_sides, said = layout.apply(t_sides, g_sides, options.confs or None)
    except layout.LayoutError as e:
        raise UsageError(str(e)) from None
    pairs, only_t, only_g, notes = pair_up(t_sides, g_sides)
    notes = said + notes
    if not pairs and {s.key for s in t_sides}.isdisjoint({s.key for s in g_sides}):
        raise UsageError(f"{target} and {golden} have no (step, stage, rank) in common: give two paths of the "
                         "same kind (two save_paths, two step_N/stage directories, two dump.json files)")
    cmp = Comparison(os.path.abspath(target), os.path.abspath(golden), "", options)
    cmp.pairs, cmp.only_in_target, cmp.only_in_golden, cmp.findings = pairs, only_t, only_g, notes
    return execute(cmp, progress, pool, job_fn or compare_pair)


def compare_ranks(run: str, reference: int = 0, options: CompareOptions = CompareOptions(), progress=None,
                  pool: cf.Executor | None = None, job_fn=None) -> Comparison:
    """Rank against rank in one run: every rank's dump against the reference rank's dump of the same
    (step, stage), for every step and stage under `run`. Each pair's target is the other rank; the
    rest is compare_runs'."""
    _check_inputs(options, (run,))
    ref_dir = f"rank{reference}"
    by_key: dict[tuple, dict[str, RankDump]] = {}
    for s in _sides(run):
        by_key.setdefault(s.key, {})[s.rank_dir] = s
    if not any(rank_number(r) is not None for ranks in by_key.values() for r in ranks):
        raise UsageError(f"{run}: no rank<N> directory (msprobe writes proc<pid> without a process group, and "
                         "pids say nothing of ranks): --ranks needs a run with a torch.distributed process group")
    cmp = Comparison(os.path.abspath(run), os.path.abspath(run), "", options, reference_rank=reference, mode=RANKS)
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
    return execute(cmp, progress, pool, job_fn or compare_pair)


def _check_inputs(options: CompareOptions, inputs: tuple) -> None:
    """What can be refused before anything runs, beyond the options themselves (checked when made)."""
    check_kinds(inputs)
    check_outputs({"-o": options.out_dir}, {}, inputs)
    require_msprobe(options.msprobe_csv)


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
