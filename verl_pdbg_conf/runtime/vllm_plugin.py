"""rollout_generate inside vLLM's own processes, as verl's rollout servers run them: a vLLM general plugin
(entry point group `vllm.general_plugins`, loaded by every vLLM process) that is inert unless the
environment variable VERL_PDBG_CONF_ROLLOUT names the profiler settings, as JSON or a path to a JSON file:

    {"config_path": "/abs/msprobe/config.json", "save_path": "/abs/outputs/precision_debugger",
     "trigger": "profile", "strict": false}

- trigger "profile" (the default): collected between the engine's start_profile and stop_profile. verl
  main's trainer calls them on its rollout servers on profiled steps (with no arguments); its server
  forwards them to the engine only for torch and npu, so this package's runtime (installed in the Ray
  workers) lets them through where this plugin is on (runtime/patch.py). vLLM's own Worker.profile
  refuses to run without --profiler-config; with the plugin active, the call is this package's instead.
  The dump goes to step_{N}/rollout_generate: N is the profile prefix's last number where it has one,
  else the n-th entry of the settings' `steps` at the n-th start (verl starts only on profiled steps),
  else n.
- trigger "always": every engine step from the first on, under step_{"step" setting, default 0}.

No source of verl or vLLM is patched: the worker class's `profile` method is replaced in the process."""

from __future__ import annotations

import json
import logging
import os
import re

from verl_pdbg_conf.verl_facts.stages import ROLLOUT_ENV as ENV

log = logging.getLogger("verl_pdbg_conf.runtime")
_STATE: dict = {}


def settings(value: str | None = None) -> dict | None:
    """The plugin's settings from the environment variable, or None (unset). Bad settings raise ValueError."""
    value = os.environ.get(ENV) if value is None else value
    if not value or not value.strip():
        return None
    text = value
    if not value.lstrip().startswith("{"):
        with open(value, encoding="utf-8") as fh:
            text = fh.read()
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("config_path"), str):
        raise ValueError(f"{ENV}: a JSON object with at least config_path (the msprobe config.json)")
    if doc.get("trigger", "profile") not in ("profile", "always"):
        raise ValueError(f"{ENV}: trigger is 'profile' or 'always', not {doc.get('trigger')!r}")
    return doc


def register() -> None:
    """vLLM's entry point: put the rollout stage in place of Worker.profile in this process. Idempotent."""
    try:
        cfg = settings()
    except (OSError, ValueError) as e:
        log.warning("precision_debugger: %s is not usable (%s); the rollout is not collected", ENV, e)
        return
    if cfg is None or _STATE.get("registered"):
        return
    try:
        from vllm.v1.worker import gpu_worker
    except Exception as e:  # a vLLM without the V1 worker: say so once
        log.warning("precision_debugger: vLLM's V1 worker is not importable (%r); the rollout is not collected", e)
        return
    _STATE.update(registered=True, cfg=cfg, original=gpu_worker.Worker.profile, count=0)
    gpu_worker.Worker.profile = _profile
    if cfg.get("trigger") == "always":
        original_init = gpu_worker.Worker.load_model

        def load_model(self, *args, **kwargs):
            out = original_init(self, *args, **kwargs)
            _begin(self, cfg.get("step", 0))
            return out

        gpu_worker.Worker.load_model = load_model


def _profiler(cfg: dict):
    prof = _STATE.get("profiler")
    if prof is None:
        from verl_pdbg_conf.runtime.profiler import PrecisionDebuggerProfiler

        prof = PrecisionDebuggerProfiler({"config_path": cfg["config_path"], "strict": bool(cfg.get("strict")),
                                          "stages": ["rollout_generate"]},
                                         save_path=cfg.get("save_path"))
        _STATE["profiler"] = prof
    return prof


def _begin(worker, step) -> None:
    prof = _profiler(_STATE["cfg"])
    prof.start(profile_step=step)
    stage = prof.stage("rollout_generate", model=getattr(worker, "model_runner", None))
    stage.__enter__()
    _STATE["stage"] = stage


def _end() -> None:
    stage = _STATE.pop("stage", None)
    if stage is not None:
        stage.__exit__(None, None, None)
        _STATE["profiler"].stop()


def _profile(self, is_start: bool = True, profile_prefix: str | None = None, **kwargs):
    """Worker.profile with the plugin active: the rollout stage opens at start and closes at stop."""
    if is_start:
        _end()  # a start without a stop: the earlier session ends here
        _STATE["count"] += 1
        found = re.findall(r"\d+", profile_prefix or "")
        steps = sorted(int(s) for s in _STATE["cfg"].get("steps") or () if str(s).lstrip("-").isdigit())
        n = _STATE["count"]
        _begin(self, int(found[-1]) if found else steps[n - 1] if n <= len(steps) else n)
    else:
        _end()
