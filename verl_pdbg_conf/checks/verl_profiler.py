"""Rules for verl's `global_profiler` and role `profiler` sections when the tool is
precision_debugger, judged by what verl's code does with them (notes/verl.md)."""

from __future__ import annotations

import os
import re
import stat

from verl_pdbg_conf.checks import verl_support
from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.document import Document, get, is_unknown
from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.core.record import Record, factory
from verl_pdbg_conf.verl_facts.stages import IGNORED_STAGES, ROLLOUT_ENV, STAGES, TOOL, TOOLS, gate_for
from verl_pdbg_conf.core.suggest import did_you_mean
from verl_pdbg_conf.verl_facts.verl_tree import (DEFAULT_SAVE_PATH, DUMP_PATH_CHARS, GLOBAL_PROFILER_KEYS, GLOBAL_TOOL_CONFIG_KEYS, PD,
                         PD_KEYS, PD_TARGET, ROLE_PROFILER_KEYS)

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO
GP = ("global_profiler",)
RUNTIME_HOOK = "verl_pdbg_conf.runtime.install"


class ToolConfig(Record):
    """The effective precision_debugger settings and where each came from."""

    config_path: object = None
    config_path_at: tuple = PD + ("config_path",)
    stages: object = None
    stages_at: tuple = PD + ("stages",)
    strict: bool = False
    save_path: object = DEFAULT_SAVE_PATH
    save_path_at: tuple = GP + ("save_path",)
    # what the run will do, for --plan and --inspect
    runtime: str = "verl"  # verl | pdbg: the runtime profiler in the workers
    hybrid: bool = True
    roles: dict = factory(dict)  # role profiler path -> enabled
    selected: set = factory(set)  # stages selected that the workers run
    gates: dict = factory(dict)  # stage -> role profiler path that gates it
    # rollout_generate is selected and this package's runtime collects it (inside vLLM)
    rollout: bool = False

    @property
    def collected(self) -> list[str]:
        """Stages that will be collected, in the stage table's order."""
        return [s for s in STAGES if s in self.selected and self.roles.get(self.gates.get(s))]


def split(dotted_path: str) -> tuple:
    return tuple(dotted_path.split("."))


def has_pd_settings(data) -> bool:
    """Does the file configure precision_debugger anywhere?"""
    pd = get(data, PD)
    if isinstance(pd, dict) and any(pd.get(k) not in (None, False) for k in ("config_path", "stages", "strict")):
        return True
    for role in _role_paths():
        rp = get(data, role + ("tool_config", "precision_debugger"))
        if isinstance(rp, dict) and any(not _is_default_interp(v) and v not in (None, False)
                                        for k, v in rp.items() if k in ("config_path", "stages", "strict")):
            return True
    return False


def _is_default_interp(v) -> bool:
    return isinstance(v, str) and v.startswith("${oc.select:")


def _role_paths(options: Options | None = None):
    from verl_pdbg_conf.verl_facts.stages import ROLE_PROFILERS

    roles = options.target.role_profilers if options else ROLE_PROFILERS
    return [split(r) for r in roles]


def check_verl_config(doc: Document, options: Options) -> tuple[list[Finding], ToolConfig | None]:
    """Findings for one verl config tree, and the effective tool config to check further
    (its config.json), or None when precision_debugger is not in use."""
    data = doc.data
    out: list[Finding] = []
    if not isinstance(data, dict):
        if data is not None:
            out.append(doc.finding("value-type", E, "a verl config must be a mapping at the top level", ()))
        else:  # said, as for a conf without global_profiler: a silent pass would read as "checked, fine"
            out.append(doc.finding("no-profiler-config", I, "the file holds no YAML value (it is empty, or only "
                                   "comments): nothing to check", ()))
        return out, None
    gp = data.get("global_profiler")
    if gp is not None and not isinstance(gp, dict):
        out.append(doc.finding("value-type", E, "global_profiler must be a mapping", GP))
        return out, None
    gp = gp or {}
    out += _unknown_keys(doc, gp, GP, GLOBAL_PROFILER_KEYS, "key-dropped", W,
                         "verl ignores this key under global_profiler")
    gtc = gp.get("global_tool_config")
    if isinstance(gtc, dict):
        out += _unknown_keys(doc, gtc, GP + ("global_tool_config",), GLOBAL_TOOL_CONFIG_KEYS, "key-dropped", W,
                             "verl ignores this tool config")

    tool = gp.get("tool")
    pd_present = has_pd_settings(data)
    target = options.target
    if target.global_profiler is False and data.get("global_profiler") is not None:
        set_at = sorted((p for p in doc.values if p[:1] == GP and p != GP and not doc.origin(p)[0].startswith("<")),
                        key=lambda p: doc.origin(p)[1:])  # the first line that adds a key under it
        out = [doc.finding(verl_support.RULE, E, f"{target.label} has no `global_profiler` section in its "
                           "ppo_trainer and no precision_debugger profiler: the keys added here are ignored and "
                           "nothing is collected", GP, key=True, at=set_at[0] if set_at else None,
                           hint=f"profile with {verl_support.with_backend()}, or drop these settings")]
        return out, None
    found, go_on = _tool_in_use(doc, gp, tool, pd_present, target)
    out += found
    if not go_on:
        return out, None

    pd = get(data, PD)
    if pd is not None and not isinstance(pd, dict):
        out.append(doc.finding("value-type", E, "global_tool_config.precision_debugger must be a mapping", PD))
        pd = {}
    pd = pd or {}
    out += _pd_keys(doc, pd, PD)
    runtime = _runtime(data, options)
    tc = ToolConfig(config_path=pd.get("config_path"), stages=pd.get("stages"), save_path=gp.get("save_path",
                                                                                                  DEFAULT_SAVE_PATH))
    strict = pd.get("strict", False)
    if not isinstance(strict, bool) and not is_unknown(strict):
        out.append(doc.finding("strict-type", E, f"strict must be a boolean, got {strict!r}: verl's "
                               "PrecisionDebuggerToolConfig asserts `strict must be bool` when the workers start",
                               PD + ("strict",), hint="strict: True or strict: False (unquoted)"))
    tc.strict = strict is True

    out += _steps(doc, gp, data, runtime)
    roles, role_findings = _roles(doc, data, options, tc)
    out += role_findings
    out += _config_path_shape(doc, tc)
    stage_findings, selected = _stages(doc, tc, options, runtime, roles_in_use(data))
    out += stage_findings
    if tc.rollout:
        from verl_pdbg_conf.checks.rollout import check_rollout

        out += check_rollout(doc, data, tc, options)
    out += _gating(doc, data, options, tc, selected, roles, runtime)
    out += _save_path(doc, tc, options)
    tc.runtime, tc.roles, tc.selected = runtime, roles, selected
    tc.hybrid = get(data, ("actor_rollout_ref", "hybrid_engine"), True) is not False
    tc.gates = {st: gate_for(st, options.target, tc.hybrid) for st in selected}
    return out, tc


def _tool_in_use(doc: Document, gp: dict, tool, pd_present: bool, target) -> tuple[list[Finding], bool]:
    """What global_profiler.tool says, and whether precision_debugger's settings are to be checked further."""
    out: list[Finding] = []
    tools = target.tools or TOOLS
    if is_unknown(tool):
        if not pd_present:
            return out, False
    elif tool is None:
        if pd_present:
            out.append(doc.finding(
                "tool-missing", E, "precision_debugger is configured but global_profiler.tool is not set: "
                "no profiler runs and nothing is collected", GP + ("tool",), key=True,
                hint="set global_profiler.tool: precision_debugger"))
            # go on: report every other mistake in the same pass
        elif not gp:
            out.append(doc.finding("no-profiler-config", I, "no global_profiler section: nothing to check", ()))
            return out, False
        else:
            return out, False
    elif tool == TOOL and verl_support.lacks_backend(target):
        knows = f"its DistProfiler knows {', '.join(target.tools)}" if target.tools else \
            "it has no verl/utils/profiler/precision_debugger_profile.py"
        out.append(doc.finding(
            verl_support.RULE, E, f"global_profiler.tool {tool!r}: {target.label} has no precision_debugger "
            f"profiler ({knows}); {verl_support.unknown_tool_effect(target)}",
            GP + ("tool",), hint=f"profile with {verl_support.with_backend()}"))
        return out, False
    elif not isinstance(tool, str) or tool not in tools:
        close = did_you_mean(str(tool), tools)
        out.append(doc.finding(
            "tool-unknown", E, f"global_profiler.tool {tool!r} is not a verl profiler tool; verl falls back to a "
            "no-op profiler and collects nothing", GP + ("tool",), hint=f"one of {', '.join(tools)}{close}"))
        if not (pd_present or f"'{TOOL}'" in close):  # meant precision_debugger: check the rest too
            return out, False
    elif tool != TOOL:
        if pd_present:
            out.append(doc.finding(
                "tool-missing", W, f"precision_debugger is configured but global_profiler.tool is {tool!r}: "
                "those settings are unused", GP + ("tool",), hint="set global_profiler.tool: precision_debugger"))
        return out, False
    return out, True


def _runtime(data, options: Options) -> str:
    """Which runtime profiler the workers will run: verl's own or this package's."""
    if options.runtime != "auto":
        return options.runtime
    hook = get(data, ("ray_kwargs", "ray_init", "runtime_env", "worker_process_setup_hook"))
    return "pdbg" if hook == RUNTIME_HOOK else "verl"


def roles_in_use(data) -> dict[str, bool | None]:
    """Which optional roles the trainer builds (verl's need_critic / need_reference_policy);
    None where the file does not say and a CLI override may still decide."""
    critic = get(data, ("critic", "enable"))
    adv = get(data, ("algorithm", "adv_estimator"))
    if isinstance(critic, bool):
        use_critic = critic
    elif isinstance(adv, str) and not is_unknown(adv):
        use_critic = adv == "gae"
    else:
        use_critic = None
    kl_loss = get(data, ("actor_rollout_ref", "actor", "use_kl_loss"))
    kl_reward = get(data, ("algorithm", "use_kl_in_reward"))
    if kl_loss is True or kl_reward is True:
        use_ref = True
    elif isinstance(kl_loss, bool) and isinstance(kl_reward, bool):
        use_ref = False
    else:
        use_ref = None
    return {"critic": use_critic, "ref": use_ref}


def _unknown_keys(doc, mapping, at, known, rule, severity, why):
    out = []
    for k in mapping:
        if k not in known:
            out.append(doc.finding(rule, severity, f"unknown key '{k}': {why}", at + (k,), key=True,
                                   hint=f"remove it{did_you_mean(str(k), sorted(known))}"))
    return out


def _pd_keys(doc, pd, at):
    out = []
    for k, v in pd.items():
        if k == "steps" and v is not None:
            out.append(doc.finding(
                "key-dropped", W, "precision_debugger.steps is deprecated and ignored by verl",
                at + ("steps",), key=True, hint="select steps with global_profiler.steps"))
        elif k == "_target_" and v != PD_TARGET and not is_unknown(v):
            out.append(doc.finding(
                "value-type", E, f"_target_ {v!r} is not verl's PrecisionDebuggerToolConfig: the worker fails "
                "to instantiate the tool config", at + (k,), hint=f"_target_: {PD_TARGET}"))
        elif k not in PD_KEYS:
            out.append(doc.finding(
                "key-dropped", W, f"unknown key '{k}': verl silently drops it from the precision_debugger "
                "tool config", at + (k,), key=True, hint=f"remove it{did_you_mean(str(k), sorted(PD_KEYS))}"))
    return out


def _steps(doc, gp, data, runtime):
    out = []
    at = GP + ("steps",)
    steps = gp.get("steps")
    if is_unknown(steps):
        return out
    if steps is None or steps == []:
        what = "null" if steps is None else "[]"
        out.append(doc.finding("steps-none", E, f"global_profiler.steps is {what}: no step is profiled and "
                               "nothing is collected", at, key="steps" not in gp,
                               hint="list the trainer steps to profile, e.g. steps: [1, 2] (steps start at 1)"))
        return out
    if not isinstance(steps, list):
        out.append(doc.finding("steps-type", E, f"global_profiler.steps must be a list, got {steps!r}: it "
                               "composes, then the trainer fails at its first step (`global_steps in steps`)",
                               at, hint=f"steps: [{steps}]" if isinstance(steps, int) else "steps: [1, 2]"))
        return out
    total = get(data, ("trainer", "total_training_steps"))
    seen: dict = {}
    for i, s in enumerate(steps):
        if is_unknown(s):
            continue
        if isinstance(s, bool) or not isinstance(s, int):
            out.append(doc.finding("steps-type", E, f"step {s!r} is not an integer: the trainer compares its "
                                   "integer step counter with it and never matches", at + (i,),
                                   hint=f"write it as a plain integer{_int_hint(s)}"))
            continue
        if s < 1:
            out.append(doc.finding("steps-range", E, f"step {s} is never profiled: trainer steps start at 1",
                                   at + (i,), hint="use steps >= 1; step 1 is the first training step"))
        elif isinstance(total, int) and not isinstance(total, bool) and s > total:
            out.append(doc.finding("steps-range", E, f"step {s} is never profiled: the run ends after "
                                   f"trainer.total_training_steps={total}", at + (i,),
                                   hint=f"use steps between 1 and {total}"))
        if s in seen:
            out.append(doc.finding("steps-duplicate", W, f"step {s} is listed twice (first at index {seen[s]})",
                                   at + (i,), hint="remove the duplicate"))
        seen.setdefault(s, i)
    ints = sorted(s for s in seen if isinstance(s, int))
    consecutive = any(b - a == 1 for a, b in zip(ints, ints[1:]))
    if gp.get("profile_continuous_steps") is True and consecutive and runtime == "verl":
        out.append(doc.finding(
            "steps-continuous", W, "with profile_continuous_steps: True, verl 0.9.1 keeps one session across "
            "consecutive steps and tags them all with the first step's number (step 2 lands in step_1/)",
            GP + ("profile_continuous_steps",),
            hint="set profile_continuous_steps: False, or run this package's runtime profiler "
                 f"(ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={RUNTIME_HOOK})"))
    return out


def _int_hint(s) -> str:
    if isinstance(s, float) and s.is_integer():
        return f": {int(s)}"
    if isinstance(s, str) and s.strip().isdigit():
        try:  # '²'.isdigit() is True but int('²') fails; so does a 5000-digit number
            return f": {int(s)} (unquoted)"
        except ValueError:
            return ""
    return ""


def _roles(doc, data, options, tc):
    """Role profiler sections: key checks, enable flags, role-level overrides of the tool config."""
    out = []
    roles: dict[str, bool] = {}
    for rp in _role_paths(options):
        section = get(data, rp)
        name = ".".join(rp)
        if section is None:
            roles[name] = False
            continue
        if not isinstance(section, dict):
            out.append(doc.finding("value-type", E, f"{name} must be a mapping", rp))
            roles[name] = False
            continue
        out += _unknown_keys(doc, section, rp, ROLE_PROFILER_KEYS, "key-unknown", E,
                             "verl builds ProfilerConfig from this section and fails on unknown keys")
        enable = section.get("enable", False)
        if is_unknown(enable):
            roles[name] = True
        elif not isinstance(enable, bool):
            out.append(doc.finding("value-type", E, f"{name}.enable must be a boolean, got {enable!r}",
                                   rp + ("enable",), hint="enable: True (unquoted)"))
            roles[name] = False
        else:
            roles[name] = enable
        if not roles[name] or name.endswith(".rollout.profiler"):
            continue
        if section.get("all_ranks") is True or section.get("ranks"):
            key = "ranks" if section.get("ranks") else "all_ranks"
            out.append(doc.finding(
                "role-key", W, f"{name}.{key} is ignored by precision_debugger: every rank of an enabled role "
                "is profiled", rp + (key,), key=True,
                hint="filter ranks with msprobe's `rank` in config.json"))
        rtool = section.get("tool", TOOL)
        if rtool not in (None, TOOL) and not is_unknown(rtool) and not _is_default_interp(rtool):
            out.append(doc.finding("role-key", E, f"{name}.tool is {rtool!r}: this role does not run "
                                   "precision_debugger", rp + ("tool",), hint="remove the role's tool key"))
        rpd = get(section, ("tool_config", "precision_debugger"))
        if isinstance(rpd, dict):
            out += _role_pd(doc, rpd, rp + ("tool_config", "precision_debugger"), tc)
        rsave = section.get("save_path")
        if isinstance(rsave, str) and not _is_default_interp(rsave) and rsave != tc.save_path:
            if tc.save_path_at == GP + ("save_path",):
                tc.save_path, tc.save_path_at = rsave, rp + ("save_path",)
    return roles, out


def _role_pd(doc, rpd, at, tc):
    """A role's own tool_config.precision_debugger is what its worker reads."""
    out = []
    for k, v in rpd.items():
        if k not in PD_KEYS:
            out.append(doc.finding("key-unknown", E, f"unknown key '{k}': the worker instantiates "
                                   "PrecisionDebuggerToolConfig from this section and fails on it", at + (k,),
                                   key=True, hint=f"remove it{did_you_mean(str(k), sorted(PD_KEYS))}"))
    for k in ("config_path", "stages"):
        v = rpd.get(k)
        if v is not None and not _is_default_interp(v) and v != getattr(tc, k):
            if getattr(tc, k) is None:
                setattr(tc, k, v)
                setattr(tc, k + "_at", at + (k,))
            else:
                out.append(doc.finding("role-key", W, f"{'.'.join(map(str, at))}.{k} differs from "
                                       f"global_profiler's: this role uses {v!r}", at + (k,),
                                       hint="set it once, under global_profiler.global_tool_config"))
    return out


def _config_path_shape(doc, tc):
    v = tc.config_path
    if is_unknown(v):
        return [doc.finding("interpolation", W, f"config_path {str(v)!r} cannot be resolved here "
                            f"({v.reason}); it is not checked", tc.config_path_at,
                            hint="make sure it resolves inside the Ray workers")]
    if v is None or v == "":
        return [doc.finding(
            "config-path-missing", E, "precision_debugger is selected but config_path is not set: verl 0.9.1 "
            "silently collects nothing, even with strict: True", tc.config_path_at, key=True,
            hint="+global_profiler.global_tool_config.precision_debugger.config_path=/path/to/config.json")]
    if not isinstance(v, str):
        return [doc.finding("config-path-type", E, f"config_path must be a string, got {v!r}: verl asserts "
                            "`config_path must be str`", tc.config_path_at,
                            hint="config_path: /path/to/config.json (one path, not a list or mapping)")]
    return []


def _stages(doc, tc, options, runtime, in_use):
    """Stage list checks; returns findings and the stages that will be collected."""
    out = []
    at = tc.stages_at
    target = options.target
    stages = tc.stages
    collectable = set(target.fired) | (set(target.aliases.values()) if runtime == "pdbg" else set())
    unused = {s for s, info in STAGES.items() if in_use.get(info.role) is False}
    collectable -= unused
    if is_unknown(stages):
        return out, set(STAGES)
    if stages is None:
        return out, set(STAGES) & collectable
    if not isinstance(stages, list):
        out.append(doc.finding("stages-type", E, f"stages must be a list of stage names, got {stages!r}: verl "
                               "asserts `stages must be list[str]`", at,
                               hint=f"stages: [{stages}]" if isinstance(stages, str) else "stages: [actor_update]"))
        return out, set()
    if not stages:
        out.append(doc.finding("stages-empty", E, "stages: [] collects nothing (null collects every stage)", at,
                               hint="list the stages to collect, or remove the key to collect all"))
        return out, set()
    seen: dict = {}
    selected = set()
    known = sorted(STAGES)
    for i, s in enumerate(stages):
        p = at + (i,)
        if is_unknown(s):
            continue
        if not isinstance(s, str):
            out.append(doc.finding("stages-type", E, f"stage {s!r} is not a string", p))
            continue
        if s in seen:
            out.append(doc.finding("stage-duplicate", W, f"stage '{s}' is listed twice (first at index "
                                   f"{seen[s]})", p, hint="remove the duplicate"))
            continue
        seen[s] = i
        if s in IGNORED_STAGES and runtime == "pdbg":
            tc.rollout = True  # this package's runtime collects it inside vLLM (checks/rollout.py)
        elif s in IGNORED_STAGES:
            out.append(doc.finding("stage-ignored", W, f"'{s}' is never collected: verl's precision_debugger "
                                   "skips rollout generation on purpose", p,
                                   hint="remove it, or run this package's runtime, which collects it inside vLLM: "
                                        "+profiler=precision_debugger_rollout (or ray_kwargs.ray_init.runtime_env."
                                        f"worker_process_setup_hook={RUNTIME_HOOK} and the rollout settings in "
                                        f"env_vars.{ROLLOUT_ENV})"))
        elif s not in STAGES:
            crash = " With strict: True the workers raise ValueError at start." if tc.strict else ""
            out.append(doc.finding("stage-unknown", E, f"unknown stage '{s}': it is never collected.{crash}", p,
                                   hint=f"one of {', '.join(STAGES)}{did_you_mean(s, known)}"))
        elif s in unused:
            role = STAGES[s].role
            why = ("no reference policy runs: actor_rollout_ref.actor.use_kl_loss and algorithm.use_kl_in_reward "
                   "are both False" if role == "ref" else
                   "no critic runs: critic.enable is False, or unset with algorithm.adv_estimator other than gae")
            out.append(doc.finding("stage-not-run", W, f"stage '{s}' is never collected: {why}", p,
                                   hint="remove it, or enable the role it needs"))
        elif s not in collectable:
            why = (f"{target.label or 'verl ' + target.version}'s workers never run a stage named '{s}'")
            alias = next((a for a, st in target.aliases.items() if st == s), None)
            hint = "remove it"
            if alias:
                why += f" (the critic's update runs as '{alias}')"
                hint = (f"run this package's runtime profiler, which collects '{alias}' as '{s}': "
                        f"ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={RUNTIME_HOOK}")
            else:  # read off its code: no worker method carries the annotation
                why += " (no worker method of it is annotated with it): the stage never fires"
            out.append(doc.finding("stage-not-run", W, f"stage '{s}' is never collected: {why}", p, hint=hint))
        else:
            selected.add(s)
    if stages and not selected and not tc.rollout and not any(f.severity is E for f in out):
        out.append(doc.finding("stage-not-run", E, f"none of the selected stages is ever collected on "
                               f"{target.label or 'verl ' + target.version}: the run collects nothing", at,
                               hint=f"select one of {', '.join(sorted(collectable))}"))
    return out, selected


def _gating(doc, data, options, tc, selected, roles, runtime):
    out = []
    target = options.target
    hybrid = get(data, ("actor_rollout_ref", "hybrid_engine"), True) is not False
    needed: dict[str, list[str]] = {}
    for s in sorted(selected, key=list(STAGES).index):
        needed.setdefault(gate_for(s, target, hybrid), []).append(s)
    explicit = isinstance(tc.stages, list)
    for gate, stages in needed.items():
        if roles.get(gate):
            continue
        if explicit:
            for s in stages:
                i = tc.stages.index(s)
                out.append(doc.finding(
                    "role-disabled", E, f"stage '{s}' is selected but {gate}.enable is not True: "
                    f"{'in hybrid mode ' if hybrid and gate.startswith('actor_rollout_ref.actor') else ''}"
                    "that profiler gates it, so it is never collected", tc.stages_at + (i,),
                    hint=f"{gate}.enable=True"))
    if not explicit and not any(roles.get(g) for g in needed):
        out.append(doc.finding(
            "role-disabled", E, "no role profiler that gates a collectable stage is enabled: nothing is "
            "collected", GP + ("tool",),
            hint="actor_rollout_ref.actor.profiler.enable=True" + (" (it gates the ref stage too in hybrid mode)"
                                                                  if hybrid else "")))
    for name, enabled in roles.items():
        if not enabled or name.endswith(".rollout.profiler"):
            continue
        gates = [s for g, ss in needed.items() if g == name for s in ss]
        if name == "critic.profiler":
            if roles_in_use(data)["critic"] is False:
                out.append(doc.finding("role-unused", W, "critic.profiler.enable is True but no critic runs "
                                       "in this configuration", split(name) + ("enable",),
                                       hint="leave it disabled"))
                continue
            if runtime == "verl":
                sev = E if tc.strict else W
                msg = ("the critic's update runs as 'train_batch', which verl 0.9.1's precision_debugger does "
                       "not know: " + ("with strict: True the critic update raises ValueError"
                                       if tc.strict else "each critic mini-batch logs 'Unknown precision_debugger "
                                       "stage: train_batch' and nothing is collected for the critic"))
                out.append(doc.finding("stage-strict-crash" if tc.strict else "role-unused", sev, msg,
                                       split(name) + ("enable",),
                                       hint=f"disable the critic profiler, or run this package's runtime profiler "
                                            f"({RUNTIME_HOOK}), which collects it as critic_update"))
                continue
        if not gates and selected:
            why = ("in hybrid mode the actor's profiler gates the ref stage"
                   if hybrid and name == "actor_rollout_ref.ref.profiler" else "none of the selected stages uses it")
            sev = I if hybrid and name == "actor_rollout_ref.ref.profiler" else W  # harmless, the guide sets it
            out.append(doc.finding("role-unused", sev, f"{name}.enable is True but {why}",
                                   split(name) + ("enable",), hint="leave it disabled, or select its stages"))
    return out


def _save_path(doc, tc, options: Options | None = None):
    out = []
    sp = tc.save_path
    if is_unknown(sp):
        return out
    if sp is None or sp == "":
        out.append(doc.finding("save-path", W, f"save_path is empty: verl's precision_debugger writes under "
                               f"'{DEFAULT_SAVE_PATH}' instead", tc.save_path_at, key=True,
                               hint="set global_profiler.save_path"))
        return out
    if not isinstance(sp, str):
        out.append(doc.finding("save-path", E, f"save_path must be a string, got {_short(sp)}", tc.save_path_at,
                               hint="save_path: outputs/profile"))
        return out
    if not re.match(DUMP_PATH_CHARS, sp):
        bad = sorted(c for c in set(sp) if not re.match(DUMP_PATH_CHARS, c))
        out.append(doc.finding(
            "save-path", E, f"save_path {_short(sp)} has characters msprobe refuses in a dump path "
            f"({''.join(bad[:20])!r}): the first start() fails and nothing is collected", tc.save_path_at,
            hint="use only letters, digits and _ . : / -"))
        return out
    base = options.base_dir if options is not None else os.getcwd()
    try:
        out += _save_path_on_disk(doc, tc, sp, base)
    except (OSError, ValueError):  # a path the OS cannot even look at: makedirs fails the same way
        pass
    return out


def _short(v, n: int = 120) -> str:
    text = repr(v) if not isinstance(v, int) or v.bit_length() < 1000 else f"an integer of {v.bit_length()} bits"
    return text if len(text) <= n else text[:n] + f"... ({len(text)} characters)"


def _save_path_on_disk(doc, tc, sp: str, base: str) -> list[Finding]:
    """What this machine's file system says about save_path: msprobe checks the *real*
    absolute path of every dump directory against its character pattern, and verl runs
    os.makedirs(<save_path>/step_<N>/<stage>) in each worker. A relative save_path resolves
    against each worker's working directory; the launch directory (base_dir) stands in for it."""
    out = []
    resolved = sp if os.path.isabs(sp) else os.path.join(base, sp)
    shown = _short(sp) if resolved == sp else f"{_short(sp)} (resolved against {base})"
    if len(resolved) > 4096 or any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in resolved.split("/")):
        return [doc.finding(
            "save-path", E, f"save_path {shown} is too long: msprobe refuses dump paths over 4096 characters "
            "and the file system names over 255 bytes", tc.save_path_at, hint="use a shorter save_path")]
    real = os.path.realpath(resolved)
    if not re.match(DUMP_PATH_CHARS, real):
        bad = sorted(c for c in set(real) if not re.match(DUMP_PATH_CHARS, c))
        why = ("the launch directory" if resolved != sp and not re.match(DUMP_PATH_CHARS, base)
               else "a symbolic link on the way")
        out.append(doc.finding(
            "save-path", W, f"save_path {shown} resolves to {_short(real)}, which has characters msprobe refuses "
            f"({''.join(bad[:20])!r}, from {why}): msprobe checks the real absolute path, so the first start() "
            "fails and nothing is collected", tc.save_path_at,
            hint="use an absolute save_path of letters, digits and _ . : / -, or launch from a directory whose "
                 "path has only those characters"))
    cur = real
    while True:  # the deepest part of the path that exists
        try:
            st = os.stat(cur)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(cur)
            if parent == cur:
                return out
            cur = parent
        except OSError as e:  # a symlink loop, a parent this user cannot search
            out.append(doc.finding(
                "save-path", E, f"save_path {shown} cannot be used: {cur}: {e.strerror or e}; verl's os.makedirs "
                "fails and nothing is collected", tc.save_path_at, hint="use a directory this user can create"))
            return out
    if not stat.S_ISDIR(st.st_mode):
        what = "file" if stat.S_ISREG(st.st_mode) else "special file"
        msg = (f"save_path {shown} names an existing {what}, not a directory" if cur == real
               else f"save_path {shown} cannot be created: {cur} is a {what}")
        out.append(doc.finding(
            "save-path", E, f"{msg}: verl cannot create step_<N>/<stage> directories under it and nothing is "
            "collected", tc.save_path_at, hint="point save_path at a directory, or at a path that does not exist yet"))
    elif not os.access(cur, os.W_OK | os.X_OK):
        if cur == real:
            out.append(doc.finding(
                "save-path", E, f"save_path {shown} is a directory this user cannot write: verl cannot create "
                "step_<N>/ under it and nothing is collected", tc.save_path_at,
                hint="make it writable for the user that runs the job, or choose another save_path"))
        else:
            out.append(doc.finding(
                "save-path", W, f"save_path {shown} does not exist and cannot be created on this machine: "
                f"{cur} is not writable for this user", tc.save_path_at,
                hint="create it beforehand, or check the path on the machines that run the job"))
    return out
