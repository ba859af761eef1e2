"""Attribution: where an error is introduced, not where it is first seen downstream. A row past the
threshold is the divergence only if its error jumps well beyond the error it received: an output beyond
its call's inputs (and the recent level), an input or a gradient beyond the recent level, a parameter
(weights enter from nowhere) by itself. Rounding accumulated over many ops (bf16 against fp32, a new
kernel's summation order) grows evenly from call to call and never jumps; a real change does."""

from __future__ import annotations

from verl_pdbg_conf.compare import metrics as M

JUMP = 4.0  # an error this many times what the node received is introduced there
DECAY = 0.99  # per record: how fast the recent level forgets an error once its tensors are used up
IMMEDIATE = ("nan", "inf", "shape", "dtype", "exact")


def _finite(v) -> bool:
    return v is not None and v == v and v != M.INF


class Attributor:
    def __init__(self, jump: float = JUMP, decay: float = DECAY):
        self.jump, self.decay = jump, decay
        self.level = 0.0  # the error recently seen: what a node's inputs carry
        self.absorbed = 0  # rows past the threshold that did not jump (accumulated rounding)
        self.absorbed_max = None  # (value, row name)

    def first_in(self, judged: list) -> int | None:
        """judged: [(row, golden row, Verdict)] of one record pair, in its row order. Returns the index of
        the row where an error is introduced, or None; updates the recent level."""
        inputs = [v.value for row, _g, v in judged if row.state == "input" and _finite(v.value)]
        received = max(max(inputs, default=0.0), self.level)
        hit = None
        for i, (row, _g, v) in enumerate(judged):
            if not v.reason or v.reason == "unmatched":
                continue
            if v.reason != "threshold":
                hit = i
                break
            if row.state == "parameters":
                hit = i  # a weight that differs is a source of its own
                break
            base = self.level if row.state == "input" else received
            if v.value > self.jump * base:
                hit = i
                break
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
        return said
