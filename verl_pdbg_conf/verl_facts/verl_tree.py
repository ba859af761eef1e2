"""The parts of verl 0.9.1's PPO config tree this tool reads, with what verl does
with keys it does not know. A test checks these against verl's generated config."""

from __future__ import annotations

GLOBAL_PROFILER = "global_profiler"
PD = ("global_profiler", "global_tool_config", "precision_debugger")
PD_TARGET = "verl.utils.profiler.config.PrecisionDebuggerToolConfig"

GLOBAL_PROFILER_KEYS = frozenset({
    "_target_", "tool", "steps", "profile_continuous_steps", "save_path", "relocate_results",
    "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks", "global_tool_config",
})
GLOBAL_TOOL_CONFIG_KEYS = frozenset({"nsys", "torch_memory", "precision_debugger"})
# PrecisionDebuggerToolConfig's fields; `steps` is deprecated and ignored.
PD_KEYS = frozenset({"_target_", "name", "config_path", "steps", "stages", "strict"})

ROLE_PROFILER_KEYS = frozenset({
    "_target_", "tool", "enable", "all_ranks", "ranks", "save_path", "relocate_results",
    "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks", "tool_config",
})

DEFAULT_SAVE_PATH = "outputs/profile"

# msprobe refuses dump paths with other characters, at the first start().
DUMP_PATH_CHARS = r"^[a-zA-Z0-9_.:/-]+$"
