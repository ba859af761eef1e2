"""One side of a pair as one model's records: a rank's dump; or a replica's ranks put together level by level,
innermost first, each level's kind (parallel/kinds.py) merging its groups of neighbouring units (tensor-
parallel shards, expert- and data-parallel shares of the batch, pipeline stages chained with their layers
numbered as the model's); and its module tree (construct.json), put together the same way."""

from __future__ import annotations

import os

from verl_pdbg_conf.compare.dumpread import check_items
from verl_pdbg_conf.compare.parallel.kinds import KINDS, PIPELINE, Unit
from verl_pdbg_conf.compare.parallel.replica import Replica
from verl_pdbg_conf.compare.records import Reader
from verl_pdbg_conf.compare.pipeline.stacks import Stacks
from verl_pdbg_conf.compare.pipeline.trees import Tree


def stacks_of(path: str, level: str):
    """The dump's call stacks (L1, mix), or None where there are none or they cannot be read whole."""
    stack = os.path.join(os.path.dirname(path), "stack.json")
    return Stacks(stack) if level in ("L1", "mix") and os.path.isfile(stack) and not check_items(stack) else None


class PairSide:
    """`replica`: the dumps its model is put together from, and how (empty: `path` alone)."""

    def __init__(self, path: str, replica: Replica, level: str, stacks, construct: bool = True, stream=None):
        self.path, self.level = path, level
        self.construct = construct  # construct.json used (not where one of the pair's cannot be read)
        self.unread: list = []  # (dump.json, record, [why]) of every record of its ranks that cannot be read
        # the first rank's: says whether the dump holds records
        self.reader = Reader(path, level, stacks, construct, self.unread, stream)
        self.replica = replica
        self.group = tuple(replica.group) or (path,)
        self.levels = [lv for lv in replica.levels if lv.size > 1] if len(self.group) > 1 else []
        self.merges: list = []  # (kind, its merge of one group), as records() builds them
        self._top: Unit | None = None

    @property
    def merged(self) -> bool:
        return bool(self.levels)

    @property
    def batch(self) -> int:
        """How many shares of the batch its ranks ran, put together (data and expert parallelism)."""
        n = 1
        for lv in self.levels:
            if KINDS[lv.kind].batch:
                n *= lv.size
        return n

    def _leaf(self, i: int, path: str) -> Unit:
        if i == 0:
            reader = self.reader
        else:  # each pipeline stage's first rank reads its own call stacks
            per_stage = len(self.group) // self.replica.size(PIPELINE.name)
            stacks = stacks_of(path, self.level) if i % per_stage == 0 else None
            reader = Reader(path, self.level, stacks, self.construct, self.unread)
        return Unit(iter(reader), lambda: Tree.read(path) if self.construct else None, path)

    def _build(self) -> Unit:
        if self._top is None:
            units = [self._leaf(i, p) for i, p in enumerate(self.group)]
            for lv in self.levels:
                kind = KINDS[lv.kind]
                units = [kind.merge(self, units[i:i + lv.size], lv) for i in range(0, len(units), lv.size)]
            self._top = units[0]
        return self._top

    def records(self):
        return self._build().stream

    def tree(self):
        return self._build().tree() if self.construct else None

    def notes(self, name: str) -> list[str]:
        out = []
        for lv in self.levels:
            kind = KINDS[lv.kind]
            merges = [m for k, m in self.merges if k is kind]
            if merges:
                out.append(kind.note(name, merges, lv.size))
        return out
