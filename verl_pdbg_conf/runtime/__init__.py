"""Thin runtime profiler for msprobe's PrecisionDebugger: one dump session per stage.

- PrecisionDebuggerProfiler: the backend verl's DistProfiler uses for `tool: precision_debugger`
  (constructed from the tool config, rank and save_path; start(profile_step=N), stop(),
  annotate(role=stage)), and `prof.stage(name, model=...)` as a context manager or decorator
  for other training loops (StageSession).
- install() / uninstall(): put it in place of verl's own backend in this process; install is
  also Ray's `worker_process_setup_hook` ("verl_pdbg_conf.runtime.install").

Importing this package imports neither torch, msprobe nor verl; msprobe is imported at the first
collected stage."""

from verl_pdbg_conf.runtime.patch import install, uninstall
from verl_pdbg_conf.runtime.profiler import PrecisionDebuggerProfiler, StageSession

__all__ = ["PrecisionDebuggerProfiler", "StageSession", "install", "uninstall"]
