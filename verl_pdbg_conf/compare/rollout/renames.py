"""The names transformers gives a checkpoint's modules at load, from its own conversion mapping (read off the
installed package by extract_renames.py, stored as transformers-<version>.json). vLLM names its modules as
the checkpoint does (its weight loader depends on it); transformers 5 renames some families' at load (Mixtral's
and PhiMoE's `block_sparse_moe` become `mlp`, PhiMoE's `gate` its `router`). An engine module is then paired
under the name transformers gives it, where the trainer's dump has that name and not the engine's own (a
trainer on transformers 4 keeps the checkpoint's names)."""

from __future__ import annotations

import functools
import os
import re

from verl_pdbg_conf.compare.facts import newest
from verl_pdbg_conf.compare.verdict import finding
from verl_pdbg_conf.core.findings import Finding, Severity

HERE = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """The newest extracted table ({} where none is installed)."""
    return newest(HERE, "transformers")


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def _apply(rule: dict, key: str) -> tuple[str, bool]:
    """One transform on a key, as transformers' WeightTransform.rename_source_key does it."""
    rx = _compiled(rule["pattern"])
    m = rx.search(key)
    if m is None:
        return key, False
    group = next(name for name, value in m.groupdict().items() if value is not None)
    replacement = rule["target"]
    if r"\1" in replacement:
        replacement = replacement.replace(r"\1", m.group(rx.groupindex[group] + 1) or "")
    return key.replace(m.group(0), replacement, 1), True


def rename_key(key: str, rules: list[dict]) -> str:
    """A checkpoint key as transformers loads it: every renaming in turn, then the first converter that matches."""
    for rule in rules:
        if rule["kind"] == "rename":
            key, _ = _apply(rule, key)
    for rule in rules:
        if rule["kind"] == "convert":
            key, hit = _apply(rule, key)
            if hit:
                break
    return key


def rules_for(model_type: str) -> list[dict]:
    doc = table()
    rules = doc.get("rules") or []
    return [rules[i] for i in (doc.get("models") or {}).get(model_type, ())]


def module_name(path: str, rules: list[dict]) -> str:
    """A checkpoint module's path as transformers names it: the module of its weight's renamed key."""
    return rename_key(f"{path}.weight", rules).rpartition(".")[0] if rules else path


def to_trainer_names(engine_dumps, trainer_paths: set, model_type: str) -> dict[str, str]:
    """Rename the engine's module records (rollout/dumps.Dump) where transformers renames their checkpoint name
    at load and the trainer's dump holds that name, not the engine's own; returns engine path -> trainer path."""
    rules = rules_for(model_type) if isinstance(model_type, str) else []
    if not rules:
        return {}
    seen: dict[str, str] = {}  # engine path -> the path it is paired under (itself where not renamed)
    for d in engine_dumps:
        for r in d.every:
            new = seen.get(r.module)
            if new is None:
                new = module_name(r.module, rules)
                if r.module in trainer_paths or new not in trainer_paths:
                    new = r.module
                seen[r.module] = new
            r.module = new
    return {a: b for a, b in seen.items() if a != b}


def apply(engine_dumps, trainer_dumps, model_type, where: str) -> list[Finding]:
    """to_trainer_names for one pair (the model type the engine's token record states), said in one finding."""
    trainer = {p for d in trainer_dumps for p in d.by_module()}
    renamed = to_trainer_names(engine_dumps, trainer, model_type)
    if not renamed:
        return []
    return [finding("compare-modules", Severity.INFO, said(renamed, model_type), where)]


def said(renamed: dict[str, str], model_type: str) -> str:
    """The renaming in one line, once per kind of module."""
    kinds = sorted({(re.sub(r"\.\d+(?=\.|$)", ".*", a), re.sub(r"\.\d+(?=\.|$)", ".*", b)) for a, b in renamed.items()})
    shown = ", ".join(f"{a} as {b}" for a, b in kinds[:6]) + (f" and {len(kinds) - 6} more" if len(kinds) > 6 else "")
    return (f"engine modules paired under the names transformers {table().get('version', '?')} gives the "
            f"checkpoint's at load ({model_type}'s conversion mapping): {shown}")
