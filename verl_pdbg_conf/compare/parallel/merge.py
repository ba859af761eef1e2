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
            group = [row, *(self._peer_row(p, j, row) for p in peers)]
            if same_rows(group) and self._replicated(row):
                rows.append(replace(row, alike=len(group)))
                continue
            sharded = True
            if self._left_out(r, row):
                continue  # a partial result (or sum): compared at the module's boundary
            c = concat_rows(group, self._axis(row))
            if c is not None:
                rows.append(c)
        if sharded and self._partial(r):
            self.partial += 1
            r.extra["sharded"] = True
        r.rows = rows
        return r

    # what differs between the kinds of group: how a peer's row is found, which alike rows are one tensor
    # held alike, which differing rows are left out, and the axis shares concatenate along
    def _peer_row(self, peer, j: int, row):
        return peer.rows[j]

    def _replicated(self, row) -> bool:
        return True

    def _left_out(self, r, row) -> bool:
        return self._partial(r)

    def _axis(self, row):
        return axis_of(row)

    def _partial(self, r) -> bool:
        """An API call inside a module (or anywhere, where modules are not known) whose tensors differ
        between ranks holds partial results, not shards."""
        return not r.is_module and not (self.scoped and not r.scope)


class ExpertMerge(ShardMerge):
    """An expert-parallel group's ranks put together as one model: each rank is a data-parallel rank of the
    layers outside the experts (its share of the batch) and holds its own experts. Record by record: an
    expert's records (inside `local_experts.J`) are every rank's, each renamed by its rank's Relayer to the
    global expert (rank 0's at once, the others' after the run of expert records they came in, rank by
    rank, their API calls numbered apart); of any other record, a tensor the ranks hold alike is taken once,
    tensors that differ are the batch's shares, concatenated (along the first axis: the element count and
    statistics are the concatenation's, the layout is the other run's business); a gradient of a parameter
    outside the experts that differs is each rank's partial sum, and an API call's tensors that differ inside
    a module are compared at its boundary, as tensor-parallel partial results are. Integer inputs (token ids,
    positions) and integer or boolean outputs (a router's expert map, counts) are the batch's shares even where
    the ranks' agree (every rank's positions 0..s-1; every token's map holds top-k of its experts); a boolean
    input (an attention mask) is broadcast, once."""

    CALLS = 1_000_000  # a later rank's expert API calls numbered from rank x CALLS, apart from rank 0's

    def __init__(self, relayers: list, is_expert):
        super().__init__(scoped=True)
        self.relayers, self.is_expert = relayers, is_expert
        self.held: list[list] = [[] for _ in relayers]

    def __call__(self, streams):
        first, others = streams[0], streams[1:]
        for r in first:
            peers = [next(s, None) for s in others]
            if not self.failed and any(p is None or p.name != r.name for p in peers):
                gone = next((p for p in peers if p is None or p.name != r.name), None)
                self.failed = (f"the ranks ran different calls ({r.name} against "
                               f"{gone.name if gone is not None else 'the end of the dump'})")
            if self.failed:
                yield from self._flush()
                yield r
                continue
            if self.is_expert(r):
                for i, p in enumerate(peers, 1):
                    self.held[i].append(self._renamed(p, i))
                yield self.relayers[0].record(r)
                continue
            yield from self._flush()
            yield self._merge(r, peers)
        yield from self._flush()

    def _flush(self):
        for i, held in enumerate(self.held):
            yield from held
            held.clear()

    def _renamed(self, r, i: int):
        r = self.relayers[i].record(r)
        if not r.is_module:
            head, _, tail = r.name.partition(".forward") if ".forward" in r.name else r.name.partition(".backward")
            op, _, n = head.rpartition(".")
            if n.isdigit():
                new = f"{op}.{int(n) + i * self.CALLS}"
                r.rows = [replace(x, name=new + x.name[len(head):] if x.name.startswith(head) else x.name)
                          for x in r.rows]
                r.key = new + r.key[len(head):] if r.key.startswith(head) else r.key
                r.name = new + r.name[len(head):]
        return r

    def _peer_row(self, peer, j: int, row):
        return peer.rows[j] if j < len(peer.rows) else row

    def _replicated(self, row) -> bool:
        return not _share(row)

    def _left_out(self, r, row) -> bool:
        return self._partial(r) or row.state == "parameters_grad"  # a partial sum of the batch's gradients

    def _axis(self, row):
        return 0


def _share(row) -> bool:
    """A tensor of exact values that is one rank's share of the batch (see ExpertMerge)."""
    dtype = row.dtype if isinstance(row.dtype, str) else ""
    integer, boolean = "int" in dtype, "bool" in dtype
    return (row.state == "input" and integer) or (row.state == "output" and (integer or boolean))
