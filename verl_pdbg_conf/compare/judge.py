"""The judge: the rules a pair of values (one from each run) is held to, and its decision, for both
compares. The run compare holds each paired statistics row to them (Judge.row); the rollout compare's token
walk (rollout/walk.py) holds each comparison point of a token to them (point).

The rules, in order: only like is judged against like (element counts that differ, where no known layout
accounts for it, cannot be the same tensor: `apart`, not compared); NaN/Inf on one side and not the other
(or differently); shape; dtype (unless told); integer and bool tensors exactly; then the value against the
limit: the threshold, raised with dtype awareness to the rounding step (machine epsilon, metrics.EPS) of the
lower precision the runs differ in. A row with no counterpart is `unmatched` (pairing says why; it is no
divergence by itself).

In the run compare, a flat parameter of FSDP1's against one parameter of FSDP2's, or a model of other sizes,
is `apart`, and so is every other row of their calls (pipeline/analysis.py: the norm of a flat parameter's
gradient is a scalar as one parameter's is). Every known layout (a fused module's parts, tensor-parallel
shards, a batch split: pipeline/fusion.py, parallel/merge.py, splits.py) has made its rows whole before they come
here; the judge itself takes a constant replicated tensor as its counterpart's size, and, where the runs lay
tensors out otherwise (pipeline/plan.py), another shape of the same count."""

from __future__ import annotations

import enum
import math
import os
from dataclasses import dataclass

from verl_pdbg_conf.compare import metrics as M
from verl_pdbg_conf.compare.nodes import METRICS


class Rule(str, enum.Enum):
    """The rule a pair of values broke (its decision's reason; a node's `reason` in the JSON), or AGREE."""
    AGREE = ""
    UNMATCHED = "unmatched"  # no counterpart (or dtypes msprobe would not pair)
    APART = "apart"  # element counts that cannot be the same tensor's: not compared
    NAN = "nan"
    INF = "inf"
    SHAPE = "shape"
    DTYPE = "dtype"
    EXACT = "exact"  # an integer or bool tensor that differs at all
    THRESHOLD = "threshold"

    def __str__(self) -> str:
        return self.value


NOT_JUDGED = (Rule.UNMATCHED, Rule.APART)  # decisions that say nothing of the values: no divergence by themselves


@dataclass(slots=True)
class Decision:
    """What the judge says of one pair of values."""
    reason: Rule
    value: float | None  # the metric as a badness (higher is worse)
    golden_nonfinite: str = ""
    both_nonfinite: str = ""  # nan | inf: non-finite alike on both sides (not a divergence)


def counts_agree(n: int | None, m: int | None) -> bool:
    """Two element counts can be one tensor's (or one is unknown: a scalar, a shape msprobe did not write)."""
    return n is None or m is None or n == m


def sizes_agree(t, g) -> bool:
    """The two rows hold as many elements."""
    return counts_agree(M.numel(t.shape), M.numel(g.shape))


def dtype_limit(threshold: float, dtypes, roundings: float = 1.0) -> float:
    """The threshold, or `roundings` rounding steps of the lowest of the dtypes where larger."""
    return max([threshold] + [roundings * M.EPS.get(d, 0.0) for d in dtypes])


def against(value: float | None, limit: float) -> Rule:
    """A value (a badness) held to its limit: NaN is no comparison at all, past the limit a divergence."""
    if value is None:
        return Rule.AGREE
    if value != value:
        return Rule.NAN
    return Rule.THRESHOLD if value > limit else Rule.AGREE


def point(count: int, other: int, value: float, limit: float, kinds: tuple[str, str] = ("", "")) -> Decision:
    """One comparison point of two tensors' values (the rollout's token walk: a relative L2 error, its limit
    already raised by what it carries in): apart where their element counts differ; `kinds`, each side's
    non-finite kind (nan, inf or "" where finite): one side non-finite where the other is not (or
    otherwise) is a divergence, both alike is none (no error can be measured: both_nonfinite says so)."""
    if not counts_agree(count, other):
        return Decision(Rule.APART, None)
    if kinds[0] != kinds[1]:
        return Decision(Rule(kinds[0] or kinds[1]), math.nan, kinds[1])
    if kinds[0]:
        return Decision(Rule.AGREE, None, "", kinds[0])
    return Decision(against(value, limit), value)


class Judge:
    """The run compare's judge of statistics rows (and the tensor task's arrays). Holds the metric, threshold
    and what --dtype-aware learns on the way (the rounding step of the lowest precision the runs differ in),
    and the dtype suggestion made once without it."""

    def __init__(self, metric: str, threshold: float, task: str, target: str, golden: str,
                 ignore_dtype: bool = False, dtype_aware: bool = False, layout_free: bool = False):
        self.metric, self.threshold, self.task = metric, threshold, task
        self.spec = METRICS[metric]
        self.arrays = task == "tensor" and metric != "NormRelativeErr"  # the others come from the tensor files
        self.stat_i = None if self.arrays else M.STAT_INDEX[metric]
        # the tensor task's CSV has no NormRelativeErr: it is the l2norms' relative error, none without both
        self.stat_rel = M.norm_rel if task == "tensor" else M.rel_err
        self.t_dir, self.g_dir = (os.path.join(os.path.dirname(p), "dump_tensor_data") for p in (target, golden))
        self.ignore_dtype, self.dtype_aware = ignore_dtype, dtype_aware
        self.lowp_eps = 0.0
        self.suggest = ""
        # another layout of the same tensor ([s, b, h] against [b, s, h], a concatenation of parts or shards)
        # is no shape difference where the runs are known to lay tensors out differently (plan.AlignmentPlan)
        self.layout_free = layout_free

    @property
    def limit(self) -> float:
        return max(self.threshold, self.lowp_eps)

    def value(self, t, g):
        """The metric of a paired row as a badness (higher is worse), None where none can be computed."""
        if self.arrays:
            v = self._array_value(t, g) if t.shape == g.shape else None
        else:
            v = self.stat_rel(t.stats[self.stat_i], g.stats[self.stat_i])
        if v is not None and not self.spec.higher_is_worse:
            v = 1.0 - v
        return v

    def like(self, t, g) -> bool:
        """The two rows can be the same tensor: their element counts agree, or a known layout accounts for
        the difference (a constant tensor ranks held alike). Rows whose dtypes msprobe would not pair are
        `unmatched` instead (a boolean mask against an integer one), and hold nothing of their call apart."""
        if not M.dtypes_pair(t.dtype or "None", g.dtype or "None"):
            return True
        if self.layout_free and t.shape != g.shape:
            t, g = _resized(t, g), _resized(g, t)
        return sizes_agree(t, g)

    def row(self, t, g) -> Decision:
        """One paired statistics row (g None: no counterpart)."""
        if g is None or not M.dtypes_pair(t.dtype or "None", g.dtype or "None"):
            return Decision(Rule.UNMATCHED, None)
        if not self.like(t, g):
            return Decision(Rule.APART, None)
        if self.layout_free and t.shape != g.shape:
            t, g = _resized(t, g), _resized(g, t)
        tc, gc = M.nonfinite(t.stats), M.nonfinite(g.stats)
        if tc != gc:
            return Decision(Rule(M.kind_of(tc) or M.kind_of(gc)), math.nan, M.kind_of(gc))
        value = self.stat_rel(t.stats[self.stat_i], g.stats[self.stat_i]) if self.stat_i is not None else None
        if value is not None and not self.spec.higher_is_worse:
            value = 1.0 - value
        both = M.kind_of(tc)
        if self.arrays and t.shape == g.shape:
            value = self._array_value(t, g)
            if value is not None and not self.spec.higher_is_worse:
                value = 1.0 - value
        reason = Rule.AGREE
        if t.shape != g.shape and not (self.layout_free and M.numel(t.shape) == M.numel(g.shape) is not None):
            reason = Rule.SHAPE
        elif t.dtype != g.dtype:
            self._dtypes(t.dtype, g.dtype)
            if not (self.ignore_dtype or self.dtype_aware):
                reason = Rule.DTYPE
        if not reason and M.exact_dtype(t.dtype) and t.stats != g.stats:
            reason = Rule.EXACT
            if not value:
                value = max((v for v in map(M.rel_err, t.stats, g.stats) if v is not None), default=None)
        if not reason and not self.arrays and self.task == "tensor" and M.exact_dtype(t.dtype):
            if self._arrays_differ(t, g):
                reason = Rule.EXACT
        if not reason:
            reason = against(value, self._limit(t, g))
        return Decision(reason, value, "", both)

    def _limit(self, t, g) -> float:
        """The threshold, or for statistics put together from parts (a fused projection's, shards), the
        rounding step of their dtype where larger: msprobe rounds each part's statistics to the tensor's dtype
        (a bf16 Norm keeps 8 bits), and their combination keeps that error."""
        if t.parts > 1 or g.parts > 1:
            return dtype_limit(self.limit, (t.dtype, g.dtype))
        return self.limit

    def _dtypes(self, a: str, b: str) -> None:
        if a in M.FLOAT_DTYPES and b in M.FLOAT_DTYPES:
            step = max(M.EPS[a], M.EPS[b])
            if self.dtype_aware:
                self.lowp_eps = max(self.lowp_eps, step)
            elif not self.suggest:
                low = a if M.EPS[a] == step else b
                self.suggest = (f"{a} against {b}: --dtype-aware judges such runs with the threshold raised to "
                                f"{step:.3g}, the relative rounding step (machine epsilon) of {low}")

    def arrays_of(self, t, g):
        """The two rows' tensor files as arrays, or None without both."""
        if t.data_name in ("-1", "", None) or g.data_name in ("-1", "", None):
            return None
        try:
            return (M.load_array(os.path.join(self.t_dir, t.data_name)),
                    M.load_array(os.path.join(self.g_dir, g.data_name)))
        except (OSError, RuntimeError, ValueError, EOFError):
            return None

    def _array_value(self, t, g):
        both = self.arrays_of(t, g)
        return None if both is None else M.tensor_metric(self.metric, *both)

    def _arrays_differ(self, t, g) -> bool:
        """The tensor task keeps the values: an integer tensor is equal only if every element is."""
        import numpy as np

        both = self.arrays_of(t, g)
        return both is not None and not np.array_equal(*both)


def _resized(row, other):
    """A constant tensor that tensor-parallel ranks held alike (a zero bias: replicated or sharded, nobody
    can tell) has the statistics of its counterpart's size: the counterpart's shape where that is a whole
    number of it per rank."""
    n, m = M.numel(row.shape), M.numel(other.shape)
    mx, mn = row.stats[0], row.stats[1]
    if row.alike < 2 or not n or m != n * row.alike or type(mx) not in (int, float) or mx != mn:
        return row
    from dataclasses import replace

    return replace(row, shape=other.shape, stats=(mx, mn, mx, abs(mx) * math.sqrt(m)))
