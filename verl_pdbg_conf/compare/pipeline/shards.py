"""Tensor-parallel shards combined: the ranks of one tensor-parallel group run the same calls in the same
order, each on its shard. Record by record, a tensor the ranks hold alike (replicated, or all-reduced) is
taken once (a constant one, alike whether replicated or sharded, is resized to its counterpart by
judging); a module's tensor they hold in parts (a column-parallel output, a row-parallel input, a shard of
a weight or of its gradient) is the concatenation of the parts (concat.py). An API call's tensors inside a module that differ
between ranks are a partial result inside a parallel module (the products before a row-parallel
all-reduce, a vocabulary shard's masked lookup): not a concatenation, so never paired with a whole tensor;
the call is kept without them, compared at its module's boundary."""

from __future__ import annotations

from dataclasses import replace

from verl_pdbg_conf.compare.pipeline.concat import axis_of, concat_rows, same_rows


class ShardMerge:
    """Merges the record streams of one group's ranks (rank order); `failed` says why it stopped merging
    (the ranks ran different calls), `partial` counts the API calls kept without their sharded tensors."""

    def __init__(self, scoped: bool = False):
        # with each call's enclosing module known (mix, L0), a call outside every module (the trainer's own:
        # gathering logits, an optimizer's step over parameter shards) concatenates as a module's tensor does
        self.scoped = scoped
        self.failed = ""
        self.partial = 0

    def __call__(self, streams):
        first, others = streams[0], streams[1:]
        for r in first:
            peers = [next(s, None) for s in others]
            if self.failed:
                yield r
                continue
            if any(p is None or p.name != r.name or len(p.rows) != len(r.rows) for p in peers):
                gone = next((p for p in peers if p is None or p.name != r.name), peers[0] if peers else None)
                self.failed = (f"the ranks ran different calls ({r.name} against "
                               f"{gone.name if gone is not None else 'the end of the dump'})")
                yield r
                continue
            yield self._merge(r, peers)

    def _merge(self, r, peers):
        rows, sharded = [], False
        for j, row in enumerate(r.rows):
            group = [row, *(p.rows[j] for p in peers)]
            if same_rows(group):
                rows.append(replace(row, alike=len(group)))
                continue
            sharded = True
            if self._partial(r):
                continue  # a partial result: compared at the module's boundary
            c = concat_rows(group, axis_of(row))
            if c is not None:
                rows.append(c)
        if sharded and self._partial(r):
            self.partial += 1
            r.extra["sharded"] = True
        r.rows = rows
        return r

    def _partial(self, r) -> bool:
        """An API call inside a module (or anywhere, where modules are not known) whose tensors differ
        between ranks holds partial results, not shards."""
        return not r.is_module and not (self.scoped and not r.scope)
