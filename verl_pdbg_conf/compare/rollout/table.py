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
  compared where its result is used, at the next point's input (the down projection's, o_proj's).
- Mixture of experts: the router's linear (GateLinear) pairs with the trainer's router by path (its
  logits, output 0). The fused experts (MoERunner) compare their hidden_states with the trainer experts'
  input, and their output with the trainer experts' output; where the model hands the fused experts its
  shared experts (the `moe` table, read off its FusedMoE call), their output holds the shared expert's
  gated output too, and pairs with the trainer's whole MoE block output instead."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

from verl_pdbg_conf.compare.records import Record

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm-0.32.0.json")


@lru_cache(maxsize=None)
def facts(path: str = _DATA) -> dict:
    """An engine's table as extract.py writes it (JSON): engines.py's reader for vLLM; vLLM's by default."""
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
    role: str = ""  # "router": a router's logits; "experts": a fused experts' output


# Each function below reads one engine's facts (engines.Engine.facts; vLLM's where none is given).

def is_logits(cls: str, table: dict | None = None) -> bool:
    """An engine class whose output is the logits: the trainer's counterpart is its lm_head."""
    return bool(class_role(cls, table).get("counterpart"))


def class_role(cls: str, table: dict | None = None) -> dict:
    return (table or facts())["classes"].get(cls, {})


def packed_for(architectures: list[str], table: dict | None = None) -> dict[str, list[str]]:
    return _for(architectures, "packed", table)


def moe_for(architectures: list[str], table: dict | None = None) -> dict:
    """The architecture's FusedMoE call, as extract.py read it ({} for a dense model)."""
    return _for(architectures, "moe", table)


def _for(architectures: list[str], kind: str, table: dict | None) -> dict:
    rows = (table or facts()).get(kind) or {}
    for arch in architectures or ():
        if arch in rows:
            return rows[arch]
    return {}


def points(engine: list[Record], trainer: dict[str, list[Record]], packed: dict[str, list[str]],
           moe: dict | None = None, table: dict | None = None) -> tuple[list[Point], list[str]]:
    """The comparison points of one engine step (every record, parents too, in execution order), and the
    engine modules that should have a counterpart but have none in the trainer's dump. Parents are left
    out but for the fused experts (vLLM's holds the shared experts' wrapper)."""
    classes = (table or facts())["classes"]
    out: list[Point] = []
    unpaired: list[str] = []
    parents = {".".join(r.module.split(".")[:i]) for r in engine for i in range(1, r.module.count(".") + 1)}
    for rec in engine:
        role = classes.get(rec.base, {})
        if role.get("fused") or (rec.module in parents and not role.get("experts")):
            continue  # compared where its result is used; a parent is not compared (its parts are)
        head, _, leaf = rec.module.rpartition(".")
        if role.get("experts"):
            shared = ((moe or {}).get("shared_experts") or {}).get("self")
            mate = head if shared and any(r.module.startswith(_join(head, shared) + ".") for r in engine) \
                else rec.module
            if rec.module not in trainer or mate not in trainer:
                unpaired.append(rec.module)
                continue
            out.append(Point(rec.module, "input", Part(rec, "input", 0), (Mate(rec.module, "input", 0),)))
            out.append(Point(rec.module, "output", Part(rec, "output", 0), (Mate(mate, "output", 0),), role="experts"))
            continue
        if role.get("counterpart"):
            mate = _join(head, role["counterpart"])
            if mate not in trainer:
                unpaired.append(rec.module)
                continue
            out.append(Point(rec.module, "output", Part(rec, "output", 0), (Mate(mate, "output", 0),),
                             rows=role.get("rows", "tokens")))
            continue
        parts = [_join(head, p) for p in packed.get(leaf, ())] or [rec.module]
        if any(p not in trainer for p in parts):
            unpaired.append(rec.module)
            continue
        residual = role.get("residual_output") if len(rec.inputs) > 1 else None
        if residual:
            for mine, theirs in sorted(residual.items(), key=lambda kv: not kv[1].startswith("input")):
                io, _, i = theirs.partition(".")
                out.append(Point(rec.module, "output" if mine == "output.0" else "residual",
                                 Part(rec, "output", int(mine.partition(".")[2])), (Mate(parts[0], io, int(i)),)))
            continue
        if len(rec.inputs) == 1:
            out.append(Point(rec.module, "input", Part(rec, "input", 0), (Mate(parts[0], "input", 0),)))
        out.append(Point(rec.module, "output", Part(rec, "output", 0), tuple(Mate(p, "output", 0) for p in parts),
                         role="router" if role.get("router") else ""))
    return out, unpaired


def _join(head: str, leaf: str) -> str:
    return f"{head}.{leaf}" if head else leaf
