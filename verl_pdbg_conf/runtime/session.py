"""Process-wide msprobe state: the one PrecisionDebugger, the open session, and where it writes.

msprobe's PrecisionDebugger is a process singleton (a second construction returns the first object
and ignores its arguments) and its runtime status is global, so every profiler instance in a
process (verl builds several: the outer worker's, its inner TrainingWorkers', a colocated
critic's) goes through the one state kept here. Only this module imports msprobe, and only
when a stage is actually collected."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("verl_pdbg_conf.runtime")

_LOCK = threading.RLock()
_WARNED: set = set()


def warn_once(key: Any, message: str) -> None:
    """One warning per cause for the life of the process, however many calls or profilers hit it."""
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    log.warning("precision_debugger: %s", message)


def forget_warnings() -> None:
    """Let every cause warn again (tests run several scenarios in one process)."""
    with _LOCK:
        _WARNED.clear()


class SingletonConflict(RuntimeError):
    """The process's PrecisionDebugger was created with another config.json than this profiler's."""


@dataclass
class Session:
    stage: str
    dump_dir: str
    profiler_id: int
    continue_key: Any  # set for a stage collected across consecutive calls (see open_session)


@dataclass
class _State:
    debugger: Any = None
    config_path: str | None = None
    active: Session | None = None
    pending: Session | None = None  # stopped, not yet reset: the next call may append to it


_state = _State()


def _realpath(path: str | None) -> str | None:
    return os.path.realpath(path) if path else None


def debugger(config_path: str, dump_path: str):
    """The process's PrecisionDebugger, created on first use with this config.json.

    Created lazily: construction wraps torch's APIs for the life of the process, which a worker
    that never reaches a profiled step should not pay for."""
    if _state.debugger is None:
        from msprobe.pytorch import PrecisionDebugger

        earlier = getattr(PrecisionDebugger, "_instance", None)
        dbg = PrecisionDebugger(config_path=config_path, dump_path=dump_path)
        overrides = getattr(dbg, "_overrides", None) or {}
        # A debugger the user made before us keeps its own config; remember which one that is.
        used = overrides.get("config_path") if earlier is not None else config_path
        _state.debugger, _state.config_path = dbg, _realpath(used)
    if _state.config_path != _realpath(config_path):
        raise SingletonConflict(
            f"msprobe's PrecisionDebugger is a process singleton and was already created with config "
            f"{_state.config_path}; this profiler's config_path {config_path} cannot take effect in this process")
    return _state.debugger


def rank_dir_name() -> str:
    """The directory msprobe writes this process's dump to: rank{R}, or proc{pid} without a group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return f"rank{dist.get_rank()}"
    return f"proc{os.getpid()}"


def _holds_dump(stage_dir: str, rank_dir: str) -> bool:
    try:
        entries = list(os.scandir(stage_dir))
    except OSError:
        return False
    return any(e.name.startswith("step") and os.path.isdir(os.path.join(e.path, rank_dir)) for e in entries)


def fresh_dir(base: str) -> str:
    """`base`, or the first `base.N` that holds no dump of this rank yet.

    msprobe overwrites `step0/rank{R}/dump.json` (and tensor files) in place; a dump from an
    earlier run, or from an earlier session of the same stage and step in this run, is kept and
    the new session writes beside it. Only this rank's directory counts, so ranks writing into
    the same stage directory at the same time do not push each other aside."""
    rank_dir = rank_dir_name()
    path, n = base, 0
    while _holds_dump(path, rank_dir):
        n += 1
        path = f"{base}.{n}"
    if n:
        log.warning("precision_debugger: %s already holds a dump of %s; this session writes to %s instead",
                    base, rank_dir, path)
    return path


def _reset(dbg) -> None:
    """Clear msprobe's writer cache, hook state and counters so the next dump.json starts empty."""
    service = getattr(dbg, "service", None)
    reset = getattr(service, "reset_status", None) or getattr(service, "_reset_status", None)
    if callable(reset):
        reset()


def _abort(dbg) -> None:
    """After msprobe raised: make sure it is not left collecting, and drop what it cached."""
    service = getattr(dbg, "service", None)
    for name in ("_disable_dump_runtime", "reset_status"):
        try:
            getattr(service, name)()
        except Exception:  # best effort: msprobe is already in trouble
            pass


def open_session(stage: str, base_dir: str, model: Any, config_path: str, profiler_id: int,
                 continue_key: Any = None) -> Session | None:
    """Start msprobe for one stage, writing under `base_dir` (or a fresh sibling of it).

    `continue_key` marks a stage that verl runs as several consecutive calls (the critic's update is
    one `train_batch` call per mini-batch): while the key stays the same, later calls append to
    the same session's dump (stop without reset) instead of each taking a new directory.
    Returns None when another stage's session is already open: the nested call is part of it."""
    with _LOCK:
        if _state.active is not None:
            warn_once(("nested", stage, _state.active.stage),
                      f"stage {stage!r} ran inside stage {_state.active.stage!r}; it is collected as part of "
                      f"{_state.active.stage!r}'s dump")
            return None
        dbg = debugger(config_path, base_dir)
        pending, _state.pending = _state.pending, None
        if pending is not None and continue_key is not None and pending.continue_key == continue_key:
            dump_dir = pending.dump_dir
        else:
            if pending is not None:
                _reset(dbg)
            dump_dir = fresh_dir(base_dir)
        dbg.service.config.dump_path = dump_dir
        try:
            dbg.start(model)
        except BaseException:
            _abort(dbg)
            raise
        _state.active = Session(stage, dump_dir, profiler_id, continue_key)
        return _state.active


def close_session(session: Session, *, failed: bool = False) -> None:
    """Stop msprobe (which writes dump.json) and reset its status, unless the stage continues."""
    with _LOCK:
        if _state.active is not session:
            return
        _state.active = None
        dbg = _state.debugger
        try:
            dbg.stop()
        except BaseException:
            _abort(dbg)
            raise
        if session.continue_key is not None and not failed:
            _state.pending = session
        else:
            _reset(dbg)


def end_continuation(profiler_id: int) -> None:
    """Close the stage this profiler kept open across calls: its step has ended or changed."""
    with _LOCK:
        pending = _state.pending
        if pending is None or pending.profiler_id != profiler_id:
            return
        _state.pending = None
        try:
            _reset(_state.debugger)
        except Exception as e:
            warn_once(("reset", type(e).__name__), f"msprobe reset_status failed: {e!r}")
