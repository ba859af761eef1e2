"""What a stage call runs on: the model to bind msprobe to, and the global step to tag the dump with.

Pure attribute look-ups on the worker and the call's arguments; nothing here imports torch or verl,
so the non-profiled path and the tests that need no msprobe stay cheap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Worker attributes that hold the trainer's global step (legacy workers and custom loops).
_STEP_ATTRS = ("global_steps", "global_step", "_global_step")


def attr_path(obj: Any, path: str) -> Any:
    """`obj.a.b.c` for "a.b.c", or None where a link is missing."""
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_module(obj: Any) -> bool:
    return obj is not None and callable(getattr(obj, "forward", None))


def resolve_model(owner: Any, candidates: tuple[str, ...]) -> tuple[Any, str | None]:
    """The stage's model and the attribute path it came from, or (None, None).

    Megatron keeps its virtual-pipeline chunks as a list in `engine.module`; msprobe 26.x hooks a
    list of modules itself, so every chunk is bound (verl 0.9.1 binds only the first)."""
    if owner is None:
        return None, None
    for path in candidates:
        value = attr_path(owner, path)
        if _is_module(value):
            return value, path
        if isinstance(value, (list, tuple)):
            chunks = [m for m in value if _is_module(m)]
            if chunks:
                return (chunks[0] if len(chunks) == 1 else chunks), path
    return None, None


def as_step(value: Any) -> int | None:
    """An int global step from what verl carries it as (int, numpy/torch scalar, NonTensorData)."""
    value = getattr(value, "data", value) if type(value).__name__ == "NonTensorData" else value
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return None


def step_from_call(args: tuple, kwargs: dict) -> int | None:
    """`global_steps` carried by the stage's batch: DataProto `meta_info`, or a dict / TensorDict key.

    It is the freshest source: it names the step the batch belongs to even inside a continuous
    profiling window, where the trainer sends no new `start_profile`."""
    for value in (*args, *kwargs.values()):
        meta = getattr(value, "meta_info", None)
        if isinstance(meta, Mapping) and "global_steps" in meta:
            return as_step(meta["global_steps"])
        if isinstance(value, Mapping) and "global_steps" in value.keys():
            return as_step(value["global_steps"])
    return None


def step_from_owner(owner: Any) -> int | None:
    for name in _STEP_ATTRS:
        step = as_step(getattr(owner, name, None))
        if step is not None:
            return step
    return None


def declared_model_type(owner: Any) -> str | None:
    """`config.model_type` of verl's TrainingWorker ("value_model" for the critic), if declared."""
    value = attr_path(owner, "config.model_type")
    return value if isinstance(value, str) else None
