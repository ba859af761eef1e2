"""install(): put this profiler in place of verl's own precision-debugger backend.

Runs as Ray's `worker_process_setup_hook` ("verl_pdbg_conf.runtime.install") in every worker
process of a verl run, so it must be cheap, idempotent and harmless without verl. Importing
verl costs seconds, so nothing is imported here: a patch is applied at once to a verl module
already loaded, and otherwise right after the module's first import (a meta-path hook).

Three patches:
- `verl.utils.profiler.precision_debugger_profile.PrecisionDebuggerProfiler`: DistProfiler
  imports it lazily when it is constructed, so every DistProfiler built afterwards uses ours.
- `verl.trainer.ppo.v1.trainer_base.PPOTrainer._start_profiling` (the trainer runs in a Ray
  actor, so the hook reaches it too): with `profile_continuous_steps: True` verl calls
  start_profile only on the first step of a window, and 0.9.1's batches carry no global step,
  so a worker cannot know the later steps' numbers. For precision_debugger only, the patched
  trainer sends start_profile(profile_step=N) on every step of the window; the worker-side
  effect of that call is only the new step tag. Its `_start_rollout_profiling` (verl starts the
  engines' profile with no step) passes `profile_prefix=step_N` where the vLLM plugin is on.
- `verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer.start_profile/stop_profile`:
  verl drops the engine profiler for any tool but torch and npu; with this package's vLLM plugin
  switched on, a profiled step's start/stop reach the engine (vllm_plugin.py)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading

log = logging.getLogger("verl_pdbg_conf.runtime")

PROFILER_MODULE = "verl.utils.profiler.precision_debugger_profile"
TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
_MARK = "__verl_pdbg_conf_original__"
_LOCK = threading.RLock()


def _patch_profiler(module) -> None:
    from verl_pdbg_conf.runtime.profiler import PrecisionDebuggerProfiler

    current = getattr(module, "PrecisionDebuggerProfiler", None)
    if current is PrecisionDebuggerProfiler:
        return
    setattr(module, _MARK, current)
    module.PrecisionDebuggerProfiler = PrecisionDebuggerProfiler


def _unpatch_profiler(module) -> None:
    if hasattr(module, _MARK):
        module.PrecisionDebuggerProfiler = getattr(module, _MARK)
        delattr(module, _MARK)


def _tags_rollout(trainer) -> bool:
    """The rollout is collected by this package's vLLM plugin (VERL_PDBG_CONF_ROLLOUT in the trainer's
    environment, as the _rollout config group sets it for every Ray worker)."""
    import os

    from verl_pdbg_conf.runtime.vllm_plugin import ENV

    return trainer.config.global_profiler.get("tool") == "precision_debugger" and bool(os.environ.get(ENV))


def _start_rollout(trainer) -> None:
    """Start the engines' profile with the trainer's step in its prefix (verl passes none): the plugin files
    the rollout under step_{N} whatever steps are profiled, in a continuous window too."""
    for manager in trainer._rollout_server_managers():
        manager.start_profile(profile_prefix=f"step_{trainer.global_steps}")


def _retag_continuous_window(trainer) -> None:
    """Inside a continuous window, tell each distinct worker group, and the rollout engines, the new step."""
    gp = trainer.config.global_profiler
    if gp.get("tool") != "precision_debugger" or not gp.get("profile_continuous_steps"):
        return
    if not (getattr(trainer, "prev_step_profile", False) and getattr(trainer, "curr_step_profile", False)):
        return  # not inside a window: verl's own call already carried the step
    groups = [(trainer.actor_rollout_wg, {"role": "train"})]
    if getattr(trainer, "use_reference_policy", False):
        groups.append((getattr(trainer, "ref_policy_wg", None), {}))
    if getattr(trainer, "use_critic", False):
        groups.append((getattr(trainer, "critic_wg", None), {}))
    seen = set()
    for wg, extra in groups:  # hybrid engines alias one group under several roles: call it once
        if wg is None or id(wg) in seen:
            continue
        seen.add(id(wg))
        wg.start_profile(profile_step=trainer.global_steps, **extra)
    if _tags_rollout(trainer) and hasattr(trainer, "_rollout_server_managers"):
        _start_rollout(trainer)  # the plugin ends the earlier step's session at this start


def _patch_trainer(module) -> None:
    cls = getattr(module, "PPOTrainer", None)
    original = getattr(cls, "_start_profiling", None)
    if original is None or hasattr(original, _MARK):
        return

    def _start_profiling(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        _retag_continuous_window(self)
        return result

    setattr(_start_profiling, _MARK, original)
    _start_profiling.__doc__ = original.__doc__
    cls._start_profiling = _start_profiling

    rollout = getattr(cls, "_start_rollout_profiling", None)
    if rollout is not None and hasattr(cls, "_rollout_server_managers") and not hasattr(rollout, _MARK):
        def _start_rollout_profiling(self, *args, **kwargs):
            if _tags_rollout(self):
                return _start_rollout(self)
            return rollout(self, *args, **kwargs)

        setattr(_start_rollout_profiling, _MARK, rollout)
        cls._start_rollout_profiling = _start_rollout_profiling


def _unpatch_trainer(module) -> None:
    cls = getattr(module, "PPOTrainer", None)
    for name in ("_start_profiling", "_start_rollout_profiling"):
        patched = getattr(cls, name, None)
        if hasattr(patched, _MARK):
            setattr(cls, name, getattr(patched, _MARK))


ROLLOUT_SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"


def _patch_rollout_server(module) -> None:
    """verl's vLLM server keeps the engine profiler for tools torch and npu only (any other tool's config is
    dropped at construction, so start_profile never reaches the engine). Where this package's vLLM plugin
    is switched on (VERL_PDBG_CONF_ROLLOUT in the server's environment), the trainer's start_profile /
    stop_profile on a profiled step go to the engine, whose workers collect rollout_generate."""
    import os

    from verl_pdbg_conf.runtime.vllm_plugin import ENV

    cls = getattr(module, "vLLMHttpServer", None)
    if cls is None or hasattr(cls.start_profile, _MARK):
        return
    start, stop = cls.start_profile, cls.stop_profile

    def ours(self) -> bool:
        tool = getattr(getattr(getattr(self, "config", None), "profiler", None), "tool", None)
        return bool(os.environ.get(ENV)) and tool in (None, "precision_debugger") and getattr(self, "node_rank", 0) == 0

    async def start_profile(self, **kwargs):
        if ours(self):
            return await self.engine.start_profile(**kwargs)
        return await start(self, **kwargs)

    async def stop_profile(self):
        if ours(self):
            return await self.engine.stop_profile()
        return await stop(self)

    setattr(start_profile, _MARK, start)
    setattr(stop_profile, _MARK, stop)
    cls.start_profile, cls.stop_profile = start_profile, stop_profile


def _unpatch_rollout_server(module) -> None:
    cls = getattr(module, "vLLMHttpServer", None)
    if cls is not None and hasattr(cls.start_profile, _MARK):
        cls.start_profile = getattr(cls.start_profile, _MARK)
        cls.stop_profile = getattr(cls.stop_profile, _MARK)


_PATCHES = {PROFILER_MODULE: (_patch_profiler, _unpatch_profiler), TRAINER_MODULE: (_patch_trainer, _unpatch_trainer),
            ROLLOUT_SERVER_MODULE: (_patch_rollout_server, _unpatch_rollout_server)}


def _apply(name: str, module) -> None:
    try:
        _PATCHES[name][0](module)
    except Exception as e:  # a verl that moved things: leave it alone, never break its import
        log.warning("precision_debugger: could not patch %s (%r); verl's own code stays in place", name, e)


class _Loader(importlib.abc.Loader):
    """The module's own loader, followed by the patch."""

    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr):  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds only the patched verl modules, through the normal path finder, and wraps their loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec


_FINDER = _Finder()


def install() -> None:
    """Use this package's profiler for `tool: precision_debugger` in this process. Idempotent;
    does nothing harmful (and imports nothing) where verl is not installed."""
    with _LOCK:
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _FINDER)
        for name in _PATCHES:
            module = sys.modules.get(name)
            if module is not None:
                _apply(name, module)


def uninstall() -> None:
    """Undo install(): verl's own classes are back, and modules imported later stay unpatched."""
    with _LOCK:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
        for name, (_, undo) in _PATCHES.items():
            module = sys.modules.get(name)
            if module is not None:
                undo(module)


def installed() -> bool:
    return any(isinstance(f, _Finder) for f in sys.meta_path)
