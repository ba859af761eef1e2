"""Process-wide msprobe state: the one PrecisionDebugger, the open session, and where it writes.

msprobe's PrecisionDebugger is a process singleton (a second construction returns the first object
and ignores its arguments) and its runtime status is global, so every profiler instance in a
process (verl builds several: the outer worker's, its inner TrainingWorkers', a colocated
critic's) goes through the one state kept here. Only this module and compat.py import msprobe, and
only when a stage is actually collected."""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from verl_pdbg_conf.runtime import compat

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


class MsprobeError(Exception):
    """msprobe raised `cause` during `phase` of a stage's session: "start" (construction included),
    "reset" (before the session: msprobe still holds an earlier stage's records), "collect" (inside one
    of its hooks, while the stage ran), "stop" (writing the dump) or "cleanup" (reset after the dump)."""

    def __init__(self, phase: str, stage: str, dump_dir: str | None, cause: BaseException):
        super().__init__(f"{phase} of stage {stage!r}: {cause!r}")
        self.phase, self.stage, self.dump_dir, self.cause = phase, stage, dump_dir, cause


@dataclass
class Session:
    stage: str
    dump_dir: str
    profiler_id: int
    continue_key: Any  # set for a stage collected across consecutive calls (see open_session)
    error: BaseException | None = None  # the first exception msprobe raised inside a hook (see _guard)
    loop: int = 0  # msprobe's step counter before a stage of several steps (open_steps)
    tokens: Any = None  # the token record kept for the session (rollout.ForwardTokens)


@dataclass
class _State:
    debugger: Any = None
    config_path: str | None = None
    active: Session | None = None
    pending: Session | None = None  # stopped, not yet reset: the next call may append to it
    dirty: bool = False  # a reset_status failed: msprobe may still hold an earlier session's records


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
        try:
            dbg = PrecisionDebugger(config_path=config_path, dump_path=dump_path)
        except BaseException:
            # msprobe marks its singleton initialized before it builds it: a constructor that raised
            # leaves a half-built instance (no service) that every later construction returns as is.
            # Drop it so that the next stage builds the debugger again instead of failing for good.
            half = getattr(PrecisionDebugger, "_instance", None)
            if half is not None and half is not earlier and getattr(half, "service", None) is None:
                PrecisionDebugger._instance = earlier
            raise
        if getattr(dbg, "service", None) is None:
            raise RuntimeError("msprobe's PrecisionDebugger in this process was left half-constructed by an "
                               "earlier failure (it has no service); it cannot dump")
        compat.note_missing(dbg.service)
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


def _claim(target: str) -> bool:
    """Create `target` (a rank dir) atomically: False if it exists already (another process of this
    rank took it first), True once this process made it. A parent that cannot be made (a file in
    the way, no permission, a full disk) raises."""
    for _ in range(20):
        try:
            # makedirs makes each parent then the next: another rank's release() may remove one it
            # has just made before the child is in it
            os.makedirs(os.path.dirname(target), exist_ok=True)
        except FileNotFoundError:
            continue
        try:
            os.mkdir(target)
            return True
        except FileExistsError:
            return False
        except FileNotFoundError:
            continue  # a parent was removed under us (release() of an empty claim): try again
    raise OSError(f"cannot create {target}: its parent directory keeps disappearing")


def fresh_dir(base: str, iter_dir: str = "step0") -> str:
    """`base`, or the first `base.N` that holds no dump of this rank yet, claimed for this process.

    msprobe overwrites `step0/rank{R}/dump.json` (and tensor files) in place; a dump from an
    earlier run, or from an earlier session of the same stage and step in this run, is kept and
    the new session writes beside it. Only this rank's directory counts, so ranks writing into
    the same stage directory at the same time do not push each other aside. The choice is made by
    creating `{iter_dir}/rank{R}` (msprobe's rank dir) with mkdir, which succeeds for one process
    only: two processes of the same rank writing one save_path at once (two jobs, or a rerun while
    the first run still writes) never pick the same directory."""
    rank_dir = rank_dir_name()
    path, n = base, 0
    while _holds_dump(path, rank_dir) or not _claim(os.path.join(path, iter_dir, rank_dir)):
        n += 1
        path = f"{base}.{n}"
    if n:
        log.warning("precision_debugger: %s already holds a dump of %s; this session writes to %s instead",
                    base, rank_dir, path)
    return path


def release(dump_dir: str) -> None:
    """Remove the directories fresh_dir made for a session in which msprobe wrote nothing (a rank or
    step msprobe's own filter skips, a start that failed). rmdir removes empty directories only:
    nothing written by anyone is ever deleted. Stops at the `step_{N}` dir, never above."""
    try:
        rank_dir = rank_dir_name()
        candidates = [os.path.join(dump_dir, e.name, rank_dir) for e in os.scandir(dump_dir)
                      if e.name.startswith("step")]
    except OSError:
        return
    for path in candidates:
        for _ in range(4):  # rank dir, step{K}, the stage dir, step_{N}
            try:
                os.rmdir(path)
            except OSError:
                break
            path = os.path.dirname(path)


def _iter_dir(dbg) -> str:
    """The `step{K}` dir msprobe's next start() writes into: its own step counter (0 unless the
    caller steps it)."""
    service = getattr(dbg, "service", None)
    try:
        return f"step{int(getattr(service, 'loop', 0)) + int(getattr(service, 'init_step', 0))}"
    except (TypeError, ValueError):
        return "step0"


def _reset(dbg) -> None:
    """Clear msprobe's writer cache, hook state and counters so the next dump.json starts empty."""
    service = getattr(dbg, "service", None)
    reset = getattr(service, "reset_status", None) or getattr(service, "_reset_status", None)
    if callable(reset):
        reset()


def _abort(dbg) -> None:
    """After msprobe raised: make sure it is not left collecting, and drop what it cached."""
    try:
        compat.disable_dump(dbg.service)
    except Exception:  # best effort: msprobe is already in trouble
        pass
    try:
        _reset(dbg)
    except Exception:
        _state.dirty = True  # retried before the next session


# DataCollector methods msprobe's hooks call while a stage runs. Each returns None; an exception from
# one (a tensor file that cannot be written on a full disk, a bug in an analysis) would otherwise
# propagate out of the hook into the model's forward or backward, i.e. into training.
_COLLECT_METHODS = (
    "forward_input_data_collect", "forward_output_data_collect", "forward_data_collect",
    "forward_data_collect_only_tensor", "backward_data_collect", "backward_data_collect_only_tensor",
    "backward_input_data_collect", "backward_output_data_collect", "params_data_collect",
    "debug_data_collect_forward", "debug_data_collect_backward",
)
_GUARDED = "__verl_pdbg_conf_guarded__"


def _collect_failed(error: BaseException) -> None:
    """A hook's collection raised: keep the first error for the session, and stop collecting for the
    rest of it (the stage itself runs on, unhooked)."""
    session = _state.active
    if session is None:
        warn_once(("collect-outside", type(error).__name__),
                  f"msprobe raised inside a hook outside any profiled stage ({error!r}); ignored")
        return
    if session.error is None:
        session.error = error
    try:
        compat.disable_dump(_state.debugger.service)
    except Exception:
        pass


def _guarded(method):
    @functools.wraps(method)
    def collect(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Exception as e:
            _collect_failed(e)
            return None

    return collect


def _guard(dbg) -> None:
    """Wrap the collection methods of msprobe's current DataCollector (it builds a new one when it
    reloads its config, so this runs before every session)."""
    collector = getattr(getattr(dbg, "service", None), "data_collector", None)
    if collector is None or getattr(collector, _GUARDED, False):
        return
    for name in _COLLECT_METHODS:
        method = getattr(collector, name, None)
        if callable(method):
            setattr(collector, name, _guarded(method))
    setattr(collector, _GUARDED, True)


def _take_dir(stage: str, base_dir: str, config_path: str, continue_key: Any, iter_dir: str | None,
           nested: str) -> tuple[Any, str] | None:
    """The debugger and the directory a new session writes to (a continued stage's own, or a fresh one
    claimed for this process); None when another stage's session is open (`nested` says what happens)."""
    if _state.active is not None:
        warn_once(("nested", stage, _state.active.stage),
                  f"stage {stage!r} ran inside stage {_state.active.stage!r}; {nested}")
        return None
    try:
        dbg = debugger(config_path, base_dir)
    except SingletonConflict:
        raise
    except Exception as e:
        raise MsprobeError("start", stage, None, e) from e
    pending, _state.pending = _state.pending, None
    if pending is not None and continue_key is not None and pending.continue_key == continue_key:
        return dbg, pending.dump_dir
    if pending is not None:
        _state.dirty = True  # the continued stage has ended: its records go
        release(pending.dump_dir)
    if _state.dirty:
        # Never start on records an earlier session left: they would land in this dump.
        try:
            _reset(dbg)
        except Exception as e:
            raise MsprobeError("reset", stage, None, e) from e
        _state.dirty = False
    try:
        return dbg, fresh_dir(base_dir, iter_dir or _iter_dir(dbg))
    except OSError as e:
        raise MsprobeError("start", stage, None, e) from e


def open_session(stage: str, base_dir: str, model: Any, config_path: str, profiler_id: int,
                 continue_key: Any = None) -> Session | None:
    """Start msprobe for one stage, writing under `base_dir` (or a fresh sibling of it).

    `continue_key` marks a stage that verl runs as several consecutive calls (the critic's update is
    one `train_batch` call per mini-batch): while the key stays the same, later calls append to
    the same session's dump (stop without reset) instead of each taking a new directory.
    Returns None when another stage's session is already open: the nested call is part of it.
    Raises MsprobeError (phase start or reset) when msprobe cannot start; nothing is left running."""
    with _LOCK:
        claimed = _take_dir(stage, base_dir, config_path, continue_key, None,
                         f"it is collected as part of {_state.active.stage!r}'s dump" if _state.active else "")
        if claimed is None:
            return None
        dbg, dump_dir = claimed
        session = Session(stage, dump_dir, profiler_id, continue_key)
        try:
            _guard(dbg)
            dbg.service.config.dump_path = dump_dir
            dbg.start(model)
        except BaseException as e:
            _abort(dbg)
            release(dump_dir)
            if not isinstance(e, Exception):
                raise
            raise MsprobeError("start", stage, dump_dir, e) from e
        _state.active = session
        return session


def close_session(session: Session, *, failed: bool = False) -> None:
    """Stop msprobe (which writes dump.json) and reset its status, unless the stage continues.
    Raises MsprobeError for the first thing that went wrong in the session: collect (a hook raised;
    the stage ran on without msprobe), stop, or cleanup (the dump is written but msprobe could not
    be reset: it is reset again before the next session)."""
    with _LOCK:
        if _state.active is not session:
            return
        _state.active = None
        dbg = _state.debugger
        problem = None
        try:
            dbg.stop()
        except BaseException as e:
            _abort(dbg)
            if not isinstance(e, Exception):
                raise
            problem = MsprobeError("stop", session.stage, session.dump_dir, e)
        else:
            if session.continue_key is not None and not failed and session.error is None:
                _state.pending = session
            else:
                try:
                    _reset(dbg)
                except Exception as e:
                    _state.dirty = True
                    problem = MsprobeError("cleanup", session.stage, session.dump_dir, e)
        if _state.pending is not session:
            release(session.dump_dir)
        if session.error is not None:
            problem = MsprobeError("collect", session.stage, session.dump_dir, session.error)
        if problem is not None:
            raise problem from problem.cause


def end_continuation(profiler_id: int) -> None:
    """Close the stage this profiler kept open across calls: its step has ended or changed."""
    with _LOCK:
        pending = _state.pending
        if pending is None or pending.profiler_id != profiler_id:
            return
        _state.pending = None
        release(pending.dump_dir)
        try:
            _reset(_state.debugger)
        except Exception as e:
            _state.dirty = True
            warn_once(("reset", type(e).__name__), f"msprobe reset_status failed: {e!r}; retried before the "
                                                   f"next stage")


# ---- a stage that is several msprobe steps: the rollout's engine steps (rollout.py) ----------------

def open_steps(stage: str, base_dir: str, config_path: str, profiler_id: int) -> Session | None:
    """Claim `base_dir` (or a fresh sibling) for a stage whose calls are msprobe steps step0, step1, ...
    (one per engine step); nothing is collected until step_start. None when another stage is open."""
    with _LOCK:
        claimed = _take_dir(stage, base_dir, config_path, None, "step0", "it is not collected")
        if claimed is None:
            return None
        dbg, dump_dir = claimed
        session = Session(stage, dump_dir, profiler_id, None, loop=getattr(dbg.service, "loop", 0))
        _state.active = session
        return session


def step_start(session: Session, k: int, model: Any) -> str:
    """Start msprobe for msprobe step `k` of the stage; returns the rank directory it writes."""
    dbg = _state.debugger
    service = dbg.service
    service.loop, service.init_step = k, 0  # msprobe writes to step{loop + init_step}
    try:
        _guard(dbg)
        service.config.dump_path = session.dump_dir
        dbg.start(model)
    except Exception as e:
        _abort(dbg)
        raise MsprobeError("start", session.stage, session.dump_dir, e) from e
    return os.path.join(session.dump_dir, f"step{k}", rank_dir_name())


def step_stop(session: Session) -> None:
    """Write msprobe step k's dump.json and reset, so that the next step starts empty."""
    dbg = _state.debugger
    try:
        dbg.stop()
    except Exception as e:
        _abort(dbg)
        raise MsprobeError("stop", session.stage, session.dump_dir, e) from e
    try:
        _reset(dbg)
    except Exception as e:
        _state.dirty = True
        raise MsprobeError("cleanup", session.stage, session.dump_dir, e) from e
    if session.error is not None:
        error, session.error = session.error, None
        raise MsprobeError("collect", session.stage, session.dump_dir, error)


def close_steps(session: Session) -> None:
    with _LOCK:
        if _state.active is not session:
            return
        _state.active = None
        service = getattr(_state.debugger, "service", None)
        if service is not None:
            service.loop = session.loop
        release(session.dump_dir)
