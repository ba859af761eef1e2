"""What a run will write, before it runs: each `step_N/stage` directory (the stages the target
verl collects, gated by the role profilers), the ranks msprobe dumps, and an estimate of disk
use and profiled-step time (estimate.py). Data in, data out; rendering at the bottom."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.document import Document, get, is_unknown
from verl_pdbg_conf.verl_facts.stages import ROLLOUT_ENV, ROLLOUT_ENV_AT, ROLLOUT_STAGE

# The order verl's trainer runs the stages within a step: generation, reward scoring, old log prob,
# ref log prob, critic values, critic update, actor update (trainer/ppo/v1/trainer_base.py).
RUN_ORDER = ("rollout_generate", "compute_rm_score", "actor_compute_log_prob", "ref_compute_log_prob",
             "compute_values", "critic_update", "actor_update")
MSPROBE_LEAF = "step0/rank{rank}/dump.json"  # msprobe's own layout inside a stage directory
# rollout_generate: one msprobe step per vLLM engine step (step0 the prefill, step1.. the decode steps)
ROLLOUT_LEAF = "step<K>/rank{rank}/dump.json"


def gate_text(gate: str) -> str:
    """What decides a stage: a role profiler's enable flag, or (rollout_generate) the environment
    variable that hands the settings to this package's vLLM plugin."""
    return gate if gate.endswith(ROLLOUT_ENV) else gate + ".enable"


@dataclass
class Plan:
    source: str
    save_path: str
    save_path_relative: bool
    steps: list[int]  # profiled trainer steps
    stages: list[str]  # collected, in run order
    gates: dict[str, str]  # stage -> role profiler section that gates it
    dirs: list[str]  # step_N/stage, relative to save_path
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (step_N/stage, why not written)
    ranks: list[int] | None = None  # None: every rank
    world_size: int | None = None
    config_json: str | None = None
    level: str = "L1"
    task: str = "statistics"
    runtime: str = "verl"
    notes: list[str] = field(default_factory=list)
    estimate: object = None  # estimate.Estimate
    stages_known: bool = True
    not_collected: list[str] = field(default_factory=list)  # named in `stages` but never written

    def stage_dir(self, rel: str) -> str:
        return os.path.join(self.save_path, rel)


class NotPlannable(Exception):
    """The config does not run precision_debugger (or not with values known before the run)."""


def build_plan(doc: Document, options: Options, params=None, source: str | None = None) -> Plan:
    """The plan for a validated config. `params`: an estimate.Params, or None to look at the
    actor's model path (a local HF directory, or a size in its name)."""
    from verl_pdbg_conf.checks.verl_profiler import check_verl_config

    _, tc = check_verl_config(doc, options)
    if tc is None:
        raise NotPlannable("global_profiler.tool is not precision_debugger: the run writes no dumps")
    data = doc.data
    gp = data.get("global_profiler") or {}
    steps_raw = gp.get("steps")
    if is_unknown(steps_raw) or not isinstance(steps_raw, list):
        raise NotPlannable(f"global_profiler.steps is {steps_raw!r}: the profiled steps are not known before the run")
    total = get(data, ("trainer", "total_training_steps"))
    steps = sorted({s for s in steps_raw if isinstance(s, int) and not isinstance(s, bool) and s >= 1
                    and not (isinstance(total, int) and s > total)})
    runtime, gates = tc.runtime, tc.gates
    stages = [s for s in RUN_ORDER if s in tc.collected]
    gates = dict(gates)
    if tc.rollout and isinstance(get(data, ROLLOUT_ENV_AT), str):  # collected inside vLLM (checks/rollout.py)
        stages.insert(0, ROLLOUT_STAGE)
        gates[ROLLOUT_STAGE] = ".".join(ROLLOUT_ENV_AT)
    named = tc.stages if isinstance(tc.stages, list) else []
    not_collected = [s for s in named if isinstance(s, str) and s not in stages]
    save_path = tc.save_path if isinstance(tc.save_path, str) and tc.save_path else "outputs/profile"
    plan = Plan(source or doc.file, str(save_path), not os.path.isabs(str(save_path)), steps, stages,
                {s: gates[s] for s in stages}, [], runtime=runtime, stages_known=not is_unknown(tc.stages))
    plan.not_collected = list(dict.fromkeys(not_collected))
    if ROLLOUT_STAGE in stages:
        plan.notes.append("rollout_generate is dumped inside vLLM, one msprobe step per engine step (the prefill, "
                          "then one per decoded token, up to actor_rollout_ref.rollout.response_length), by the "
                          "vLLM engine's ranks; the estimate counts it as one forward")
    if is_unknown(save_path):
        plan.notes.append(f"save_path {save_path!r} is not known before the run ({save_path.reason})")
    if plan.save_path_relative:
        plan.notes.append("save_path is relative: each Ray worker resolves it against its own working directory")

    tags = _step_tags(steps, gp.get("profile_continuous_steps") is True and runtime == "verl"
                      and options.target.continuous_tag_bug)
    warmup = get(data, ("trainer", "critic_warmup"), 0)
    for step in steps:
        tag = tags[step]
        for s in stages:
            rel = f"step_{tag}/{s}"
            if s == "actor_update" and isinstance(warmup, int) and step < warmup:
                plan.skipped.append((f"step_{step}/{s}", f"trainer.critic_warmup={warmup}: the actor is not "
                                     f"updated before step {warmup}"))
                continue
            if tag != step:
                plan.skipped.append((f"step_{step}/{s}", f"profile_continuous_steps: verl {options.target.version} "
                                     f"writes step {step} into step_{tag}/"))
            if rel not in plan.dirs:
                plan.dirs.append(rel)

    nnodes, ngpus = get(data, ("trainer", "nnodes")), get(data, ("trainer", "n_gpus_per_node"))
    if isinstance(nnodes, int) and isinstance(ngpus, int) and not isinstance(nnodes, bool):
        plan.world_size = nnodes * ngpus
    _msprobe_config(plan, tc, options)
    if params is None:
        params = _model_params(doc, options)
    from verl_pdbg_conf.run.calls import stage_calls
    from verl_pdbg_conf.run.estimate import estimate

    calls = {s: stage_calls(data, s, plan.world_size) for s in stages}
    n_ranks = len(plan.ranks) if plan.ranks is not None else plan.world_size
    if plan.ranks is not None and plan.world_size:
        n_ranks = len([r for r in plan.ranks if r < plan.world_size])
    plan.estimate = estimate(plan.level, plan.task, stages, len(steps), n_ranks, params, calls)
    if plan.estimate.available and plan.estimate.total_mb is not None:
        mb = {x.stage: x.mb_per_step for x in plan.estimate.stages}  # the directories actually written
        plan.estimate.total_mb = tuple(sum(mb[d.split("/", 1)[1]][i] for d in plan.dirs) * (n_ranks or 1)
                                       for i in (0, 1))
    return plan


def _step_tags(steps: list[int], continuous: bool) -> dict[int, int]:
    tags, start = {}, None
    for i, s in enumerate(steps):
        if continuous and i and steps[i - 1] == s - 1 and start is not None:
            tags[s] = start
        else:
            start = s
            tags[s] = s
    return tags


def _msprobe_config(plan: Plan, tc, options: Options) -> None:
    path = tc.config_path
    if not isinstance(path, str) or is_unknown(path):
        plan.notes.append("config.json is not known before the run: level L1, task statistics and all ranks "
                          "(msprobe's defaults) are assumed")
        return
    resolved = path if os.path.isabs(path) else os.path.join(options.base_dir, path)
    plan.config_json = resolved
    try:
        with open(resolved, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        plan.notes.append(f"{resolved} cannot be read: msprobe's defaults (L1, statistics, all ranks) assumed")
        return
    if not isinstance(cfg, dict):
        return
    plan.level = cfg.get("level", "L1") if isinstance(cfg.get("level", "L1"), str) else "L1"
    plan.task = cfg.get("task", "statistics") if isinstance(cfg.get("task", "statistics"), str) else "statistics"
    plan.ranks = parse_ids(cfg.get("rank"))
    if plan.ranks is not None and plan.world_size:
        beyond = [r for r in plan.ranks if r >= plan.world_size]
        if beyond:
            plan.notes.append(f"config.json rank {beyond} is beyond the world size {plan.world_size} "
                              f"(trainer.nnodes x trainer.n_gpus_per_node): never dumped")
    steps = parse_ids(cfg.get("step"))
    if steps is not None and 0 not in steps:
        plan.notes.append(f"config.json step {cfg.get('step')} leaves out msprobe's step 0, the only step of each "
                          "per-stage session under verl: nothing is dumped")
    if cfg.get("dump_enable") is False:
        plan.notes.append("config.json dump_enable is false: nothing is dumped until it is set to true")


def parse_ids(value) -> list[int] | None:
    """msprobe's rank/step list: ints and "N" / "A-B" strings; [] or absent -> None (all)."""
    if not isinstance(value, list) or not value:
        return None
    out: set[int] = set()
    for item in value:
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            out.add(item)
        elif isinstance(item, str):
            lo, _, hi = item.partition("-")
            try:
                a, b = int(lo), int(hi or lo)
            except ValueError:
                continue
            out.update(range(a, b + 1))
    return sorted(out)


MODEL_PATH = ("actor_rollout_ref", "model", "path")


def _model_params(doc: Document, options: Options):
    """The actor's model size, from its path; a Params without a count (and why) when there is none:
    a value verl's own defaults set is verl's placeholder, never the user's model."""
    from verl_pdbg_conf.run.estimate import BASIS_MODEL, Params, params_from_name, params_from_path

    key = ".".join(MODEL_PATH)
    path = get(doc.data, MODEL_PATH)
    if not isinstance(path, str) or is_unknown(path) or not path:
        return Params(None, f"no model given ({key} is not set): figures are for {BASIS_MODEL}")
    if doc.origin(MODEL_PATH)[0].startswith("<verl:"):
        return Params(None, f"no model given ({key} is verl's placeholder {path!r}): figures are for {BASIS_MODEL}")
    local = os.path.expanduser(path)
    if not os.path.isabs(local):
        local = os.path.join(options.base_dir, local)
    if os.path.isdir(local):
        p = params_from_path(local, key)
        if p is not None:
            return p
    return params_from_name(path) or Params(
        None, f"the size of {key} {path!r} is not known here (not a local model directory with a config.json, "
              f"no size in its name): figures are for {BASIS_MODEL}")


# ----------------------------------------------------------------------------- rendering

def as_dict(plan: Plan) -> dict:
    from verl_pdbg_conf.run.estimate import as_dict as est_dict

    return {
        "source": plan.source,
        "save_path": plan.save_path,
        "steps": plan.steps,
        "stages": [{"stage": s, "gated_by": gate_text(plan.gates[s])} for s in plan.stages],
        "stages_known": plan.stages_known,
        "named_but_not_collected": plan.not_collected,
        "directories": [f"{plan.save_path.rstrip('/')}/{d}" for d in plan.dirs],
        "not_written": [{"directory": d, "why": why} for d, why in plan.skipped],
        "msprobe_layout": MSPROBE_LEAF,
        "ranks": plan.ranks if plan.ranks is not None else "all",
        "world_size": plan.world_size,
        "config_json": plan.config_json,
        "level": plan.level,
        "task": plan.task,
        "runtime": plan.runtime,
        "notes": plan.notes,
        "estimate": est_dict(plan.estimate) if plan.estimate is not None else None,
    }


def render_text(plan: Plan) -> str:
    L = [f"plan for {plan.source}"]
    L.append(f"  profiled steps: {', '.join(map(str, plan.steps)) or 'none'}")
    if plan.stages:
        L.append("  stages (in run order):")
        for s in plan.stages:
            L.append(f"    {s:24} gated by {gate_text(plan.gates[s])}")
    else:
        L.append("  stages: none is collected")
    if plan.not_collected:
        L.append(f"  named but never collected (see the findings): {', '.join(plan.not_collected)}")
    ranks = ("all ranks (config.json rank: [])" if plan.ranks is None else
             f"ranks {', '.join(map(str, plan.ranks))} (config.json rank)")
    if plan.ranks is None and plan.world_size:
        ranks += f": 0..{plan.world_size - 1} (trainer.nnodes x trainer.n_gpus_per_node = {plan.world_size})"
    L.append(f"  msprobe dumps: {ranks}; level {plan.level}, task {plan.task}"
             + (f" ({plan.config_json})" if plan.config_json else ""))
    L.append(f"  writes under {plan.save_path}/ ({len(plan.dirs)} stage directories, each with msprobe's "
             f"{MSPROBE_LEAF.format(rank='<R>')}):")
    for d in plan.dirs:
        L.append(f"    {d}/" + (f" (msprobe's {ROLLOUT_LEAF.format(rank='<R>')}: one step per vLLM engine step)"
                               if d.endswith("/" + ROLLOUT_STAGE) else ""))
    for d, why in plan.skipped:
        L.append(f"    ({d}: not written: {why})")
    for n in plan.notes:
        L.append(f"  note: {n}")
    L += _render_estimate(plan)
    return "\n".join(L) + "\n"


def _render_estimate(plan: Plan) -> list[str]:
    est = plan.estimate
    if est is None:
        return []
    L = ["  ESTIMATE (not a measurement):",
         "    basis: a stage writes calls x (per call + per layer x layers); fitted on verl's trainer, or "
         f"{est.basis}"]
    if est.params.layers:
        L.append(f"    model: {est.params.layers} layers from {est.params.source}")
    elif est.params.count:
        L.append(f"    model: {est.params.count / 1e9:.2f}B parameters from {est.params.source}; its layers are "
                 "not known, and the dump grows with layers, not parameters: give the model's directory "
                 "(--params /path/to/hf_model)")
    else:
        L.append(f"    model: {est.params.source}; give yours with {'.'.join(MODEL_PATH)}=/path/to/hf_model, "
                 "or --params /path/to/hf_model")
    if not est.available:
        L += [f"    {n}" for n in est.notes]
        return L
    for s in est.stages:
        lo, hi = s.mb_per_step
        L.append(f"    {s.stage:24} {_mb(lo, hi)} per step per rank, {s.extra_s[0]:.1f}-{s.extra_s[1]:.1f} s extra "
                 f"({s.basis})")
    lo, hi = est.total_mb
    who = f"{est.ranks} rank(s)" if est.ranks else "per rank"
    L.append(f"    disk: about {_mb(lo, hi)} in total ({len(plan.dirs)} stage directories, {who})")
    ilo, ihi = est.inflation_at_basis
    elo, ehi = est.extra_s_per_step
    extra = (f"about {elo:.1f}-{ehi:.1f} s extra per profiled step (the MB written from the fastest CPU rate "
             "measured here to the guide's Ascend rate)")
    if est.inflation_measured:
        L.append(f"    time: a profiled step took {ilo:.1f}x-{ihi:.1f}x a normal step at the basis (measured); {extra}")
    else:
        from verl_pdbg_conf.run.estimate import MEASURED_STAGES

        measured = " and ".join(f"{lv} {lo:.1f}x-{hi:.1f}x ({', '.join(MEASURED_STAGES[lv])})"
                                for lv, (lo, hi) in est.measured_inflation.items())
        L.append(f"    time: about {ilo:.1f}x-{ihi:.1f}x a normal step at the basis for these stages, shared out by "
                 f"dump volume from the guide's measured {measured}; {extra}")
    L += [f"    {n}" for n in est.notes]
    return L


def _mb(lo: float, hi: float) -> str:
    def one(v):
        return f"{v / 1024:.1f} GB" if v >= 1024 else f"{v:.1f} MB"
    return one(lo) if abs(hi - lo) < 0.05 * max(hi, 1e-9) else f"{one(lo)}-{one(hi)}"
