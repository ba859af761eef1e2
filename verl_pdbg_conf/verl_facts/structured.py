"""Structured configs: dataclasses for the parts of verl's PPO config tree that the
precision debugger uses (global_profiler, its global_tool_config.precision_debugger, and
the role profiler sections), with verl 0.9.1's defaults.

The validator and the runtime read field names and defaults from here; `register_configs()`
puts them in Hydra's ConfigStore. This module imports neither hydra nor verl (hydra only
inside `register_configs`). The stage names and role profiler paths come from `stages`,
the one stage/role table; tests keep these dataclasses in step with verl's
PrecisionDebuggerToolConfig, with verl's composed tree, with the stage table and with the
JSON schemas.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Optional

from verl_pdbg_conf.verl_facts.stages import IGNORED_STAGES, ROLE_PROFILERS, STAGES, TOOL, TOOLS

PD_TARGET = "verl.utils.profiler.config.PrecisionDebuggerToolConfig"
PROFILER_TARGET = "verl.utils.profiler.ProfilerConfig"

# Field metadata keys: `doc` (one line), `deprecated` (verl ignores the value),
# `ignored` (verl reads it, but not for precision_debugger), `choices` (allowed values of items).


def _doc(text: str, **more) -> dict:
    return {"doc": text, **more}


@dataclass
class PrecisionDebuggerToolConfig:
    """verl.utils.profiler.config.PrecisionDebuggerToolConfig (verl 0.9.1), plus `_target_`.
    The same shape serves global_profiler.global_tool_config.precision_debugger and each role's
    profiler.tool_config.precision_debugger (whose values interpolate the global ones)."""

    _target_: str = field(default=PD_TARGET, metadata=_doc("class verl instantiates"))
    name: str = field(default=TOOL, metadata=_doc("tool name (verl's dataclass field; not in the YAML tree)"))
    config_path: Optional[str] = field(default=None, metadata=_doc(
        "path of msprobe's config.json; a relative path resolves against each Ray worker's working directory"))
    steps: Optional[list[int]] = field(default=None, metadata=_doc(
        "deprecated and ignored by verl: global_profiler.steps is the only step filter", deprecated=True))
    stages: Optional[list[str]] = field(default=None, metadata=_doc(
        "stages to collect; null collects every stage, [] none", choices=tuple(STAGES)))
    strict: bool = field(default=False, metadata=_doc("raise on an unknown stage or a missing msprobe"))


@dataclass
class GlobalToolConfig:
    """global_profiler.global_tool_config, the part this tool uses."""

    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class GlobalProfilerConfig:
    """global_profiler, the part this tool uses."""

    _target_: str = field(default=PROFILER_TARGET, metadata=_doc("class verl instantiates"))
    tool: Optional[str] = field(default=None, metadata=_doc("profiling tool", choices=TOOLS))
    steps: Optional[list[int]] = field(default=None, metadata=_doc(
        "trainer steps to profile (they start at 1); null or [] profiles nothing"))
    profile_continuous_steps: bool = field(default=False, metadata=_doc(
        "one session across consecutive steps; verl 0.9.1 then tags later steps with the first step"))
    save_path: str = field(default="outputs/profile", metadata=_doc(
        "dump root: {save_path}/step_{global_step}/{stage}"))
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)


@dataclass
class RoleToolConfig:
    """<role>.profiler.tool_config, the part this tool uses."""

    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class RoleProfilerConfig:
    """A role's profiler section (actor_rollout_ref.actor.profiler, ...), the part this tool uses."""

    _target_: str = field(default=PROFILER_TARGET, metadata=_doc("class verl instantiates"))
    tool: Optional[str] = field(default=None, metadata=_doc("interpolated from global_profiler.tool"))
    enable: bool = field(default=False, metadata=_doc("profile this role's stages"))
    all_ranks: bool = field(default=False, metadata=_doc(
        "ignored for precision_debugger: every rank of an enabled role is profiled", ignored=True))
    ranks: list[int] = field(default_factory=list, metadata=_doc(
        "ignored for precision_debugger: filter ranks with msprobe's `rank` in config.json", ignored=True))
    save_path: Optional[str] = field(default=None, metadata=_doc("interpolated from global_profiler.save_path"))
    tool_config: RoleToolConfig = field(default_factory=RoleToolConfig)


@dataclass
class RoleSection:
    """A role's node (actor_rollout_ref.actor, critic, ...), reduced to its profiler."""

    profiler: RoleProfilerConfig = field(default_factory=RoleProfilerConfig)


@dataclass
class ActorRolloutRefSection:
    actor: RoleSection = field(default_factory=RoleSection)
    ref: RoleSection = field(default_factory=RoleSection)
    rollout: RoleSection = field(default_factory=RoleSection)


@dataclass
class VerlProfilingConfig:
    """The PPO config tree, reduced to what the precision debugger reads."""

    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)
    actor_rollout_ref: ActorRolloutRefSection = field(default_factory=ActorRolloutRefSection)
    critic: RoleSection = field(default_factory=RoleSection)


# ---------------------------------------------------------------- reading them

def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def defaults(cls) -> dict:
    """Field -> default value (nested dataclasses as dicts, as they appear in YAML)."""
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            v = f.default_factory()
            out[f.name] = _plain(v)
    return out


def _plain(v):
    if hasattr(v, "__dataclass_fields__"):
        return defaults(type(v))
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def role_profiler_paths(cls=VerlProfilingConfig, prefix: tuple = ()) -> tuple[str, ...]:
    """Dotted paths of every RoleProfilerConfig in the tree (tests: equal to stages.ROLE_PROFILERS)."""
    out: list[str] = []
    for f in fields(cls):
        t = _field_type(cls, f)
        if t is RoleProfilerConfig:
            out.append(".".join(prefix + (f.name,)))
        elif isinstance(t, type) and hasattr(t, "__dataclass_fields__"):
            out += role_profiler_paths(t, prefix + (f.name,))
    return tuple(out)


def _field_type(cls, f):
    import typing

    return typing.get_type_hints(cls).get(f.name)


STAGE_NAMES: tuple[str, ...] = tuple(STAGES)
KNOWN_STAGE_NAMES: frozenset[str] = frozenset(STAGES) | IGNORED_STAGES
ROLE_PROFILER_PATHS: tuple[str, ...] = ROLE_PROFILERS

# ---------------------------------------------------------------- Hydra ConfigStore

CONFIG_GROUP = "verl_pdbg_conf/schema"
NODES = {
    "precision_debugger": PrecisionDebuggerToolConfig,
    "global_profiler": GlobalProfilerConfig,
    "role_profiler": RoleProfilerConfig,
    "profiling": VerlProfilingConfig,
}


def register_configs() -> None:
    """Store the dataclasses in Hydra's ConfigStore under group `verl_pdbg_conf/schema`
    (options precision_debugger, global_profiler, role_profiler, profiling).
    Idempotent; imports hydra only here."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    repo = cs.repo
    for part in CONFIG_GROUP.split("/"):
        repo = repo.get(part) if isinstance(repo, dict) else None
    if isinstance(repo, dict) and all(f"{n}.yaml" in repo for n in NODES):
        return  # stored already: storing again costs ~50 ms (OmegaConf builds each dataclass's node)
    for name, node in NODES.items():
        cs.store(group=CONFIG_GROUP, name=name, node=node, provider="verl-pdbg-conf")
