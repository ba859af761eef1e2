"""The rollout engines the compare knows, keyed by the name tokens.json's `engine` holds (the runtime writes
it beside each engine step's dump): each engine's table of module facts (its fused and packed modules, its
MoE calls and routing, read off the installed engine by its extractor and stored beside this module as
data) and the reader that loads that table. The token walk, pairing and verdict are the same for every
engine: a second one (SGLang) is one row here, its table file and its reader (docs/compare-rollout.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from verl_pdbg_conf.compare.rollout import table as T

HERE = os.path.dirname(os.path.abspath(__file__))
UNNAMED = "vllm"  # a token record written before it named its engine: this package's runtime wrote vLLM's only


@dataclass(frozen=True)
class Engine:
    name: str
    table: str  # its facts, a file beside this module
    reader: Callable[[str], dict]  # the table file -> the facts table.py reads (classes, packed, moe, routing)
    extractor: str  # the module that writes the table from the installed engine

    @property
    def facts(self) -> dict:
        return self.reader(os.path.join(HERE, self.table))


ENGINES: dict[str, Engine] = {
    "vllm": Engine("vllm", "vllm-0.32.0.json", T.facts, "verl_pdbg_conf.compare.rollout.extract"),
}


class UnknownEngine(ValueError):
    """tokens.json names an engine with no row in ENGINES."""


def engine_named(name: str | None) -> Engine:
    """The engine a token record names (UNNAMED's where it names none); UnknownEngine says which are known."""
    engine = ENGINES.get(name or UNNAMED)
    if engine is None:
        raise UnknownEngine(f"the rollout engine {name!r} has no table here (known: {', '.join(ENGINES)})")
    return engine
