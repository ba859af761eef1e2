"""`verl-pdbg-compare TARGET GOLDEN`: the first divergence of two runs, per step, stage and rank;
`verl-pdbg-compare RUN --ranks [REF]`: every rank of one run against rank REF (default 0);
`verl-pdbg-compare --rollout SAVE_PATH`: the rollout against the actor, token by token.

Exit codes (verdict.ExitCode, the same for all three): 0 same, 1 diverged, 2 usage, 3 incomplete,
4 error. Nothing escapes main() as a traceback: an unexpected error is one line and exit code 4
(VERL_PDBG_DEBUG=1 prints the traceback too)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from verl_pdbg_conf.compare.inputs import check_inputs, refuse_swallowed
from verl_pdbg_conf.install_hints import MATPLOTLIB
from verl_pdbg_conf.compare.output_paths import check_outputs
from verl_pdbg_conf.compare import report
from verl_pdbg_conf.compare.modes import as_dict, compare_ranks, compare_runs, remove_output, require_msprobe
from verl_pdbg_conf.compare.verdict import ExitCode, UsageError, failure
from verl_pdbg_conf.compare.nodes import METRICS
from verl_pdbg_conf.compare.options import (DEFAULT_METRIC, DEFAULT_MIN_COVERAGE, DEFAULT_THRESHOLD, DEFAULT_TOP,
                                            CompareOptions)

PROG = "verl-pdbg-compare"


def build_parser() -> argparse.ArgumentParser:
    """Every option's default is None here: CompareOptions holds the defaults, and None tells an option not
    given from one given (options.MODES_OF refuses one a mode cannot honour)."""
    ap = argparse.ArgumentParser(argument_default=None,
        prog=PROG, description="Compare two runs' msprobe dumps pair by pair (step, stage, rank) with msprobe "
        "compare, and name the first node in execution order whose difference passes a threshold.",
        epilog="exit codes: 0 same: every pair compared whole, none diverged; 1 diverged: a divergence found; "
        "2 usage: arguments, inputs that are no run (not an msprobe dump, one folder twice) or output paths "
        "refused, before any dump is read; 3 incomplete: no divergence, but a "
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
    ap.add_argument("--ranks", nargs="?", type=rank_number, const=0, default=None, metavar="REF",
                    help="rank against rank in TARGET alone: every rank's dumps against rank REF's (default 0), "
                    "for every step and stage")
    ap.add_argument("-o", "--output", metavar="DIR", help="where a summary.json per pair (and one for the whole) "
                    "and msprobe's CSVs with --msprobe-csv go (default: none, or with --msprobe-csv a temporary "
                    "directory removed at the end); never inside TARGET or GOLDEN")
    ap.add_argument("--msprobe-csv", nargs="?", const="diverged", choices=("diverged", "all"), default=None,
                    help="also run msprobe's own compare for its compare_result CSV: on the diverged pairs "
                    "(the default when given alone) or on all compared pairs; the verdict stays the engine's")
    ap.add_argument("--dtype-aware", action="store_true", default=None,
                    help="runs that differ in precision on purpose (bf16 against fp32): a dtype change is not a "
                    "divergence and the threshold is raised to the machine epsilon of the lower precision the "
                    "two runs differ in (bf16 2^-7 = 0.0078, fp16 2^-10)")
    ap.add_argument("--metric", choices=list(METRICS),
                    help=f"difference to threshold (default {DEFAULT_METRIC}: relative error of the L2 norm; "
                    "Cosine and the err-ratio metrics count 1 - value)")
    ap.add_argument("--threshold", type=float,
                    help=f"a node diverges when its metric is above this (a fraction; default {DEFAULT_THRESHOLD:g} "
                    "= 0.01%%)")
    ap.add_argument("--min-coverage", type=float, metavar="SHARE",
                    help=f"a pair with no divergence is 'same' only where it compared at least this share of each "
                    f"run's records and every module (default {DEFAULT_MIN_COVERAGE:g}); otherwise 'partial', "
                    "naming what was not compared (exit 3)")
    ap.add_argument("--target-conf", metavar="FILE", help="the target run's verl config (its composed config.yaml "
                    "or the overrides file): a Megatron run's tensor/pipeline/context parallel sizes, so each "
                    "tensor-parallel group is compared as one model; without it they are read from the dumps")
    ap.add_argument("--golden-conf", metavar="FILE", help="the same for the golden run")
    ap.add_argument("--ignore-dtype", action="store_true", default=None, help="a dtype that differs (bf16 against fp32) is "
                    "not by itself a divergence: for runs that differ in precision on purpose")
    ap.add_argument("--ignore", action="append", metavar="PATTERN",
                    help="leave out records whose name matches PATTERN (fnmatch, e.g. 'Tensor.narrow.*'; "
                    "RECORD@CALLER also matches the calling frame 'path/file.py:LINE in func'); repeatable")
    ap.add_argument("--no-default-ignores", action="store_true", default=None,
                    help="compare the records left out by default too (FSDP2's all-gather buffer, read before "
                    "it is filled: different in every run; see docs/compare-ignores.md)")
    ap.add_argument("--top", type=int, help=f"largest differences listed per pair "
                    f"(default {DEFAULT_TOP})")
    ap.add_argument("-j", "--jobs", type=int,
                    help="pairs compared at once on this machine (default: the CPU count, at most 4; with --ray, "
                    "one per CPU of each node)")
    ap.add_argument("-f", "--format", choices=("text", "json"),
                    help="text for a reader (default), or json: the whole report as one JSON document on stdout")
    ap.add_argument("--html", metavar="FILE", help="also write one self-contained HTML report: an overview of "
                    "steps x stages x ranks, one line per pair and a per-layer plot for each diverged pair (needs "
                    f"matplotlib: {MATPLOTLIB})")
    ap.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                    help="spread the pairs over an existing Ray cluster (its address, or 'auto': the local one) "
                    "instead of local worker processes; each pair runs on a node that can read its dumps")
    ap.add_argument("--ray-resource", metavar="NAME", help="with --ray: only nodes holding this custom resource "
                    "(e.g. the ones that mount the dumps) compare pairs")
    return ap


DEBUG_ENV = "VERL_PDBG_DEBUG"


def rank_number(text: str) -> int:
    """--ranks' REF: a rank number; a path there is the run, put before the option."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"REF is a rank number, not {text!r}: give the run first, "
                                         f"`{PROG} RUN --ranks [REF]`") from None


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
    try:
        refuse_swallowed({"--ray": args.ray, "--ray-resource": args.ray_resource})
    except UsageError as e:
        return _usage(str(e))
    if args.rollout:
        if args.ranks is not None:
            return _usage("--rollout compares one run's two stages; not with --ranks")
    elif (args.ranks is None) == (args.golden is None) or (args.ranks is not None and args.ranks < 0):
        return _usage("give TARGET and GOLDEN, or one run and --ranks [REF] (REF >= 0)")
    try:
        options = CompareOptions.from_args(args)
    except UsageError as e:
        return _usage(str(e))
    if options.html and not args.rollout:
        from verl_pdbg_conf.compare.report.runs_html import matplotlib_missing

        missing = matplotlib_missing()
        if missing:
            return _usage(f"--html {missing}")
    if args.rollout:
        return _rollout(args, options)
    inputs = (args.target,) if args.golden is None else (args.target, args.golden)
    try:  # every output before any dump is read (compare_runs checks -o again, and each pair's directory)
        check_outputs({"-o": options.out_dir}, {"--html": options.html}, inputs)
        check_inputs(inputs)
        require_msprobe(options.msprobe_csv)
    except UsageError as e:
        return _usage(str(e))
    progress = ProgressBar() if sys.stderr.isatty() else None
    try:
        if args.ranks is not None:
            cmp = compare_ranks(args.target, args.ranks, options, progress)
        else:
            cmp = compare_runs(args.target, args.golden, options, progress)
    except UsageError as e:
        return _usage(str(e))
    finally:
        if progress:
            progress.close()
    remove_output(cmp)  # the temporary one only (no -o): the report then names no file in it
    return report.deliver(as_dict(cmp), options.format, options.html)


def _rollout(args, options: CompareOptions) -> int:
    from verl_pdbg_conf.compare.rollout.steps import compare_rollout

    progress = ProgressBar() if sys.stderr.isatty() else None
    try:
        check_outputs({"-o": options.out_dir}, {"--html": options.html},
                      tuple(p for p in (args.target, args.golden) if p))
        cmp = compare_rollout(args.target, args.golden, options, progress)
    except UsageError as e:
        return _usage(str(e))
    finally:
        if progress:
            progress.close()
    return report.deliver(as_dict(cmp), options.format, options.html)


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


if __name__ == "__main__":
    sys.exit(main())
