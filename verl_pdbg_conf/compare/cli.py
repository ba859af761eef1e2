"""`verl-pdbg-compare TARGET GOLDEN`: the first divergence of two runs, per step, stage and rank;
`verl-pdbg-compare RUN --ranks [REF]`: every rank of one run against rank REF (default 0);
`verl-pdbg-compare --rollout SAVE_PATH`: the rollout against the actor, token by token.

Exit codes (verdict.ExitCode, the same for all three): 0 same, 1 diverged, 2 usage, 3 incomplete,
4 error. Nothing escapes main() as a traceback: an unexpected error is one line and exit code 4
(VERL_PDBG_DEBUG=1 prints the traceback too)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback

from verl_pdbg_conf.compare.output_paths import check_outputs
from verl_pdbg_conf.compare.runs import (DEFAULT_TOP, as_dict, compare_ranks, compare_runs, remove_output,
                                        require_msprobe)
from verl_pdbg_conf.compare.verdict import ExitCode, Reason, UsageError, failure
from verl_pdbg_conf.compare.nodes import DEFAULT_METRIC, DEFAULT_THRESHOLD, METRICS
from verl_pdbg_conf.compare.pipeline.coverage import DEFAULT_MIN_COVERAGE, short

PROG = "verl-pdbg-compare"
TOP_SHOWN = 3  # pairs whose top list the text output prints


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, description="Compare two runs' msprobe dumps pair by pair (step, stage, rank) with msprobe "
        "compare, and name the first node in execution order whose difference passes a threshold.",
        epilog="exit codes: 0 same: every pair compared whole, none diverged; 1 diverged: a divergence found; "
        "2 usage: arguments or output paths refused, before any dump is read; 3 incomplete: no divergence, but a "
        "pair could not be compared (its dumps missing, empty, corrupt or collected differently), was compared "
        "only in part, or is in one run only; 4 error: the compare itself failed (on a pair, whose status is "
        "then 'error' with reason compare-failed, or as a whole); it wins over 1, since the pair it lost may "
        "hold a divergence. VERL_PDBG_DEBUG=1 prints an unexpected error's traceback.")
    ap.add_argument("target", help="the run under test: a save_path, a step_N/stage directory or a dump.json")
    ap.add_argument("golden", nargs="?", help="the reference run, the same kind of path (not with --ranks)")
    ap.add_argument("--rollout", action="store_true",
                    help="the rollout engine against the trainer: TARGET is a save_path holding the actor's "
                    "log-prob forward (actor_compute_log_prob) and, unless GOLDEN names where it was written "
                    "apart, the rollout's engine steps (rollout_generate); compared token by token, per request")
    ap.add_argument("--ranks", nargs="?", type=int, const=0, default=None, metavar="REF",
                    help="rank against rank in TARGET alone: every rank's dumps against rank REF's (default 0), "
                    "for every step and stage")
    ap.add_argument("-o", "--output", metavar="DIR", help="where a summary.json per pair (and one for the whole) "
                    "and msprobe's CSVs with --msprobe-csv go (default: none, or with --msprobe-csv a temporary "
                    "directory removed at the end); never inside TARGET or GOLDEN")
    ap.add_argument("--msprobe-csv", nargs="?", const="diverged", choices=("diverged", "all"), default=None,
                    help="also run msprobe's own compare for its compare_result CSV: on the diverged pairs "
                    "(the default when given alone) or on all compared pairs; the verdict stays the engine's")
    ap.add_argument("--dtype-aware", action="store_true",
                    help="runs that differ in precision on purpose (bf16 against fp32): a dtype change is not a "
                    "divergence and the threshold is raised to the machine epsilon of the lower precision the "
                    "two runs differ in (bf16 2^-7 = 0.0078, fp16 2^-10)")
    ap.add_argument("--metric", default=DEFAULT_METRIC, choices=list(METRICS),
                    help=f"difference to threshold (default {DEFAULT_METRIC}: relative error of the L2 norm; "
                    "Cosine and the err-ratio metrics count 1 - value)")
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                    help=f"a node diverges when its metric is above this (a fraction; default {DEFAULT_THRESHOLD:g} "
                    "= 0.01%%)")
    ap.add_argument("--min-coverage", type=float, default=DEFAULT_MIN_COVERAGE, metavar="SHARE",
                    help=f"a pair with no divergence is 'same' only where it compared at least this share of each "
                    f"run's records and every module (default {DEFAULT_MIN_COVERAGE:g}); otherwise 'partial', "
                    "naming what was not compared (exit 3)")
    ap.add_argument("--target-conf", metavar="FILE", help="the target run's verl config (its composed config.yaml "
                    "or the overrides file): a Megatron run's tensor/pipeline/context parallel sizes, so each "
                    "tensor-parallel group is compared as one model; without it they are read from the dumps")
    ap.add_argument("--golden-conf", metavar="FILE", help="the same for the golden run")
    ap.add_argument("--ignore-dtype", action="store_true", help="a dtype that differs (bf16 against fp32) is "
                    "not by itself a divergence: for runs that differ in precision on purpose")
    ap.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                    help="leave out records whose name matches PATTERN (fnmatch, e.g. 'Tensor.narrow.*'; "
                    "RECORD@CALLER also matches the calling frame 'path/file.py:LINE in func'); repeatable")
    ap.add_argument("--no-default-ignores", action="store_true",
                    help="compare the records left out by default too (FSDP2's all-gather buffer, read before "
                    "it is filled: different in every run; see docs/compare-ignores.md)")
    ap.add_argument("--top", type=int, default=DEFAULT_TOP, help=f"largest differences listed per pair "
                    f"(default {DEFAULT_TOP})")
    ap.add_argument("-j", "--jobs", type=int, default=None,
                    help="pairs compared at once on this machine (default: the CPU count, at most 4; with --ray, "
                    "one per CPU of each node)")
    ap.add_argument("-f", "--format", choices=("text", "json"), default="text")
    ap.add_argument("--html", metavar="FILE", help="also write one self-contained HTML report: an overview of "
                    "steps x stages x ranks, one line per pair and a per-layer plot for each diverged pair (needs "
                    "matplotlib: pip install 'verl-pdbg-conf[report]')")
    ap.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                    help="spread the pairs over an existing Ray cluster (its address, or 'auto': the local one) "
                    "instead of local worker processes; each pair runs on a node that can read its dumps")
    ap.add_argument("--ray-resource", metavar="NAME", help="with --ray: only nodes holding this custom resource "
                    "(e.g. the ones that mount the dumps) compare pairs")
    return ap


DEBUG_ENV = "VERL_PDBG_DEBUG"


def main(argv: list[str] | None = None) -> int:
    """The command; whatever happens inside, one of the five exit codes, never a traceback by default."""
    try:
        return _main(argv)
    except Exception as e:  # noqa: BLE001 - a fault of the tool is exit code 4, never 1 ("diverged")
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        sys.stderr.write(f"{PROG}: error: the compare failed: {failure(e)} ({DEBUG_ENV}=1 shows where; please "
                         "report it)\n")
        return ExitCode.ERROR


def _usage(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return ExitCode.USAGE


def _main(argv: list[str] | None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return ExitCode.USAGE if e.code not in (0, None) else ExitCode.SAME
    if args.threshold < 0 or math.isnan(args.threshold) or args.top < 0 or (args.jobs is not None and args.jobs < 1):
        return _usage("--threshold and --top must be >= 0, --jobs >= 1")
    if args.html and not args.rollout:
        from verl_pdbg_conf.compare.report_html import matplotlib_missing

        missing = matplotlib_missing()
        if missing:
            return _usage(f"--html {missing}")
    if args.ray_resource and not args.ray:
        return _usage("--ray-resource needs --ray")
    if args.rollout:
        return _rollout(args)
    if (args.ranks is None) == (args.golden is None) or (args.ranks is not None and args.ranks < 0):
        return _usage("give TARGET and GOLDEN, or one run and --ranks [REF] (REF >= 0)")
    inputs = (args.target,) if args.golden is None else (args.target, args.golden)
    try:  # every output before any dump is read (compare_runs checks -o again, and each pair's directory)
        check_outputs({"-o": args.output}, {"--html": args.html}, inputs)
        require_msprobe(args.msprobe_csv)
    except UsageError as e:
        return _usage(str(e))
    progress = ProgressBar() if sys.stderr.isatty() else None
    try:
        common = dict(out_dir=args.output, metric=args.metric, threshold=args.threshold, top=args.top,
                      jobs=args.jobs, progress=progress, ignore_dtype=args.ignore_dtype, ignores=args.ignore,
                      default_ignores=not args.no_default_ignores, msprobe_csv=args.msprobe_csv,
                      dtype_aware=args.dtype_aware, ray=args.ray, ray_resource=args.ray_resource,
                      min_coverage=args.min_coverage)
        if args.ranks is not None:
            cmp = compare_ranks(args.target, args.ranks, **common)
        else:
            cmp = compare_runs(args.target, args.golden, confs={"target": args.target_conf,
                                                                 "golden": args.golden_conf}, **common)
    except UsageError as e:
        return _usage(str(e))
    finally:
        if progress:
            progress.close()
    remove_output(cmp)  # the temporary one only (no -o): the report then names no file in it
    if args.html:
        from verl_pdbg_conf.compare.report_html import write_html

        write_html(cmp, args.html)
    doc = as_dict(cmp)
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.format == "json" else render_text(cmp, doc))
    return cmp.exit_code


def _rollout(args) -> int:
    from verl_pdbg_conf.compare.rollout.report import render_html, render_text as rollout_text
    from verl_pdbg_conf.compare.rollout.run import compare_rollout

    unused = [o for o, v in (("--ranks", args.ranks is not None), ("-o", args.output), ("--msprobe-csv", args.msprobe_csv),
                             ("--ray", args.ray), ("--target-conf", args.target_conf), ("--golden-conf", args.golden_conf))
              if v]
    if unused:
        return _usage(f"--rollout compares one run's two stages from its tensor dumps; not with {', '.join(unused)}")
    try:
        check_outputs({}, {"--html": args.html}, tuple(p for p in (args.target, args.golden) if p))
        doc = compare_rollout(args.target, args.golden, threshold=args.threshold, dtype_aware=args.dtype_aware,
                              top=args.top, min_coverage=args.min_coverage)
    except UsageError as e:
        return _usage(str(e))
    if args.html:
        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(render_html(doc))
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.format == "json" else rollout_text(doc))
    return doc["exit_code"]


class ProgressBar:
    """pairs done / total on stderr, redrawn in place (a terminal only)."""

    def __init__(self):
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        width = 30
        fill = int(width * done / total) if total else width
        sys.stderr.write(f"\rcomparing [{'#' * fill}{'.' * (width - fill)}] {done}/{total} pairs")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def _pct(v) -> str:
    if v is None:
        return "n/a"
    if v == "inf":
        return "inf"
    return f"{100 * v:.4g}%"


_SAY = {"nan": "first NaN", "inf": "first Inf", "unmatched": "no golden counterpart", "shape": "shape differs"}


def _node(n: dict, minibatches: int | None = None) -> str:
    where = n.get("module")
    place = f" [{where}]" if where else (f" [{n['where']}]" if n.get("where") else "")
    extra = ""
    if n.get("dtype"):
        extra += f" dtype {n['dtype']['target']} vs {n['dtype']['golden']}"
    if minibatches and minibatches > 1 and n.get("minibatch") is not None:
        extra += f" (mini-batch {n['minibatch'] + 1} of {minibatches})"
    reason = n.get("reason")
    if reason in ("nan", "inf"):
        g = n.get("golden_nonfinite")
        both = f"; golden is {'NaN' if g == 'nan' else 'Inf'} there too" if g and g != reason else (
            "; golden is finite there" if not g else "")
        return f"{_SAY[reason]}: {n['name']}{place} {n['direction']} {n['kind']}{extra}{both}"
    if reason == "exact":
        why = f": {n['note']}" if n.get("note") else ""
        return f"{n['name']}{place} {n['direction']} {n['kind']}" + \
            f"{extra} (integer/bool values differ{why})"
    if reason in _SAY:
        extra += f" ({_SAY[reason]})"
    if n.get("layer") is not None and f"layer {n['layer']}" not in place and f".{n['layer']}." not in f".{where}.":
        extra += f" layer {n['layer']}"
    if n.get("expert") is not None:  # an MoE expert's module: its global index (an expert-parallel rank's local one differs)
        extra += f" expert {n['expert']}"
    if n.get("received") is not None:
        extra += f", its inputs carried {_pct(n['received'])}"
    return f"{n['name']}{place} {n['direction']} {n['kind']} {n['metric']}={_pct(n['value'])}{extra}"


def layer_line(p: dict) -> str:
    """The worst error per model layer of a pair, so that growth is visible: 0 1e-05% | 1 ... | 3 1% <-."""
    lays = p.get("layer_errors") or []
    if len(lays) < 2:
        return ""
    parts = [f"{lay['layer']} {_pct(lay['worst']) if lay['worst'] is not None else '-'}"
             + (" <- introduced" if lay["introduced"] else "") for lay in lays]
    return f"error per layer, forward (step {p['step']} {p['stage']}): " + " | ".join(parts)


def render_text(cmp, doc: dict) -> str:
    if doc["output_dir"]:
        kept = f"; {'msprobe results' if doc.get('msprobe_csv') else 'summaries'} in {doc['output_dir']}"
    else:
        kept = "; msprobe's result files removed (-o DIR keeps them)" if doc.get("msprobe_csv") else ""
    ref = doc["reference_rank"]
    runs = [f"run {doc['target']}", f"reference rank{ref}: every other rank's dumps against it"] if ref is not None \
        else [f"target {doc['target']}", f"golden {doc['golden']}"]
    L = [*runs, f"metric {doc['metric']} > {_pct(doc['threshold'])}{kept}", ""]
    said = "first divergence" if any(p["first_divergence"] for p in doc["pairs"]) else "finding"
    head = f"{'step':>4}  {'stage':24} {'rank':8} {'status':9} {'compared':15} {said}"
    L += [head, "-" * len(head)]
    for p in doc["pairs"]:
        rd = p["rank_dir"]
        rank = rd["target"] if rd["target"] == rd["golden"] else f"{rd['target']}~{rd['golden']}"
        first = p["first_divergence"]
        text = _node(first, p.get("minibatches")) if first else (
            "-" if p["status"] == "same" else
            "; ".join(f["message"] for f in p["findings"] if f["severity"] != "info") or "-")
        step = "-" if p["step"] is None else p["step"]
        L.append(f"{step:>4}  {(p['stage'] or '-'):24} {rank or '-':8} {p['status']:9} "
                 f"{short(p.get('coverage')):15} {text}")
    shown = 0
    for p in doc["pairs"]:
        if p["top"] and p["first_divergence"]:
            shown += 1
            if shown > TOP_SHOWN:
                continue
            L.append("")
            csv = f" ({p['result_file']})" if p.get("result_file") else ""
            L.append(f"top {len(p['top'])} of step {p['step']} {p['stage']} {p['rank_dir']['target']}{csv}:")
            L += [f"  {_node(n, p.get('minibatches'))}" for n in p["top"]]
            if layer_line(p):
                L.append(layer_line(p))
    if shown > TOP_SHOWN:
        L.append(f"(top lists of {shown - TOP_SHOWN} more diverged pair(s): --format json or --html)")
    left_out = [i for i in doc["ignored"] if i["records"] or not i["default"]]
    if left_out:
        L.append("")
    for i in left_out:
        kind = "default" if i["default"] else "--ignore"
        L.append(f"left out ({kind}): {i['records']} record(s) in {i['pairs']} pair(s) matching {i['pattern']}"
                 + (f"\n    {i['why']}" if i["why"] else ""))
    notes = doc["diagnostics"] + [f for p in doc["pairs"] for f in p["findings"]]
    if notes:
        L.append("")
    for f in notes:
        L.append(f"{f['file']}: {f['severity']} {f['rule']} {f['message']}")
        if f.get("hint"):
            L.append(f"    hint: {f['hint']}")
    both = [(p, p["both_nonfinite"]) for p in doc["pairs"] if p.get("both_nonfinite") and not p["first_divergence"]]
    if both:
        L.append("")
        for p, b in both[:TOP_SHOWN]:
            L.append(f"step {p['step']} {p['stage']}: target and golden are both {'NaN' if b['reason'] == 'nan' else 'Inf'}"
                     f" from {b['name']} on: the golden run is non-finite there too")
    n = len(doc["pairs"])
    count = {s: sum(p["status"] == s for p in doc["pairs"]) for s in ("diverged", "partial", "mismatch", "error")}
    failed = sum(p.get("reason") == Reason.FAILED for p in doc["pairs"])
    L.append("")
    parts = [f"{count['diverged']} diverged" if count["diverged"] else "",
             f"{n - sum(count.values())} same",
             f"{count['partial']} partly compared" if count["partial"] else "",
             f"{count['mismatch']} collected differently (not compared)" if count["mismatch"] else "",
             f"{count['error'] - failed} not compared" if count["error"] > failed else "",
             f"{failed} failed (an error of the compare itself, exit code 4)" if failed else ""]
    L.append("compared: the share of target/golden records compared; \"same\" needs "
             f"{100 * doc['min_coverage']:.3g}% of each and every module")
    L.append(f"{n} pair(s): {', '.join(x for x in parts if x)}; "
             f"{len(doc['only_in_target'])} only in target, {len(doc['only_in_golden'])} only in golden")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
