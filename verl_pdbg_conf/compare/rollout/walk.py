"""The rollout's token walk: for each aligned token, the comparison points (table.py) in the engine's
execution order, each the relative L2 error of the engine's row against the trainer's, decided by the
shared judge (compare/judge.py: rows of other element counts are apart, and rows non-finite alike are not
compared; NaN or Inf on one side only, or an error past the limit, is a divergence); the first such point
is where the token's gap is introduced. An output past it whose input agreed names its module; an input
past it names the engine modules run since the last point that agreed (fused ones, no trainer
counterpart: the rotary embedding and the attention kernel before o_proj). Past the logits, the engine's
returned log-prob against the log-softmax of its own logits names the sampler (temperature, top-k/top-p
applied before the log-probs were taken).

With dtype_aware, sides that differ in precision on purpose are judged by growth: a point diverges only
where its error exceeds the error carried in by the point before it by more than twice the lower
precision's machine epsilon (its own rounding: the weights cast to it, the output rounded, the sums
accumulated; a bf16 MoE layer adds up to 1.25 eps, measured), so rounding that accumulates is never a
divergence.

In a mixture-of-experts layer (routing.py gives each side's chosen experts per token), a fused experts'
output that parts while the router's logits agreed and the two sides chose different experts is a
routing flip on a near-tie, not a module's fault: without dtype_aware it is the token's gap, kind
"routing", at the MoE block; with it, the token's later points are compared but not judged. A flip where the
actor's experts are not its own router's top-k (a routing replay that handed it other experts) is no rounding:
kind "routing" with or without dtype_aware."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from verl_pdbg_conf.compare import judge as J
from verl_pdbg_conf.compare.records import Record
from verl_pdbg_conf.compare.rollout import dumps as D
from verl_pdbg_conf.compare.rollout.table import Point
from verl_pdbg_conf.compare.rollout.tokens import Request, Sequence

ROUNDINGS = 2  # a point's own rounding with dtype_aware, in epsilons of the lower precision


@dataclass
class TokenGap:
    """Where one token's computations part: the point, its error and the one carried in."""

    module: str
    io: str
    error: float
    carried: float  # the error at the last point that agreed (0 at the first)
    span: list[str] = field(default_factory=list)  # engine modules run between that point and this one
    record: str = ""
    at: str = ""  # the point where it shows: a module's input or output
    role: str = ""  # the point's role (table.Point.role): "router", "experts"; "routing" for a flip
    experts: list[int] | None = None  # a fused experts' gap: the experts only the parting tokens used
    routing: dict | None = None  # a routing gap: each side's experts and margins
    nonfinite: tuple[str, str] | None = None  # (engine, trainer) nan | inf | "": one side non-finite, the other not
    order: int = 1 << 30  # the point's place in the forward (engine points in execution order); past them all


@dataclass
class TokenResult:
    request: str
    position: int
    token_id: int
    compared: int = 0  # points compared
    skipped: int = 0  # points whose rows could not be taken (a shape neither side explains)
    worst: float = 0.0
    gap: TokenGap | None = None
    logprob_engine: float | None = None  # what the engine returned for the token sampled after this one
    logprob_engine_logits: float | None = None  # log-softmax of the engine's own logits
    logprob_trainer: float | None = None
    agreed_experts: list[str] = field(default_factory=list)  # fused experts whose output agreed
    rerouted: list[str] = field(default_factory=list)  # MoE layers a near-tie routed differently (dtype_aware)

    @property
    def logprob_gap(self) -> float | None:
        if self.logprob_engine is None or self.logprob_trainer is None:
            return None
        return self.logprob_engine - self.logprob_trainer


class Tensors:
    """Each tensor file loaded once."""

    def __init__(self):
        self.cache: dict[str, object] = {}

    def get(self, file: str | None):
        if file is None:
            return None
        got = self.cache.get(file)
        if got is None:
            try:
                got = D.load(file).detach().double()
            except Exception:  # a missing or truncated file: the point is skipped, counted as such
                got = False
            self.cache[file] = got
        return got if got is not False else None


def _rel(a, b, floor: float = 0.0) -> float:
    """The relative L2 error of two rows of as many elements."""
    import torch

    diff = float(torch.linalg.vector_norm(a.flatten() - b.flatten()))
    ref = max(float(torch.linalg.vector_norm(b.flatten())), floor)
    return diff / ref if ref > 0 else diff


def pick(tensors: Tensors, rec: Record, io: str, index: int):
    """The index-th input or output tensor of a call, loaded; None where there is none or it cannot be."""
    entries = rec.tensors(io)
    return tensors.get(rec.file_of(entries[index])) if index < len(entries) else None


def _dtype(rec: Record, io: str, index: int) -> str:
    entries = rec.tensors(io)
    return (entries[index].dtype or "") if index < len(entries) else ""


@dataclass
class Walk:
    """Walks each token through the comparison points, holding each point to the shared judge, and carries
    what the walk learns (the tensors loaded, the trainer's forward shapes, the rows' typical norms)."""
    threshold: float
    dtype_aware: bool = False
    tensors: Tensors = field(default_factory=Tensors)
    engine_dtype: str = ""  # the engine's dtype (its token record): the log-probs' rounding with dtype_aware
    logits_path: str = "logits"  # the engine module whose output is the logits
    shapes: dict = field(default_factory=dict)  # (trainer rank, call) -> (batch, seq) of its input ids
    scales: dict = field(default_factory=dict)  # a point's trainer tensors -> their rows' typical norm

    def limit(self, point: Point, trainer_rec: Record) -> float:
        if not self.dtype_aware:
            return self.threshold
        a = _dtype(point.engine.record, point.engine.io, point.engine.index)
        b = _dtype(trainer_rec, point.trainer[0].io, point.trainer[0].index)
        return J.dtype_limit(self.threshold, (a, b), ROUNDINGS)

    def _scale(self, ts: list, width: int) -> float:
        """The root-mean-square norm of a point's rows (width values each) over the whole trainer tensor."""
        import torch

        key = tuple(id(t) for t in ts)
        got = self.scales.get(key)
        if got is None:
            total = sum(float(torch.linalg.vector_norm(t.flatten())) ** 2 for t in ts if t is not None)
            rows = max(1, sum(t.numel() for t in ts if t is not None) // max(1, width))
            got = self.scales[key] = math.sqrt(total / rows)
        return got

    def token(self, req: Request, seq: Sequence, position: int, engine_points: list[Point],
              engine_order: list[str], trainer: list[dict[str, list[Record]]],
              routes: dict | None = None) -> TokenResult:
        k, row = req.rows[position]
        src, c, b, s = seq.at[position]
        res = TokenResult(req.id, position, req.tokens[position])
        sampled = req.sampled.get(position + 1)
        logits_here = sampled is not None and sampled.get("step") == k
        carried, last_module = 0.0, None
        bs = self.shapes.get((src, c))
        for order, pt in enumerate(engine_points):
            if pt.rows == "sampled" and not logits_here:
                continue
            mates = [_call(trainer[src].get(m.path), c) for m in pt.trainer]
            if any(m is None for m in mates):
                res.skipped += 1
                continue
            e = pick(self.tensors, pt.engine.record, pt.engine.io, pt.engine.index)
            ts = [pick(self.tensors, rec, m.io, m.index) for rec, m in zip(mates, pt.trainer)]
            erow = sampled["logits_row"] if pt.rows == "sampled" else row
            ev = _row(e, erow)
            tv = [cell(t, b, s, bs) for t in ts]
            if ev is None or any(v is None for v in tv):
                res.skipped += 1
                continue
            import torch

            tvec = torch.cat([v.flatten() for v in tv])
            # with dtype_aware, a row near zero (a gate's one logit cancelling out) is measured against the
            # point's typical size over all rows: its rounding is that size's, not the row's
            limit = self.limit(pt, mates[0]) + (carried if self.dtype_aware else 0.0)
            said, err, kinds = _judged(ev, tvec, limit, self._scale(ts, tvec.numel()) if self.dtype_aware else 0.0)
            if said is None:
                res.skipped += 1  # not the same tensor's row, non-finite alike, or no number: not compared
                continue
            res.compared += 1
            if pt.rows == "sampled":
                self._logprobs(res, ev, tv[0], sampled)
            if said.reason in (J.Rule.NAN, J.Rule.INF):  # non-finite on one side only: parts here, no error measured
                if res.gap is None and not res.rerouted:
                    res.gap = TokenGap(pt.module, pt.io, math.nan, carried, [], pt.engine.record.name,
                                       f"{pt.module} {pt.io}", pt.role, nonfinite=kinds, order=order)
                continue
            res.worst = max(res.worst, err)
            over = said.reason == J.Rule.THRESHOLD
            if res.gap is not None or res.rerouted:
                continue
            route = (routes or {}).get(pt.module.rpartition(".")[0]) if pt.role == "experts" else None
            if over and route is not None and route.differs:  # the router's logits agreed: a near-tie,
                # unless the actor's experts are not its own top-k (a replay handed it others): judged then
                if self.dtype_aware and not route.imposed:
                    res.rerouted.append(route.layer)
                else:
                    res.gap = TokenGap(route.layer, "routing", err, carried, [], pt.engine.record.name,
                                       f"{pt.module} {pt.io}", "routing", routing=route.to_dict(), order=order)
                continue
            if pt.role == "experts" and not over:
                res.agreed_experts.append(pt.module)
            if over:
                span = _span(engine_order, last_module, pt)
                res.gap = TokenGap(_common(span) if span else pt.module, pt.io, err, carried, span,
                                   pt.engine.record.name, f"{pt.module} {pt.io}", pt.role, order=order)
            else:
                carried, last_module = err, pt.module
        if sampled is not None and logits_here:
            self._recorded_logprobs(res, sampled, seq.next_logprob[position] if position < len(seq.next_logprob)
                                    else None)
        if res.rerouted:
            return res  # the logits follow other experts: compared, not judged
        if res.gap is None and res.logprob_engine_logits is not None and res.logprob_trainer is not None:
            # the logits themselves, where no dumped point holds them on both sides (lm_head left out)
            diff = abs(res.logprob_engine_logits - res.logprob_trainer)
            res.compared += 1
            if J.against(diff, self._lp_limit(res.logprob_trainer)) == J.Rule.THRESHOLD:
                res.gap = TokenGap(self.logits_path, "logprob", diff, carried, [],
                                   "log-softmax of the engine's logits against the actor's")
        if res.gap is None and res.logprob_engine is not None and res.logprob_engine_logits is not None:
            own = abs(res.logprob_engine - res.logprob_engine_logits)
            limit = max(self.threshold, 1e-6) * max(1.0, abs(res.logprob_engine_logits))
            if J.against(own, limit) == J.Rule.THRESHOLD:
                res.gap = TokenGap("sampler", "logprob", own, carried, [],
                                   "the engine's returned log-prob is not the log-softmax of its logits")
        return res

    def judge(self, a, b, limit: float):
        """One point's rows of two trainer runs at one token (trainers.py): (Decision, error), the Decision None
        where the rows are not compared (not one tensor's, non-finite alike, no number)."""
        said, err, _kinds = _judged(a, b, limit)
        return said, err

    def _lp_limit(self, lp: float) -> float:
        limit = max(self.threshold, 1e-6)
        if self.dtype_aware:
            limit = J.dtype_limit(limit, (f"torch.{self.engine_dtype}",))
        return limit * max(1.0, abs(lp))

    @staticmethod
    def _recorded_logprobs(res: TokenResult, sampled: dict, trainer_lp: float | None) -> None:
        """The log-probs the token records hold (the runtime takes them from each side's logits, which msprobe
        does not dump where verl is imported); the dumped logits, where both sides have them, come first."""
        lp, own = sampled.get("logprob"), sampled.get("logprob_logits")
        if res.logprob_engine is None and isinstance(lp, (int, float)):
            res.logprob_engine = float(lp)
        if res.logprob_engine_logits is None and isinstance(own, (int, float)):
            res.logprob_engine_logits = float(own)
        if res.logprob_trainer is None and isinstance(trainer_lp, (int, float)):
            res.logprob_trainer = float(trainer_lp)

    @staticmethod
    def _logprobs(res: TokenResult, engine_logits, trainer_logits, sampled: dict) -> None:
        import torch

        tok = sampled["token_id"]
        if not 0 <= tok < engine_logits.numel() or engine_logits.numel() != trainer_logits.numel():
            return
        res.logprob_engine_logits = float(torch.log_softmax(engine_logits.flatten(), -1)[tok])
        res.logprob_trainer = float(torch.log_softmax(trainer_logits.flatten(), -1)[tok])
        lp = sampled.get("logprob")
        res.logprob_engine = float(lp) if isinstance(lp, (int, float)) else None


def _judged(ev, tvec, limit: float, floor: float = 0.0):
    """(Decision or None where not compared, error, each side's non-finite kind) of two rows by the shared judge."""
    err = _rel(ev, tvec, floor) if ev.numel() == tvec.numel() else math.nan
    # a finite error needs both rows finite: only a non-finite one is looked into
    kinds = ("", "") if math.isfinite(err) else (_nonfinite(ev), _nonfinite(tvec))
    if any(kinds):
        err = math.nan
    said = J.point(ev.numel(), tvec.numel(), err, limit, kinds)
    if said.reason == J.Rule.APART or said.both_nonfinite or (said.reason == J.Rule.NAN and not any(kinds)):
        return None, err, kinds
    return said, err, kinds


def _nonfinite(v) -> str:
    """nan, inf or "" (finite): what a row holds, NaN first."""
    import torch

    if bool(torch.isfinite(v).all()):
        return ""
    return "nan" if bool(torch.isnan(v).any()) else "inf"


def _call(records: list[Record] | None, c: int) -> Record | None:
    """The record of a trainer module's c-th forward call (one per forward of the stage)."""
    return records[c] if records and c < len(records) else None


def _row(t, row: int):
    if t is None or t.dim() == 0 or row >= t.shape[0]:
        return None
    return t[row]


def cell(t, b: int, s: int, bs: tuple[int, int] | None = None):
    """Row (b, s) of a trainer tensor: [batch, seq, ...], or [batch * seq, ...] (an MoE block flattens its
    tokens before its router, experts and shared expert); bs is the forward's (batch, seq)."""
    if t is None:
        return None
    if t.dim() >= 2 and b < t.shape[0] and s < t.shape[1] and (bs is None or tuple(t.shape[:2]) == tuple(bs)):
        return t[b, s]
    if bs is not None and t.dim() >= 1 and t.shape[0] == bs[0] * bs[1] != bs[0]:
        return t[b * bs[1] + s]
    return None


def _span(order: list[str], after: str | None, pt: Point) -> list[str]:
    """Engine modules run after `after` and before the point's module: where an input's error came from."""
    if pt.io == "output":
        return []
    try:
        end = order.index(pt.module)
    except ValueError:
        return []
    start = order.index(after) + 1 if after in order[:end] else 0
    return list(dict.fromkeys(m for m in order[start:end] if m != after))


def _common(paths: list[str]) -> str:
    """The innermost module holding every path of a span (the span's own module when it is one)."""
    parts = [p.split(".") for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or paths[0]
