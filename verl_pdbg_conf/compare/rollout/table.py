"""Where the engine's modules meet the trainer's, from the engine's own tables (extract.py, stored as
data): each comparison point is an engine tensor and the trainer tensors it equals, per token.

- A module both sides have under the same path compares input with input and output with output
  (vLLM names its modules as the checkpoint does: its weight loader depends on it).
- A packed module (`qkv_proj` <- `q_proj`, `k_proj`, `v_proj`) compares its output with its parts'
  outputs concatenated on the last axis, its input with theirs.
- An RMSNorm called with a residual: output 0 with the trainer norm's output, output 1 (x + residual)
  with the trainer norm's input.
- The logits processor's output with the trainer's lm_head output, at the sampled rows.
- A fused class (SiluAndMul, the rotary embedding, the attention kernel) has no trainer module: it is
  compared where its result is used, at the next point's input (the down projection's, o_proj's)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

from verl_pdbg_conf.compare.rollout.dumps import Record

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm-0.32.0.json")


@lru_cache(maxsize=None)
def facts(path: str = _DATA) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@dataclass(frozen=True)
class Part:
    record: Record
    io: str  # "input" or "output"
    index: int


@dataclass(frozen=True)
class Mate:
    """A trainer tensor by module path: the record is the one of the forward call a token ran in."""

    path: str
    io: str
    index: int


@dataclass(frozen=True)
class Point:
    """One engine tensor against the trainer tensor(s) that equal it for each token."""

    module: str  # the engine module's path
    io: str  # input, output, residual (a norm's x + residual)
    engine: Part
    trainer: tuple[Mate, ...]  # several: concatenated on the last axis
    rows: str = "tokens"  # "tokens": one row per scheduled token; "sampled": one per request sampled from


def is_logits(cls: str) -> bool:
    """An engine class whose output is the logits: the trainer's counterpart is its lm_head."""
    return bool(facts()["classes"].get(cls, {}).get("counterpart"))


def packed_for(architectures: list[str]) -> dict[str, list[str]]:
    packed = facts()["packed"]
    for arch in architectures or ():
        if arch in packed:
            return packed[arch]
    return {}


def points(engine: list[Record], trainer: dict[str, list[Record]], packed: dict[str, list[str]]) -> \
        tuple[list[Point], list[str]]:
    """The comparison points of one engine step, in the engine's execution order, and the engine modules
    that should have a counterpart but have none in the trainer's dump."""
    classes = facts()["classes"]
    out: list[Point] = []
    unpaired: list[str] = []
    for rec in engine:
        role = classes.get(rec.cls, {})
        if role.get("fused"):
            continue  # compared where its result is used
        head, _, leaf = rec.path.rpartition(".")
        if role.get("counterpart"):
            mate = _join(head, role["counterpart"])
            if mate not in trainer:
                unpaired.append(rec.path)
                continue
            out.append(Point(rec.path, "output", Part(rec, "output", 0), (Mate(mate, "output", 0),),
                             rows=role.get("rows", "tokens")))
            continue
        parts = [_join(head, p) for p in packed.get(leaf, ())] or [rec.path]
        if any(p not in trainer for p in parts):
            unpaired.append(rec.path)
            continue
        residual = role.get("residual_output") if len(rec.inputs) > 1 else None
        if residual:
            for mine, theirs in sorted(residual.items(), key=lambda kv: not kv[1].startswith("input")):
                io, _, i = theirs.partition(".")
                out.append(Point(rec.path, "output" if mine == "output.0" else "residual",
                                 Part(rec, "output", int(mine.partition(".")[2])), (Mate(parts[0], io, int(i)),)))
            continue
        if len(rec.inputs) == 1:
            out.append(Point(rec.path, "input", Part(rec, "input", 0), (Mate(parts[0], "input", 0),)))
        out.append(Point(rec.path, "output", Part(rec, "output", 0), tuple(Mate(p, "output", 0) for p in parts)))
    return out, unpaired


def _join(head: str, leaf: str) -> str:
    return f"{head}.{leaf}" if head else leaf
