"""The compare's options: one object built once from the command line (CompareOptions.from_args) and passed
whole to the run compare, the rank compare and the rollout compare, with every default here; and the table
of which modes honour each option (MODES_OF), so an option a mode cannot honour is refused, never ignored.
PairOptions is the part one pair's job needs (sent to a worker process or a Ray task).

No torch, msprobe or verl here: the command line is checked before anything heavy is imported."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from verl_pdbg_conf.compare.ignores import DEFAULT_IGNORES
from verl_pdbg_conf.compare.nodes import METRICS
from verl_pdbg_conf.compare.verdict import UsageError

# The default metric: the relative error of the L2 norm, |norm(target) - norm(golden)| / norm(golden).
# msprobe's statistics task prints it (NormRelativeErr); for the tensor task it is computed from
# msprobe's "NPU l2norm"/"Bench l2norm" columns with the same formula, so one default serves both.
# A norm is near zero only for a (near) zero tensor, so unlike MeanRelativeErr (a mean can be ~0) or
# Max/MinRelativeErr (one element) it does not blow up on noise. The threshold 1e-4 (0.01 %) sits
# between fp32 reduction-order noise (~1e-7..1e-6 on a norm) and what one wants found: bf16 rounding
# (~1e-3) and a 1 % weight change (1e-2). msprobe's own "error" mark for this metric needs 0.5.
DEFAULT_METRIC = "NormRelativeErr"
DEFAULT_THRESHOLD = 1e-4
DEFAULT_MIN_COVERAGE = 0.99  # share of each side's records a pair must compare to be "same"
DEFAULT_TOP = 5  # largest differences listed per pair
# -j's default: each worker holds torch and msprobe (a few hundred MB) and msprobe's tensor compare starts its
# own pool, so at most this many whatever the CPU count.
MAX_DEFAULT_JOBS = 4
# The rollout compare's one metric: each token's comparison points are judged by the relative error of the
# norm of that token's rows, computed here from the tensor files (no msprobe column to choose from).
ROLLOUT_METRIC = "NormRelativeErr"


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_JOBS))

RUNS, RANKS, ROLLOUT = "runs", "--ranks", "--rollout"
MODES = (RUNS, RANKS, ROLLOUT)
_PAIRED = frozenset({RUNS, RANKS})
_ALL = frozenset(MODES)


@dataclass(frozen=True)
class Honoured:
    """One option's row: the modes that honour it, and why the others cannot (said when it is refused)."""
    modes: frozenset
    why: str = ""


# One row per option (its flag as the command line spells it): the modes that honour it.
MODES_OF: dict[str, Honoured] = {
    "-o": Honoured(_ALL),
    "--msprobe-csv": Honoured(_PAIRED, "msprobe's own compare pairs dump.json files of one kind of run, not "
                              "engine steps against the actor's batch"),
    "--dtype-aware": Honoured(_ALL),
    "--metric": Honoured(_PAIRED, "the rollout is judged per token by NormRelativeErr of each comparison point's "
                         "tensor, from the tensor files"),
    "--threshold": Honoured(_ALL),
    "--min-coverage": Honoured(_ALL),
    "--target-conf": Honoured(frozenset({RUNS}), "a verl config gives a run's parallel layout to combine its ranks "
                              "against another run's; rank against rank and the rollout compare combine none"),
    "--golden-conf": Honoured(frozenset({RUNS}), "a verl config gives a run's parallel layout to combine its ranks "
                              "against another run's; rank against rank and the rollout compare combine none"),
    "--ignore-dtype": Honoured(_PAIRED, "the rollout's dtype against the actor's is judged by --dtype-aware"),
    "--ignore": Honoured(_PAIRED, "the rollout compare pairs the engine's modules through vLLM's tables, not "
                         "record by record"),
    "--no-default-ignores": Honoured(_PAIRED, "the default ignores are FSDP2 records, which the rollout compare "
                                     "never pairs"),
    "--top": Honoured(_ALL),
    "-j": Honoured(_ALL),
    "-f": Honoured(_ALL),
    "--html": Honoured(_ALL),
    "--ray": Honoured(_ALL),
    "--ray-resource": Honoured(_ALL),
}

# argparse's dest of each flag (its long name where it has one)
DEST = {"-o": "output", "-j": "jobs", "-f": "format"}


def dest(flag: str) -> str:
    return DEST.get(flag) or flag.lstrip("-").replace("-", "_")


def mode_of(args) -> str:
    return ROLLOUT if args.rollout else RANKS if args.ranks is not None else RUNS


def refused(args) -> str:
    """The first option given on the command line (argparse's namespace, every default None) that its mode
    cannot honour, said in one line; "" when every one is honoured."""
    mode = mode_of(args)
    for flag, row in MODES_OF.items():
        if getattr(args, dest(flag), None) is not None and mode not in row.modes:
            what = "two runs compared" if mode == RUNS else mode
            return f"{what}: not with {flag}: {row.why}"
    return ""


@dataclass(frozen=True)
class PairOptions:
    """How a pair is judged, and how much of it is kept: the same for every pair of a comparison."""
    metric: str = DEFAULT_METRIC
    threshold: float = DEFAULT_THRESHOLD
    ignore_dtype: bool = False
    dtype_aware: bool = False
    ignores: tuple = ()  # the patterns in force
    min_coverage: float = DEFAULT_MIN_COVERAGE
    top: int = DEFAULT_TOP
    keep_nodes: int = 0  # keep up to this many nodes (for a per-node plot); 0 keeps none


@dataclass(frozen=True)
class CompareOptions:
    """Every option of a comparison; checked when made (a UsageError says which and why)."""
    out_dir: str | None = None  # -o
    metric: str = DEFAULT_METRIC
    threshold: float = DEFAULT_THRESHOLD
    min_coverage: float = DEFAULT_MIN_COVERAGE
    top: int = DEFAULT_TOP
    jobs: int | None = None  # None: default_jobs()
    ignore_dtype: bool = False
    dtype_aware: bool = False
    ignores: tuple = ()  # the user's patterns (--ignore), after the default's unless default_ignores is False
    default_ignores: bool = True
    msprobe_csv: str | None = None  # None, "diverged" or "all"
    ray: str | None = None  # a Ray cluster's address, or "auto"
    ray_resource: str | None = None
    confs: dict = field(default_factory=dict)  # side ("target", "golden") -> a verl config file
    keep_nodes: int = 0  # nodes each pair's analysis keeps (for a per-node plot)
    format: str = "text"
    html: str | None = None

    def __post_init__(self):
        if not isinstance(self.threshold, (int, float)) or math.isnan(self.threshold) or self.threshold < 0:
            raise UsageError(f"--threshold {self.threshold!r}: a fraction >= 0")
        if self.top < 0:
            raise UsageError(f"--top {self.top}: a count of nodes >= 0 (0 lists none)")
        if self.jobs is not None and self.jobs < 1:
            raise UsageError(f"-j/--jobs {self.jobs}: a number of worker processes >= 1")
        if not 0.0 <= self.min_coverage <= 1.0:
            raise UsageError(f"--min-coverage {self.min_coverage!r}: a share from 0 to 1")
        if self.metric not in METRICS:
            raise UsageError(f"unknown metric {self.metric!r}; one of {', '.join(METRICS)}")
        if self.msprobe_csv not in (None, "diverged", "all"):
            raise UsageError(f"--msprobe-csv {self.msprobe_csv!r}: diverged or all")
        if self.ray_resource and not self.ray:
            raise UsageError("--ray-resource needs --ray")
        object.__setattr__(self, "ignores", tuple(self.ignores or ()))
        self.patterns  # noqa: B018 - an unusable pattern is refused here, before anything runs

    @classmethod
    def from_args(cls, args) -> "CompareOptions":
        """From argparse's namespace (every default None: the defaults are this class's), refusing an option the
        mode cannot honour."""
        why = refused(args)
        if why:
            raise UsageError(why)
        given = {k: v for k, v in (("out_dir", args.output), ("metric", args.metric), ("threshold", args.threshold),
                                   ("min_coverage", args.min_coverage), ("top", args.top), ("jobs", args.jobs),
                                   ("ignore_dtype", args.ignore_dtype), ("dtype_aware", args.dtype_aware),
                                   ("ignores", args.ignore), ("msprobe_csv", args.msprobe_csv), ("ray", args.ray),
                                   ("ray_resource", args.ray_resource), ("format", args.format),
                                   ("html", args.html)) if v is not None}
        if args.no_default_ignores:
            given["default_ignores"] = False
        given["confs"] = {s: c for s, c in (("target", args.target_conf), ("golden", args.golden_conf)) if c}
        return cls(**given)

    @property
    def patterns(self) -> tuple[str, ...]:
        """The ignore patterns in force, each once: the default's, then the user's."""
        out = [p for p, _why in DEFAULT_IGNORES] if self.default_ignores else []
        for p in self.ignores:
            if not isinstance(p, str) or not p.partition("@")[0].strip():
                raise UsageError(f"--ignore {p!r}: give a record name pattern, e.g. 'Tensor.narrow.*' "
                                 "or 'Tensor.narrow.*@*/_fsdp_collectives.py:*'")
            if p not in out:
                out.append(p)
        return tuple(out)

    @property
    def pair(self) -> PairOptions:
        return PairOptions(self.metric, self.threshold, self.ignore_dtype, self.dtype_aware, self.patterns,
                           self.min_coverage, self.top, self.keep_nodes)
