"""What travels with a pair's job to say how one side's model is put together from several ranks' dumps:
plain data (a worker process or a Ray task receives it), read by pipeline/sides.py through kinds.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Level:
    """`size` neighbouring streams merged into one by the parallelism kind `kind` (kinds.KINDS)."""
    kind: str
    size: int


@dataclass(frozen=True)
class Replica:
    """The dump.json files of one side's model in Megatron's rank order and its levels, innermost first
    (tensor-parallel ranks next to each other, pipeline stages outermost); empty: the side's dump alone.
    `lone`: the kind of a group this rank was left out of (its expert numbers are then not the model's)."""
    group: tuple = ()
    levels: tuple = ()
    lone: str = ""

    def size(self, kind: str) -> int:
        out = 1
        for level in self.levels:
            if level.kind == kind:
                out *= level.size
        return out
