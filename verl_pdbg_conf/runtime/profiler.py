"""The profiler verl's DistProfiler drives for `tool: precision_debugger`, usable in any loop too.

verl's side: constructed as `PrecisionDebuggerProfiler(precision_cfg, rank, save_path)`;
`start(profile_step=N)` / `stop()` bracket a profiled step; `annotate(role=stage)` wraps worker
methods. Other loops: `prof.start(profile_step=N)`, `with prof.stage("actor_update", model=m):`
(or `@prof.stage(...)`), `prof.stop()`.

Every profiled stage is its own msprobe session (start(model) -> run -> stop -> reset_status)
writing to `{save_path}/step_{N}/{stage}`; see session.py for what is process-wide."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any, Callable

from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.verl_facts.stages import IGNORED_STAGES, STAGES, stage_for_annotation
from verl_pdbg_conf.runtime import model as _model
from verl_pdbg_conf.runtime import rollout as _rollout
from verl_pdbg_conf.runtime import session as _session
from verl_pdbg_conf.runtime.session import warn_once

log = logging.getLogger("verl_pdbg_conf.runtime")
DEFAULT_SAVE_PATH = "outputs/profile"  # verl's global_profiler.save_path default
_TOOL_KEYS = ("config_path", "stages", "strict", "steps")
_VALIDATED: dict = {}  # validation is pure: one run per distinct config in a process
_VALIDATED_LOCK = threading.Lock()
# Validator rules whose error means msprobe cannot run at all (no config.json, a dump path it refuses).
_BLOCKING_RULES = ("config-path", "save-path")


def tool_config_dict(cfg: Any) -> dict:
    """The precision_debugger keys of what verl hands over: its PrecisionDebuggerToolConfig
    dataclass, an OmegaConf node, a plain dict, or None. Lists become lists, nothing is resolved
    twice; keys verl adds itself (name, _target_) are left out, they are not the user's."""
    if cfg is None:
        items: Mapping = {}
    elif isinstance(cfg, Mapping):
        items = cfg
    elif dataclasses.is_dataclass(cfg):
        items = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    else:
        items = vars(cfg)
    out = {}
    for key in _TOOL_KEYS:
        if key not in items or (key == "steps" and items[key] is None):
            continue
        value = items[key]
        if value is not None and not isinstance(value, (str, bytes, bool, int, float, Mapping)):
            try:
                value = list(value)
            except TypeError:
                pass
        out[key] = value
    return out


def _selected_stages(stages: Any) -> frozenset[str] | None:
    """Documented names of the configured stages; None collects all (verl: `stages: null`)."""
    if stages is None:
        return None
    if isinstance(stages, str):
        stages = [stages]
    names = (_rollout.STAGE if n == _rollout.STAGE else stage_for_annotation(n) for n in (str(s).strip() for s in stages))
    return frozenset(n for n in names if n is not None)


def _msprobe_importable() -> bool:
    try:
        return importlib.util.find_spec("msprobe") is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken half-imported package
        return False


def _identity(func):
    return func


class PrecisionDebuggerProfiler:
    """msprobe PrecisionDebugger for verl's unified profiler, one dump session per stage."""

    def __init__(self, precision_cfg: Any = None, rank: int | None = None, save_path: str | None = None, *,
                 strict: bool | None = None):
        self.rank = rank
        self.tool_config = tool_config_dict(precision_cfg)
        self.strict = self.tool_config.get("strict") is True if strict is None else bool(strict)
        self.save_path = os.path.abspath(save_path or DEFAULT_SAVE_PATH)
        path = self.tool_config.get("config_path")
        self.config_path = os.path.abspath(path) if isinstance(path, str) and path else None
        self.stages = _selected_stages(self.tool_config.get("stages"))
        self._active = False
        self._profile_step: int | None = None
        self._can_collect = self._preflight()
        self._task = _task_of(self.config_path) if self._can_collect else None
        # the token ids the current log-prob dump's forwards ran on; kept while its stage continues
        self._tokens: tuple[str, _rollout.ForwardTokens] | None = None

    # ---- construction: everything that can be known before step N --------------------------

    def _preflight(self) -> bool:
        """Validate the config with the validator's rules; strict raises here, not at step N.
        Returns whether this profiler can collect anything at all."""
        errors = self._validate()
        if not _msprobe_importable():
            hint = "pip install mindstudio-probe where the workers run"
            if self.strict:  # the guide's words, as verl's own backend raises them
                raise ImportError(f"msprobe is not available but precision_debugger.strict is True ({hint})")
            warn_once(("msprobe-missing",), f"msprobe is not available ({hint}); no stage is collected")
            return False
        if any(f.rule.startswith(_BLOCKING_RULES) for f in errors or ()):
            return False  # already reported by the validator; msprobe would refuse to run
        if self.config_path is None or not os.path.isfile(self.config_path):
            # Without it msprobe would silently fall back to its packaged config.json.
            self._fail(("config-path", self.config_path),
                       f"config_path {self.tool_config.get('config_path')!r} does not name an msprobe "
                       f"config.json; no stage is collected")
            return False
        return True

    def _validate(self) -> list[Finding] | None:
        """Error findings of the validator's rules for this tool config, or None where the
        validator cannot run (not installed with this package, or it failed)."""
        try:
            from verl_pdbg_conf.validate import check_tool_config
        except ImportError:
            return None
        key = (repr(sorted(self.tool_config.items())), self.save_path, self.strict, os.getcwd())
        with _VALIDATED_LOCK:
            findings = _VALIDATED.get(key)
        if findings is None:
            try:
                findings = check_tool_config(dict(self.tool_config), save_path=self.save_path, strict=self.strict)
            except Exception as e:  # a validator failure must not stop training
                warn_once(("validator", type(e).__name__),
                          f"config validation could not run ({e!r}); continuing without it")
                return None
            with _VALIDATED_LOCK:
                _VALIDATED[key] = findings
        errors = [f for f in findings if f.severity is Severity.ERROR]
        if errors and self.strict:
            raise ValueError("precision_debugger config rejected (strict: True):\n"
                             + "\n".join(f"  [{f.rule}] {f.message}" for f in errors))
        for f in errors:
            warn_once(("finding", f.rule, f.path, f.message), f"[{f.rule}] {f.message}")
        return errors

    def _fail(self, key: Any, message: str, exc: BaseException | None = None) -> None:
        """Strict: raise (msprobe's own exception where it raised one). Otherwise one warning per cause.
        Messages read "cause; what happens without strict": strict says instead that it stopped the run."""
        if self.strict:
            if exc is not None:
                raise exc
            cause = message.split("; ")[0] if "; " in message else message
            raise ValueError(f"{cause} (precision_debugger.strict is True, so the run stops here)")
        warn_once(key, message)

    # ---- verl's backend interface ------------------------------------------------------------

    def start(self, **kwargs) -> None:
        """A profiled step begins (DistProfiler.start, from the trainer's start_profile)."""
        step = kwargs.get("profile_step", kwargs.get("global_step"))
        _session.end_continuation(id(self))
        self._profile_step = _model.as_step(step)
        self._active = True

    def stop(self) -> None:
        """The profiled step (or continuous window) ends."""
        _session.end_continuation(id(self))
        self._active = False

    def annotate(self, message: str | None = None, color: str | None = None, domain: str | None = None,
                 category: str | None = None, **kwargs) -> Callable:
        """Decorator for a worker method that runs stage `role`. DistProfiler calls this on every
        profiled call, so it stays a closure and nothing more."""
        role = kwargs.get("role")
        if role is None:
            return _identity

        def decorator(func):
            @functools.wraps(func)
            def wrapper(owner, *args, **kw):
                if not self._active:
                    return func(owner, *args, **kw)
                return self._run(role, func, (owner, *args), kw, owner)

            return wrapper

        return decorator

    # ---- other training loops ----------------------------------------------------------------

    def stage(self, name: str, *, model: Any = None, owner: Any = None, step: int | None = None) -> StageSession:
        """`with prof.stage("actor_update", model=m):` or `@prof.stage("actor_update")` on a method
        of an object with verl's attribute layout. Collected only between start() and stop()."""
        if name not in IGNORED_STAGES and stage_for_annotation(name) is None:
            self._fail(("unknown-stage", name), f"Unknown precision_debugger stage: {name}; not collected")
        return StageSession(self, name, model, owner, step)

    # ---- one stage call ----------------------------------------------------------------------

    def _run(self, annotation: str, func: Callable, args: tuple, kwargs: dict, owner: Any,
             model: Any = None, step: int | None = None):
        session = self._open(annotation, owner, args, kwargs, model, step)
        if session is None:
            return func(*args, **kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException:
            self._close(session, failed=True)
            raise
        self._close(session)
        return result

    def _stage_for(self, annotation: str, owner: Any) -> str | None:
        if annotation in IGNORED_STAGES:
            return None
        stage = stage_for_annotation(annotation)
        if stage is None:
            self._fail(("unknown-stage", annotation),
                       f"Unknown precision_debugger stage: {annotation}; the call runs without a dump")
            return None
        if stage != annotation and STAGES[stage].role == "critic":
            # verl 0.9.1's TrainingWorker runs train_batch for the critic and, inside the actor
            # worker, for the actor: only a value model's train_batch is the critic's update.
            kind = _model.declared_model_type(owner)
            if kind not in (None, "value_model"):
                self._fail(("alias", annotation, kind),
                           f"'{annotation}' on a {kind} worker is not the critic's update; not collected")
                return None
        return stage

    def _open_rollout(self, model: Any, step: int | None) -> _rollout.EngineSteps | None:
        """rollout_generate: every engine step the vLLM engine behind `model` runs while the stage is open."""
        if not self._can_collect or (self.stages is not None and _rollout.STAGE not in self.stages):
            return None
        runner = _rollout.model_runner(model)
        if runner is None:
            self._fail(("model", _rollout.STAGE),
                       f"rollout_generate needs a vLLM engine in this process (an LLM built with "
                       f"VLLM_ENABLE_V1_MULTIPROCESSING=0, or its model runner); got {type(model).__name__}; "
                       f"not collected")
            return None
        base = os.path.join(self.save_path, f"step_{self._tag(step, None, (), {})}", _rollout.STAGE)
        try:
            session = _session.open_steps(_rollout.STAGE, base, self.config_path, id(self))
        except _session.SingletonConflict as e:
            self._fail(("singleton",), f"{e}; not collected")
            return None
        except _session.MsprobeError as e:
            self._msprobe_failed(e)
            return None
        if session is None:
            return None
        return _rollout.EngineSteps(runner, session, self._msprobe_failed).__enter__()

    def _close_rollout(self, steps: _rollout.EngineSteps) -> None:
        steps.__exit__(None, None, None)
        _session.close_steps(steps.session)

    def _tag(self, step: Any, owner: Any, args: tuple, kwargs: dict) -> str:
        """The global step: the caller's, the batch's, the worker's, then the trainer's start_profile."""
        for found in (_model.as_step(step), _model.step_from_call(args, kwargs), _model.step_from_owner(owner),
                      self._profile_step):
            if found is not None:
                return str(found)
        warn_once(("step-unknown",), "no global step known (start(profile_step=N) was not given one); "
                                     "dumps go to step_unknown/")
        return "unknown"

    def _open(self, annotation, owner, args, kwargs, model, step) -> _session.Session | None:
        if not self._can_collect:
            return None
        stage = self._stage_for(annotation, owner)
        if stage is None or (self.stages is not None and stage not in self.stages):
            return None
        if model is None:
            model, path = _model.resolve_model(owner, STAGES[stage].models)
            if model is None:
                self._fail(("model", stage),
                           f"PrecisionDebugger model not resolved for stage '{stage}' (none of "
                           f"{', '.join(STAGES[stage].models)} on {type(owner).__name__}); the stage runs "
                           f"without a dump")
                return None
            log.debug("precision_debugger: stage '%s': model resolved at %s.%s (%s)", stage, type(owner).__name__,
                      path, type(model).__name__)
        tag = self._tag(step, owner, args, kwargs)
        base = os.path.join(self.save_path, f"step_{tag}", stage)
        # A stage verl runs under another name runs once per mini-batch: one dump for them all.
        continue_key = (id(self), stage, tag, id(owner)) if stage != annotation else None
        try:
            session = _session.open_session(stage, base, model, self.config_path, id(self), continue_key)
            if session is not None and self._task == "tensor" and stage in _TOKEN_STAGES:
                if self._tokens is None or self._tokens[0] != session.dump_dir:
                    self._tokens = (session.dump_dir, _rollout.ForwardTokens(model))
                session.tokens = self._tokens[1].__enter__()
            return session
        except _session.SingletonConflict as e:
            self._fail(("singleton",), f"{e}; not collected")
            return None
        except _session.MsprobeError as e:
            error = e
        except Exception as e:  # not msprobe's: a bug here must not stop training either
            error = _session.MsprobeError("start", stage, None, e)
        self._msprobe_failed(error)  # outside the except: strict raises msprobe's exception, chained as it was
        return None

    def _close(self, session: _session.Session, failed: bool = False) -> None:
        if session.tokens is not None:
            session.tokens.detach()
        try:
            _session.close_session(session, failed=failed)
        except _session.MsprobeError as e:
            self._msprobe_failed(e, stage_failed=failed)
            return  # the dump is incomplete and said so: no token record beside it (one cause, one warning)
        if session.tokens is not None and not failed:
            session.tokens.write(os.path.join(session.dump_dir, "step0", _session.rank_dir_name()))

    def _msprobe_failed(self, e: _session.MsprobeError, stage_failed: bool = False) -> None:
        """One warning per cause; strict raises msprobe's own exception, with a note saying where."""
        stage, where = e.stage, f" in {e.dump_dir}" if e.dump_dir else ""
        # msprobe's exceptions keep their text in __str__ only (their repr is an empty "MsprobeException()")
        cause, said = e.cause, f"{type(e.cause).__name__}: {e.cause}" if str(e.cause) else repr(e.cause)
        message = {
            "start": f"msprobe failed to start for stage '{stage}' ({said}); the stage runs without a dump",
            "reset": f"msprobe could not be reset before stage '{stage}' ({said}); the stage runs without a "
                     f"dump, so that no dump mixes the records of two stages",
            "collect": f"msprobe failed while collecting stage '{stage}' ({said}); the stage ran on without "
                       f"it and its dump{where} is incomplete",
            "stop": f"msprobe failed to stop for stage '{stage}' ({said}); its dump{where} may be incomplete",
            "cleanup": f"msprobe reset_status failed after stage '{stage}' ({said}); its dump{where} is "
                       f"written, and msprobe is reset again before the next stage",
        }[e.phase]
        key = (e.phase, stage, type(cause).__name__)
        if stage_failed or not self.strict:  # the stage's own exception is the one training must see
            warn_once(key, message)
            return
        if hasattr(cause, "add_note"):
            cause.add_note(f"precision_debugger (strict: True): {message}")
        raise cause


# The actor's and ref's forwards: with tensor dumps, the token ids they ran on are recorded so that their tokens
# can be aligned with the rollout's (compare/rollout/), and two trainer runs compared token by token whatever rows
# each call held (compare/rollout/trainers.py); the update's forwards too, whose backward records belong to them.
_TOKEN_STAGES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")


def _task_of(config_path: str | None) -> str | None:
    try:
        with open(config_path, encoding="utf-8") as fh:
            task = json.load(fh).get("task")
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return task if isinstance(task, str) else None


class StageSession:
    """One stage, as a context manager or a decorator (see PrecisionDebuggerProfiler.stage)."""

    __slots__ = ("_profiler", "_name", "_model", "_owner", "_step", "_session")

    def __init__(self, profiler: PrecisionDebuggerProfiler, name: str, model: Any, owner: Any, step: int | None):
        self._profiler, self._name, self._model, self._owner, self._step = profiler, name, model, owner, step
        self._session = None

    def __enter__(self):
        p = self._profiler
        if p._active and self._name == _rollout.STAGE:
            self._session = p._open_rollout(self._model, self._step)
        elif p._active:
            self._session = p._open(self._name, self._owner, (), {}, self._model, self._step)
        return self

    def __exit__(self, exc_type, exc, tb):
        session, self._session = self._session, None
        if isinstance(session, _rollout.EngineSteps):
            self._profiler._close_rollout(session)
        elif session is not None:
            self._profiler._close(session, failed=exc_type is not None)
        return False

    def __call__(self, func: Callable) -> Callable:
        p, name, model, owner, step = self._profiler, self._name, self._model, self._owner, self._step

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not p._active:
                return func(*args, **kwargs)
            who = owner
            if who is None and model is None and args:
                who = args[0]  # a method: its model is found on self
            return p._run(name, func, args, kwargs, who, model, step)

        return wrapper
