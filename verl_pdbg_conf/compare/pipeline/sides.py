"""One side of a pair as one model's records: a rank's dump; or a Megatron replica's ranks, each
tensor-parallel group's shards combined (shards.py) and the pipeline stages chained with their layers
numbered as the model's (stages.py); and its module tree (construct.json), put together the same way."""

from __future__ import annotations

import os

from verl_pdbg_conf.compare.dumpread import check_items
from verl_pdbg_conf.compare.megatron.table import LOCAL_EXPERT_NUMBER, local_expert
from verl_pdbg_conf.compare.nodes import module_path
from verl_pdbg_conf.compare.records import Reader
from verl_pdbg_conf.compare.pipeline.shards import ExpertMerge, ShardMerge
from verl_pdbg_conf.compare.pipeline.stacks import Stacks
from verl_pdbg_conf.compare.pipeline import stages as S
from verl_pdbg_conf.compare.pipeline.trees import Tree


def stacks_of(path: str, level: str):
    """The dump's call stacks (L1, mix), or None where there are none or they cannot be read whole."""
    stack = os.path.join(os.path.dirname(path), "stack.json")
    return Stacks(stack) if level in ("L1", "mix") and os.path.isfile(stack) and not check_items(stack) else None


def _is_expert(r) -> bool:
    """A record of one expert's module (or of a call inside one)."""
    return local_expert(r.module if r.module is not None else module_path(r.scope) if r.scope else None) is not None


class PairSide:
    """`group`: the replica's dump.json paths, stage by stage, `tp` of them per stage (empty: `path` alone)."""

    def __init__(self, path: str, group: tuple, tp: int, level: str, stacks, construct: bool = True, stream=None,
                 experts: int = 0):
        self.path, self.level = path, level
        self.construct = construct  # construct.json used (not where one of the pair's cannot be read)
        self.unread: list = []  # (dump.json, record, [why]) of every record of its ranks that cannot be read
        # the first rank's: says whether the dump holds records
        self.reader = Reader(path, level, stacks, construct, self.unread, stream)
        group = tuple(group) or (path,)
        tp = max(1, tp or len(group))
        self.stages = [group[i:i + tp] for i in range(0, len(group), tp)]
        self.merges: list[ShardMerge] = []
        self.offsets: list[int] | None = None
        self.failed = ""  # why the stages could not be put together
        self._trees = None
        # an expert-parallel group (one stage): rank r's local expert j renamed global r x experts + j
        self.expert_relayers = [S.Relayer(i * experts, LOCAL_EXPERT_NUMBER) for i in range(len(group))] \
            if experts and len(self.stages) == 1 and len(group) > 1 else None
        if len(self.stages) > 1:
            pattern = S.layer_pattern()
            trees = [Tree.read(st[0]) for st in self.stages]
            self.offsets = S.offsets(trees, pattern) if pattern else None
            if self.offsets is None:
                self.failed = "a stage's module tree (construct.json) cannot be read: its layers cannot be numbered"
            else:
                self.relayers = [S.Relayer(o, pattern) for o in self.offsets]
                self._trees = trees

    @property
    def merged(self) -> bool:
        return bool(self.merges) or self.offsets is not None

    def records(self):
        streams = []
        for n, ranks in enumerate(self.stages):
            if n and self.offsets is None:
                break  # stages that cannot be numbered are not put together: the first one only
            first = self.reader if n == 0 else Reader(ranks[0], self.level, stacks_of(ranks[0], self.level),
                                                      self.construct, self.unread)
            if len(ranks) > 1 and self.expert_relayers:
                merge = ExpertMerge(self.expert_relayers, _is_expert)
                self.merges.append(merge)
                streams.append(merge([iter(first), *(iter(Reader(p, self.level, None, self.construct, self.unread))
                                                     for p in ranks[1:])]))
            elif len(ranks) > 1:
                merge = ShardMerge(scoped=self.level in ("mix", "L0"))
                self.merges.append(merge)
                streams.append(merge([iter(first), *(iter(Reader(p, self.level, None, self.construct, self.unread))
                                                     for p in ranks[1:])]))
            else:
                streams.append(iter(first))
        if len(streams) == 1:
            return streams[0]
        return S.chain(streams, self.relayers, S.spanning(self._trees, self.relayers))

    def tree(self):
        if not self.construct:
            return None
        if self._trees is not None:
            return S.merged_tree(self._trees, self.relayers)
        if self.expert_relayers:
            trees = [Tree.read(p) for p in self.stages[0]]
            return None if None in trees else S.merged_tree(trees, self.expert_relayers)
        return Tree.read(self.path)

    def notes(self, name: str) -> list[str]:
        out = []
        tp = len(self.stages[0])
        if self.merges and self.expert_relayers:
            said = (f"{name}: each expert-parallel group of {tp} ranks combined (each rank's experts under their "
                    "global index, the batch's shares concatenated, tensors held alike once)")
            partial = sum(m.partial for m in self.merges)
            if partial:
                said += (f"; {partial} calls' partial results and the gradients of parameters outside the experts "
                         "(each rank's partial sum) left out")
            failed = next((m.failed for m in self.merges if m.failed), "")
            if failed:
                said += f"; stopped combining where {failed}: past it, one rank's records only"
            out.append(said)
        elif self.merges:
            said = (f"{name}: each tensor-parallel group of {tp} ranks combined (replicated tensors once, shards "
                    "concatenated)")
            partial = sum(m.partial for m in self.merges)
            if partial:
                said += f"; {partial} calls' partial results left out, compared at their modules' boundaries"
            failed = next((m.failed for m in self.merges if m.failed), "")
            if failed:
                said += f"; stopped combining where {failed}: past it, one rank's shards only"
            out.append(said)
        if len(self.stages) > 1:
            if self.offsets is None:
                out.append(f"{name}: {len(self.stages)} pipeline stages not put together ({self.failed}): "
                           "the first stage only")
            else:
                out.append(f"{name}: {len(self.stages)} pipeline stages put together as one model, their layers "
                           f"numbered from {', '.join(map(str, self.offsets))}; forwards in stage order, "
                           "backwards in reverse")
        return out
