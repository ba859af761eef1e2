"""Batch splits (verl issue #6280: log_prob_micro_batch_size_per_gpu against ppo_micro_batch_size_per_gpu):
where one run made a stage's forward in k calls of a smaller batch and the other in one, the k calls'
statistics are combined into the one call's, as far as statistics allow: Max and Min of the parts, Mean
weighted by element counts, Norm as the root of the summed squares. A tensor equal in every part (a
weight, the rotary table) is kept once. Anything else (a loss reduced over the batch, a gradient summed
over micro-batches) cannot be combined and is left out; the note says how each run split the batch."""

from __future__ import annotations

from dataclasses import dataclass, replace

from verl_pdbg_conf.compare.pipeline.concat import concat_rows, same_rows


@dataclass
class Split:
    side: str  # target | golden: the run that made more, smaller calls
    parts: int  # k
    batch: tuple  # (the smaller batch, the larger)
    combined: int = 0  # records combined
    alone: dict = None  # row name -> its shape in one call, where every call's tensor was the same
    left_out: int = 0  # rows that could not be combined
    failed: str = ""  # why passes could not be combined at all

    def note(self, stage_calls: tuple) -> str:
        t, g = stage_calls
        said = (f"the target ran {t}, the golden {g}: each {self.parts} target calls combined into one" if
                self.side == "target" else
                f"the golden ran {g}, the target {t}: each {self.parts} golden calls combined into one")
        if self.failed:
            return f"{said} was not possible ({self.failed}); the calls past the first are not compared"
        extra = f"; {self.left_out} tensors that do not combine (reduced over the batch) left out" \
            if self.left_out else ""
        return f"{said} (Max, Min, element-weighted Mean, root of summed squared Norms){extra}"


def batch_of(record) -> int | None:
    """The batch of the opening call: its first input tensor's first dimension."""
    for row in record.rows:
        if row.state == "input" and isinstance(row.shape, list) and row.shape:
            d = row.shape[0]
            return d if isinstance(d, int) and d > 0 else None
    return None


def detect(t_first, g_first) -> Split | None:
    bt, bg = batch_of(t_first), batch_of(g_first)
    if not bt or not bg or bt == bg:
        return None
    if bt < bg and bg % bt == 0:
        return Split("target", bg // bt, (bt, bg), alone={})
    if bg < bt and bt % bg == 0:
        return Split("golden", bt // bg, (bg, bt), alone={})
    return None


def combine_rows(rows: list, batch: int = 0, alone: dict | None = None):
    """One row from the same tensor of k calls, or None where statistics cannot be combined. A tensor the
    same in every call whose first dimension is the calls' batch is taken as batched (recorded in
    `alone`, so judging can take it as broadcast instead)."""
    first = rows[0]
    if same_rows(rows):
        if batch and isinstance(first.shape, list) and first.shape and first.shape[0] == batch:
            alone[first.name] = first.shape  # the same in every call: batched (a mask) or broadcast
            return replace(first, shape=[first.shape[0] * len(rows), *first.shape[1:]])
        return first
    if not all(isinstance(s, list) and s for s in (r.shape for r in rows)):
        return None
    return concat_rows(rows, axis=0)


def combine(records, split: Split):
    """The records of one run with every k consecutive forward passes combined into one."""
    group: list[list] = []
    current = None
    for r in records:
        g = r.passes // split.parts
        if current is not None and g != current:
            yield from _merge(group, split)
            group = []
        current = g
        while len(group) <= r.passes % split.parts:
            group.append([])
        group[r.passes % split.parts].append(r)
    if group:
        yield from _merge(group, split)


def _merge(group: list[list], split: Split):
    base = group[0]
    parts = [p for p in group if p]
    if len(parts) != split.parts or any(len(p) != len(base) for p in parts) or \
            any(a.op != b.op or len(a.rows) != len(b.rows) for p in parts[1:] for a, b in zip(base, p)):
        if not split.failed:
            split.failed = "the calls ran different ops" if len(parts) == split.parts else \
                f"{len(parts)} calls where {split.parts} were expected"
        for p in group:
            yield from p
        return
    for i, r in enumerate(base):
        rows = []
        for j, row in enumerate(r.rows):
            c = combine_rows([p[i].rows[j] for p in parts], split.batch[0], split.alone)
            if c is None:
                split.left_out += 1
            else:
                rows.append(c)
        r.rows = rows
        r.passes //= split.parts
        split.combined += 1
        yield r
