"""Gradients of runs that split the batch differently. A data-parallel rank's loss is scaled for an all-reduce
that averages: verl multiplies each rank's loss (its tokens over the whole batch's) by the data-parallel size,
and Megatron's DDP divides by it when it reduces (as FSDP does, and as a mean loss per rank is with DDP), so
every gradient a rank computes in its backward pass is `dp` times the one-rank run's; only the reduced
gradient is the model's. A trainer that sums instead (each rank's loss over the whole batch, gradients
summed) computes the one-rank run's gradients. With the target's batch put together from k times as many
shares as the golden's (k: target shares / golden shares), a row of the backward pass is judged as is, or
with the target's statistics divided by k: the first gradient (a backward record's row) for which one
holds and the other does not settles which for the pair; a forward-named call made in the backward pass
(megatron-core's linear layers compute their gradients with matmuls of their own) holds gradients and
weights side by side, so its rows pass either way."""

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
        if record.direction == "forward":  # a forward-named call in the backward pass: either
            return plain if plain.reason is Rule.AGREE or scaled.reason is not Rule.AGREE else scaled
        if not self.mode and (plain.reason is Rule.AGREE) != (scaled.reason is Rule.AGREE):
            self.mode = "as is" if plain.reason is Rule.AGREE else "scaled"
        return scaled if self.mode == "scaled" else plain

    def _scaled(self, row):
        return replace(row, stats=tuple(v / self.k if type(v) in (int, float) else v for v in row.stats))

    def note(self) -> str:
        if self.mode != "scaled":
            return ""
        return (f"the target's gradients are {self.k:g} times the golden's (each data-parallel rank's loss scaled "
                "for an all-reduce that averages, as verl and Megatron's DDP do): the backward pass judged with "
                f"the target's divided by {self.k:g}")
