"""Attribution: where an error is introduced, not where it is first seen downstream. A row past the
threshold is the divergence only if its error jumps well beyond the error it received: an output beyond
its call's inputs (and the recent level), an input or a gradient beyond the recent level, a parameter
(weights enter from nowhere) by itself. Rounding accumulated over many ops (bf16 against fp32, a new
kernel's summation order) grows evenly from call to call and never jumps; a real change does.
A sum or difference cannot add error of its own beyond its output's rounding, so its output counts
only if its absolute error (relative error times its norm) also jumps past what its inputs carried:
`log_prob - old_log_prob` of two nearly equal tensors magnifies their rounding, it introduces none. A
sum or mean over a whole tensor is one too: its error is its input's Mean error (times the count for a
sum), which the Norm of a near-zero masked sum of such differences hides."""

from __future__ import annotations

from verl_pdbg_conf.compare import metrics as M
from verl_pdbg_conf.compare.judge import NOT_JUDGED, Rule

JUMP = 4.0  # an error this many times what the node received is introduced there
DECAY = 0.99  # per record: how fast the recent level forgets an error once its tensors are used up
MEAN, NORM = 2, 3  # Row.stats: Max, Min, Mean, Norm
# Elementwise sums and differences, by the op in the record's name (Tensor.__sub__.12.forward)
LINEAR_OPS = frozenset({"__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "add", "add_", "sub",
                        "sub_", "subtract", "rsub"})
# Reductions to one value: the sum of a tensor is its count times its Mean, exactly
REDUCTIONS = {"sum": True, "nansum": True, "mean": False, "nanmean": False}  # op -> times the count


def _finite(v) -> bool:
    return v is not None and v == v and v != M.INF


class Attributor:
    def __init__(self, jump: float = JUMP, decay: float = DECAY):
        self.jump, self.decay = jump, decay
        self.level = 0.0  # the error recently seen: what a node's inputs carry
        self.absorbed = 0  # rows past the threshold that did not jump (accumulated rounding)
        self.absorbed_max = None  # (value, row name)
        self.cancelled = 0  # outputs of sums and differences past the threshold that magnified their inputs' error

    def first_in(self, judged: list) -> int | None:
        """judged: [(row, golden row, judge.Decision)] of one record pair, in its row order. Returns the index of
        the row where an error is introduced, or None; updates the recent level."""
        inputs = [v.value for row, _g, v in judged if row.state == "input" and _finite(v.value)]
        received = max(max(inputs, default=0.0), self.level)
        hit = None
        for i, (row, _g, v) in enumerate(judged):
            if not v.reason or v.reason in NOT_JUDGED:
                continue
            if v.reason != Rule.THRESHOLD:
                hit = i
                break
            if row.state == "parameters":
                hit = i  # a weight that differs is a source of its own
                break
            base = self.level if row.state == "input" else received
            if v.value > self.jump * base:
                if not (row.state == "output" and _cancels(row, _g, v, judged, self.jump)):
                    hit = i
                    break
                self.cancelled += 1
                continue
            self.absorbed += 1
            if self.absorbed_max is None or v.value > self.absorbed_max[0]:
                self.absorbed_max = (v.value, row.name)
        top = max((v.value for _r, _g, v in judged if _finite(v.value)), default=0.0)
        self.level = max(self.level * self.decay, top)
        return hit

    def note(self, limit: float) -> str:
        """How the pair was judged, for the report."""
        said = (f"a node counts as the divergence when its error passes {limit:.3g} and is more than "
                f"{self.jump:g}x the error it received (its inputs', the recent level)")
        if self.absorbed:
            v, name = self.absorbed_max
            said += (f"; {self.absorbed} tensor(s) past {limit:.3g} grew no faster than their inputs (accumulated "
                     f"rounding, largest {v:.3g} at {name})")
        if self.cancelled:
            said += (f"; {self.cancelled} output(s) of a sum or difference past {limit:.3g} carried no more absolute "
                     "error than their inputs (cancellation of nearly equal tensors magnifies their rounding)")
        return said


def _op(record: str) -> str:
    parts = record.split(".")
    return parts[1] if len(parts) > 2 else ""


def _abs_error(row, golden, value) -> float | None:
    """A row's error in its own units: its relative error times the golden norm."""
    norm = golden.stats[NORM] if golden is not None and len(golden.stats) > NORM else None
    if not isinstance(norm, (int, float)) or isinstance(norm, bool) or not _finite(value) or norm != norm:
        return None
    return value * abs(norm)


def _carried(row, golden, value) -> float | None:
    """What an input carried in its own units: the largest lower bound its statistics give of its elementwise
    difference's norm (the Norms' gap, the Means' gap times the root of its count, the Maxes' and the Mins'
    gaps). Values moved apart in both directions keep their Norm: verl's balance_batch hands a mini-batch
    rows whose old log-probs agree in Norm to 1e-7 while their Mean is off by 2e-7."""
    base = _abs_error(row, golden, value)
    if base is None:
        return None
    n = _numel(row.shape)
    gaps = [base]
    for i, scale in ((0, 1.0), (1, 1.0), (MEAN, n ** 0.5 if n else None)):
        t, g = row.stats[i] if len(row.stats) > i else None, golden.stats[i] if len(golden.stats) > i else None
        if scale and all(isinstance(x, (int, float)) and not isinstance(x, bool) and _finite(x) for x in (t, g)):
            gaps.append(abs(t - g) * scale)
    return max(gaps)


def _numel(shape) -> int | None:
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def _sum_error(row, golden, times_count: bool) -> float | None:
    """The error a reduction over all of `row` receives: its Mean's shift (times its count for a sum)."""
    t, g = row.stats[MEAN] if len(row.stats) > MEAN else None, \
        golden.stats[MEAN] if golden is not None and len(golden.stats) > MEAN else None
    n = _numel(row.shape)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and _finite(x) for x in (t, g)) or n is None:
        return None
    return abs(t - g) * (n if times_count else 1)


def _cancels(row, golden, v, judged, jump: float) -> bool:
    """The output of an elementwise sum or difference, or of a sum or mean to one value, whose absolute error
    is within JUMP times what its inputs carried (each estimated by its own norm; for a reduction, by its
    Mean): magnified, not introduced."""
    op = _op(row.record)
    inputs = [(r, g, vv) for r, g, vv in judged if r.state == "input" and g is not None]
    if op in LINEAR_OPS:
        ins = [_carried(r, g, vv.value) for r, g, vv in inputs]
    elif op in REDUCTIONS and _numel(row.shape) == 1:
        ins = [_sum_error(r, g, REDUCTIONS[op]) for r, g, _vv in inputs[:1]]
    else:
        return False
    out = _abs_error(row, golden, v.value)
    ins = [x for x in ins if x is not None]
    return out is not None and bool(ins) and out <= jump * sum(ins)
