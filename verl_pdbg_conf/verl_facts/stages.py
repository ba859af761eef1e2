"""The stage/role table: the one place that says which stages exist, which role
profiler gates each, and where verl runs them. Schemas, structured configs, the
validator and the runtime all read it; tests check the schemas against it."""

from __future__ import annotations

from collections.abc import Mapping

from verl_pdbg_conf.core.record import Record, factory


class Stage(Record, frozen=True):
    name: str
    role: str  # the role whose model the stage runs: actor, ref, critic, reward
    profiler: str  # config path of the role profiler section that names it
    models: tuple[str, ...]  # worker attribute paths that hold the stage's model


# verl 0.9.1's candidates first (same order), then layouts it misses: a TrainingWorker
# (the critic's worker in 0.9.1) holds its model at `engine.module`.
_ACTOR_MODELS = ("actor.engine.module", "actor.actor_module", "actor.actor_module_fsdp", "actor_module_fsdp",
                 "actor_module")
_REF_MODELS = ("ref.engine.module", "ref.actor_module", "ref_policy.actor_module", "ref_module_fsdp", "ref_module",
               "ref_policy.ref_module", "ref_policy.engine.module")
_CRITIC_MODELS = ("critic.engine.module", "critic.critic_module", "critic_module_fsdp", "critic_module",
                  "engine.module")
_RM_MODELS = ("reward_model.engine.module", "reward_model_module_fsdp", "reward_model_module",
              "rm.reward_model_module")

_ACTOR = "actor_rollout_ref.actor.profiler"
_REF = "actor_rollout_ref.ref.profiler"
_CRITIC = "critic.profiler"
_RM = "reward_model.profiler"

# The guide's supported stages, in its order.
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("actor_update", "actor", _ACTOR, _ACTOR_MODELS),
    Stage("actor_compute_log_prob", "actor", _ACTOR, _ACTOR_MODELS),
    Stage("ref_compute_log_prob", "ref", _REF, _REF_MODELS),
    Stage("compute_values", "critic", _CRITIC, _CRITIC_MODELS),
    Stage("critic_update", "critic", _CRITIC, _CRITIC_MODELS),
    Stage("compute_rm_score", "reward", _RM, _RM_MODELS),
)}

# Annotated but never collected by verl: its precision_debugger backend drops rollout generation on
# purpose (`_SKIP_STAGES` in verl/utils/profiler/precision_debugger_profile.py).
IGNORED_STAGES = frozenset({"rollout_generate"})

# This package's runtime collects rollout_generate inside vLLM (the engine steps of its model runner,
# under {save_path}/step_N/rollout_generate/step<K>/rank<R>/) when the vLLM processes get the profiler
# settings in this environment variable: the JSON {"config_path", "save_path", "steps"} or a path to
# such a JSON file. verl's own vLLM server never drives precision_debugger (it keeps only the torch and
# npu profilers: workers/rollout/vllm_rollout/vllm_async_server.py).
ROLLOUT_STAGE = "rollout_generate"
ROLLOUT_ENV = "VERL_PDBG_CONF_ROLLOUT"
ROLLOUT_ENV_AT = ("ray_kwargs", "ray_init", "runtime_env", "env_vars", ROLLOUT_ENV)

# Role profiler sections that exist in verl's PPO config tree.
ROLE_PROFILERS = (
    "actor_rollout_ref.actor.profiler",
    "actor_rollout_ref.ref.profiler",
    "actor_rollout_ref.rollout.profiler",
    "critic.profiler",
)

# Tools verl's unified profiler accepts in global_profiler.tool.
TOOLS = ("nsys", "npu", "torch", "torch_memory", "precision_debugger")
TOOL = "precision_debugger"


class VerlTarget(Record, frozen=True):
    """What one verl release does with this tool, read off its code (releases/extract.py)."""

    version: str
    fired: frozenset[str]  # stages its workers annotate under the documented name
    aliases: dict[str, str]  # annotation names it uses for documented stages -> stage
    hybrid_gate: str  # in hybrid mode this profiler gates actor and ref stages
    role_profilers: tuple[str, ...]
    continuous_tag_bug: bool  # profile_continuous_steps tags later steps with the first step
    binds_first_chunk: bool = True  # its backend binds the first Megatron chunk of a list (0.8.0 does not)
    # stage -> (worker class, attribute path) where the stage's model was found on the release's
    # real workers (MODEL_FOUND_AT)
    model_at: dict[str, tuple[str, str]] = factory(dict)
    # What the copy's code and config have at all (a copy older than 0.8 has no backend; older
    # than 0.6 no global_profiler); None where extraction could not tell.
    tools: tuple[str, ...] = TOOLS  # the tools its DistProfiler dispatches on
    unknown_tool: str | None = "no-op"  # what its DistProfiler does with any other tool
    backend: bool = True  # it has the precision_debugger backend
    global_profiler: bool | None = True  # its ppo_trainer has a global_profiler section
    # where its workers read the actor's routing-replay mode ({strategy: config path}) and which rollout
    # engines return routed experts (releases/extract.py: _routing_replay); None where not read
    routing_replay: dict | None = None
    label: str = ""  # how a finding names it: `verl 0.5.0 (repository copy at ./verl)`


# Where each stage's model was found on a release's real workers: not read off verl's code but
# observed by running them (bench/real_workers.py; tests/runtime/test_real_workers.py checks it).
# verl's own candidates miss the critic's: its TrainingWorker has no `.critic.` level.
MODEL_FOUND_AT: dict[str, dict[str, tuple[str, str]]] = {
    "0.9.1": {
        "actor_compute_log_prob": ("ActorRolloutRefWorker", "actor.engine.module"),
        "actor_update": ("ActorRolloutRefWorker", "actor.engine.module"),
        "ref_compute_log_prob": ("ActorRolloutRefWorker", "ref.engine.module"),
        "critic_update": ("TrainingWorker", "engine.module"),
    },
}


def target_from_facts(version: str, facts: dict) -> VerlTarget:
    """A release's (or a live tree's) VerlTarget from its extracted stage facts."""
    st = facts["stages"]
    return VerlTarget(
        version=facts.get("version") or version,
        fired=frozenset(a["stage"] for a in st["annotations"] if a["stage"] in st["stage_to_role"]),
        aliases=dict(st["aliases"]),
        hybrid_gate=st["hybrid_gate"] or _ACTOR,
        role_profilers=tuple(st["role_profilers"]),
        continuous_tag_bug=st["continuous_keeps_first_tag"],
        binds_first_chunk=st["binds_first_megatron_chunk"],
        model_at=MODEL_FOUND_AT.get(version, {}),
        tools=tuple(st.get("tools") or ()),
        unknown_tool=st.get("unknown_tool"),
        backend=bool(st.get("backend", True)),
        global_profiler=st.get("global_profiler", True),
        routing_replay=st.get("routing_replay"),
        label=f"verl {facts.get('version') or version}",
    )


# The fsdp/megatron workers verl had before 2026-04 annotated every stage; no release with the
# precision_debugger backend ships them, so this target is not read off a release.
LEGACY = VerlTarget(
    version="legacy-workers",
    fired=frozenset(STAGES) | IGNORED_STAGES,
    aliases={},
    hybrid_gate=_ACTOR,
    role_profilers=ROLE_PROFILERS + (_RM,),
    continuous_tag_bug=True,
)


class _Targets(Mapping):
    """release -> VerlTarget for every shipped release (built from its facts on first use),
    plus `legacy-workers`."""

    def __init__(self):
        self._built = {LEGACY.version: LEGACY}

    def _names(self):
        from verl_pdbg_conf.verl_facts import releases

        return (*releases.shipped(), LEGACY.version)

    def __getitem__(self, name: str) -> VerlTarget:
        """A shipped release, `legacy-workers`, or a live tree registered in the catalog."""
        if name not in self._built:
            from verl_pdbg_conf.verl_facts import catalog

            if not catalog.known(name):
                raise KeyError(name)
            self._built[name] = target_from_facts(name, catalog.load(name))
        return self._built[name]

    def __iter__(self):
        return iter(self._names())

    def __len__(self):
        return len(self._names())


VERL_TARGETS: Mapping[str, VerlTarget] = _Targets()


def gate_for(stage: str, target: VerlTarget, hybrid: bool) -> str:
    """The role profiler section whose `enable` decides whether `stage` is collected."""
    info = STAGES[stage]
    if hybrid and info.role in ("actor", "ref"):
        return target.hybrid_gate
    return info.profiler


def stage_for_annotation(name: str, target: VerlTarget | None = None) -> str | None:
    """Documented stage name for a name verl annotates a worker method with."""
    if name in STAGES:
        return name
    for t in ([target] if target else VERL_TARGETS.values()):
        if name in t.aliases:
            return t.aliases[name]
    return None
