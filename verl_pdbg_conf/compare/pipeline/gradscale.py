"""Gradients of runs that split the batch differently. A data-parallel rank's loss is scaled for an all-reduce
that averages: verl multiplies each rank's loss (its tokens over the whole batch's) by the data-parallel size,
and Megatron's DDP divides by it when it reduces (as FSDP does, and as a mean loss per rank is with DDP), so
every gradient a rank computes in its backward pass is `dp` times the one-rank run's; only the reduced
gradient is the model's. A trainer that sums instead (each rank's loss over the whole batch, gradients
summed) computes the one-rank run's gradients. With the target's batch put together from k times as many
shares as the golden's (k: target shares / golden shares), a row of the backward pass is judged as is, or
with the target's statistics divided by k: the first gradient in the model (a backward row of a record
inside a module) for which one holds and the other does not settles which for the pair. Rows pass either
way where nothing settles it: the loss's own arithmetic outside the model, where the scale enters (its
seed, 1, is the same in both), and a forward-named call made in the backward pass (megatron-core's linear
layers compute their gradients with matmuls of their own), which holds gradients and weights side by
side."""

from __future__ import annotations

from dataclasses import replace

from verl_pdbg_conf.compare import metrics as M
from verl_pdbg_conf.compare.judge import Rule


class GradScale:
    def __init__(self, k: float):
        self.k = k
        self.mode = "" if k != 1 else "as is"  # "as is" | "scaled", once a gradient has settled it

    def row(self, judge, t, g, record):
        """judge.row(t, g), for a row of the backward pass by the rule above."""
        plain = judge.row(t, g)
        if self.mode == "as is" or g is None or not (record.direction != "forward" or record.after_backward):
            return plain
        scaled = judge.row(self._scaled(t), g) if t.dtype in M.FLOAT_DTYPES else plain
        inside = record.module is not None or bool(record.scope) or record.layer is not None
        if record.direction == "forward" or not inside or not self.mode and not (
                (plain.reason is Rule.AGREE) != (scaled.reason is Rule.AGREE)):
            # a forward-named call in the backward pass, the loss's own arithmetic outside the model (where the
            # scale enters: the seed 1 is the same in both), or nothing settled yet: either
            return plain if plain.reason is Rule.AGREE or scaled.reason is not Rule.AGREE else scaled
        if not self.mode:
            self.mode = "as is" if plain.reason is Rule.AGREE else "scaled"
        return scaled if self.mode == "scaled" else plain

    def _scaled(self, row):
        return replace(row, stats=tuple(v / self.k if type(v) in (int, float) else v for v in row.stats))

    def note(self) -> str:
        if self.mode != "scaled":
            return ""
        side, other, f = ("target", "golden", self.k) if self.k > 1 else ("golden", "target", 1 / self.k)
        return (f"the {side}'s gradients are {f:g} times the {other}'s (each data-parallel rank's loss scaled for an "
                f"all-reduce that averages, as verl and Megatron's DDP do): the backward pass judged with the "
                f"{side}'s divided by {f:g}")
