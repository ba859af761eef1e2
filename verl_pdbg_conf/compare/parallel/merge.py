"""Record streams of a parallel group's ranks merged into one model's, record by record (the ranks run the
same calls in the same order). One base (RankMerge) and one rule set per kind of group:

- ShardMerge (tensor parallelism): a tensor the ranks hold alike (replicated, or all-reduced) is taken once
  (a constant one, alike whether replicated or sharded, is resized to its counterpart by judging); a
  module's tensor they hold in parts (a column-parallel output, a row-parallel input, a shard of a weight or
  of its gradient) is the concatenation of the parts (concat.py). An API call's tensors inside a module that
  differ between ranks are a partial result inside a parallel module (the products before a row-parallel
  all-reduce, a vocabulary shard's masked lookup): not a concatenation, so never paired with a whole tensor;
  the call is kept without them, compared at its module's boundary.
- DataMerge (data parallelism): each rank ran its share of the batch. A tensor that differs between ranks
  is a share, concatenated; integer inputs and integer or boolean outputs are shares even where the ranks
  agree (every rank's positions 0..s-1); other tensors held alike are taken once. What is each rank's own
  is kept, marked (Row.local) and judged only against a row of the same kind: a partial sum (a rank's loss,
  a scalar that differs between ranks, and the arithmetic that makes it; a parameter's gradient, taken
  before the data-parallel all-reduce, or handled after the backward, a tensor of a parameter's shape that
  differs between ranks; a rank's contribution to an all-reduce whose result the ranks share) and a
  rank-local index (a 1-D integer tensor 0..n-1 every rank builds for its own rows:
  megatron-core's vocab-parallel cross entropy's arange).
- ExpertMerge (expert parallelism, a data-parallel group whose ranks hold different experts): as
  DataMerge, and an expert's records (inside `local_experts.J`) are every rank's, each renamed by its
  rank's Relayer to the global expert, its gradients whole (the expert saw the group's tokens)."""

from __future__ import annotations

from dataclasses import replace

from verl_pdbg_conf.compare.pipeline.concat import axis_of, concat_rows, same_rows

PARTIAL_SUM = "partial sum"  # Row.local: each rank's part of a sum (its loss, its gradients before the all-reduce)
RANK_INDEX = "rank-local index"  # Row.local: an index each rank builds for its own rows


class RankMerge:
    """Merges the record streams of one group's ranks (rank order); `failed` says why it stopped merging
    (the ranks ran different calls), `partial` counts the calls kept without tensors of theirs, `local` the
    rows kept as their ranks' own (Row.local -> rows)."""

    strict = True  # the ranks' records hold as many rows (tensor parallelism: each rank the same call's shard)

    def __init__(self, scoped: bool = False):
        # with each call's enclosing module known (mix, L0), a call outside every module (the trainer's own:
        # gathering logits, an optimizer's step over parameter shards) concatenates as a module's tensor does
        self.scoped = scoped
        self.failed = ""
        self.partial = 0
        self.local: dict[str, int] = {}

    def __call__(self, streams):
        first, others = streams[0], streams[1:]
        for r in first:
            peers = [next(s, None) for s in others]
            if self.failed:
                yield r
                continue
            if any(p is None or p.name != r.name or (self.strict and len(p.rows) != len(r.rows)) for p in peers):
                self._fail(r, peers)
                yield r
                continue
            yield self._merge(r, peers)

    def _fail(self, r, peers) -> None:
        gone = next((p for p in peers if p is None or p.name != r.name), peers[0] if peers else None)
        self.failed = (f"the ranks ran different calls ({r.name} against "
                       f"{gone.name if gone is not None else 'the end of the dump'})")

    def _merge(self, r, peers):
        raise NotImplementedError

    def _partial(self, r) -> bool:
        """An API call inside a module (or anywhere, where modules are not known)."""
        return not r.is_module and not (self.scoped and not r.scope)

    def _mark(self, r, rows: list, why: str) -> list:
        """`rows` (one per rank) kept as one row marked as its ranks' own: the concatenation where they
        concatenate, scalars side by side."""
        r.extra.setdefault("local", set()).add(why)
        self.local[why] = self.local.get(why, 0) + 1
        whole = _joined(rows)
        return replace(whole if whole is not None else rows[0], local=why)


class ShardMerge(RankMerge):
    """Tensor parallelism (see the module's docstring)."""

    def _merge(self, r, peers):
        rows, sharded = [], False
        for j, row in enumerate(r.rows):
            group = [row, *(p.rows[j] for p in peers)]
            if same_rows(group):
                rows.append(replace(row, alike=len(group)))
                continue
            sharded = True
            if self._partial(r):
                continue  # a partial result (or sum): compared at the module's boundary
            c = concat_rows(group, axis_of(row))
            if c is not None:
                rows.append(c)
        if sharded and self._partial(r):
            self.partial += 1
            r.extra["sharded"] = True
        r.rows = rows
        return r


class DataMerge(RankMerge):
    """Data parallelism (see the module's docstring)."""

    strict = False  # a rank's record may hold fewer rows (an optional output it had none of): its first rank's

    def __init__(self):
        super().__init__(scoped=True)
        self.params: set = set()  # the shapes of the parameters seen: a gradient after the backward has one

    def _seen(self, r) -> None:
        self.params.update(tuple(x.shape) for x in r.rows if x.state == "parameters" and _tensor(x))

    def _merge(self, r, peers):
        self._seen(r)
        groups = [[row, *(p.rows[j] if j < len(p.rows) else row for p in peers)] for j, row in enumerate(r.rows)]
        # a reduction over the group (an all-reduce) whose result the ranks share: each rank's input is its part
        reduced = r.name.startswith("Distributed.") and "reduce" in r.op.rsplit(".", 1)[-1] and all(
            same_rows(g) for g in groups if g[0].state == "output" and _tensor(g[0]))
        rows = [self._row(r, g, reduced) for g in groups]
        if not reduced and any(x.local == PARTIAL_SUM for x in rows):
            # arithmetic on each rank's part of a sum (its loss times the data-parallel size, a gradient
            # scaled before its all-reduce): every value of it is the rank's own
            rows = [x if x.local else self._mark(r, g, PARTIAL_SUM) for x, g in zip(rows, groups)]
        r.rows = rows
        return r

    def _row(self, r, group: list, reduced: bool):
        row = group[0]
        if row.state == "parameters_grad":
            return self._grad(r, group)
        if all(map(_rank_index, group)):
            return self._mark(r, group, RANK_INDEX)
        if reduced and row.state == "input" and _tensor(row):
            return self._mark(r, group, PARTIAL_SUM)
        if not reduced and _tensor(row) and _scalar(row) and "int" in row.dtype:
            # an integer scalar is a count or an offset of the rank's own rows even where the ranks agree (verl's
            # FSDP actor counts each rank's tokens, then all-reduces the count; the all-reduced result is compared)
            return self._mark(r, group, PARTIAL_SUM)
        alike = same_rows(group)
        if alike and not _share(row):
            return replace(row, alike=len(group))
        if not _tensor(row):  # an argument that is no tensor: a number of each rank's, or its process group
            return self._mark(r, group, PARTIAL_SUM) if _numbers(group) else row
        if _scalar(row) or (r.after_backward and r.direction == "forward" and tuple(row.shape) in self.params):
            # a scalar that differs, or a parameter's gradient handled after the backward (scaled, reduced)
            return self._mark(r, group, PARTIAL_SUM)
        joined = _joined(group)
        return joined if joined is not None else self._mark(r, group, PARTIAL_SUM)

    def _grad(self, r, group: list):
        """A parameter's gradient on each rank, before the data-parallel all-reduce: its part of the sum."""
        return self._mark(r, group, PARTIAL_SUM)


class ExpertMerge(DataMerge):
    """Expert parallelism: DataMerge with each rank's experts' records every rank's, renamed by its rank's
    Relayer to the global expert (rank 0's at once, the others' after the run of expert records they came
    in, rank by rank, their API calls numbered apart)."""

    CALLS = 1_000_000  # a later rank's expert API calls numbered from rank x CALLS, apart from rank 0's

    def __init__(self, relayers: list, is_expert):
        super().__init__()
        self.relayers, self.is_expert = relayers, is_expert
        self.held: list[list] = [[] for _ in relayers]

    def __call__(self, streams):
        first, others = streams[0], streams[1:]
        for r in first:
            peers = [next(s, None) for s in others]
            if not self.failed and any(p is None or p.name != r.name for p in peers):
                self._fail(r, peers)
            if self.failed:
                yield from self._flush()
                yield r
                continue
            if self.is_expert(r):
                self._seen(r)
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


def _tensor(row) -> bool:
    return isinstance(row.shape, list) and isinstance(row.dtype, str) and row.dtype.startswith("torch.")


def _scalar(row) -> bool:
    return isinstance(row.shape, list) and not row.shape or row.shape == "[]"


def _numbers(rows: list) -> bool:
    return all(type(v) in (int, float) for x in rows for v in x.stats)


def _joined(rows: list):
    """The ranks' rows as one: their concatenation along the first axis that takes them (the statistics are
    the concatenation's whatever the axis; the layout is the other run's business), scalars side by side;
    None where they do not concatenate."""
    if all(_scalar(x) for x in rows):
        return concat_rows([replace(x, shape=[1]) for x in rows], 0)
    shape = rows[0].shape
    for axis in range(len(shape) if isinstance(shape, list) else 0):
        c = concat_rows(rows, axis)
        if c is not None:
            return c
    return None


def _share(row) -> bool:
    """A tensor of exact values that is one rank's share of the batch even where the ranks' agree: integer
    inputs (token ids, positions), integer or boolean outputs (a router's map of chosen experts)."""
    if not _tensor(row) or not row.shape:
        return False
    integer, boolean = "int" in row.dtype, "bool" in row.dtype
    return (row.state == "input" and integer) or (row.state == "output" and (integer or boolean))


def _rank_index(row) -> bool:
    """A 1-D integer tensor holding 0..n-1, n its length: an index of the rank's own rows (an arange), which
    the one-process run holds over all of them."""
    shape, stats = row.shape, row.stats
    return (_tensor(row) and "int" in row.dtype and len(shape) == 1 and shape[0] > 1
            and stats[1] == 0 and stats[0] == shape[0] - 1)
