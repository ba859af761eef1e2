"""Estimates of disk use and profiled-step time.

msprobe writes one set of records per forward (and backward) call of the model, so a stage's dump grows
with its calls per step and the model's layers, not with its parameter count. Where both are known (verl's
config, the model's config.json), a stage's MB is calls x (per call + per layer x layers), fitted on verl's
own trainer (cost_basis.json, written by bench/verl_trainer_cost.py --fit); otherwise the guide's measured
figures for Qwen2-0.5B are shown as they are. Extra seconds follow the MB written, at the rate measured on
CPU here and the rate of the guide's Ascend run. These are estimates, labelled with their basis.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources

from verl_pdbg_conf.core.hf_config import num_experts

BASIS_MODEL = "Qwen2-0.5B"
BASIS_RUN = "the guide's measured PPO run on Ascend: Qwen2-0.5B, profiled steps [1, 2], rank 0"
# Qwen2-0.5B's config.json, to count its parameters with the same formula as the user's model.
QWEN2_0_5B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "vocab_size": 151936,
              "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True}

# MB per profiled step, rank 0 (guide: Disk usage table): (low, high).
DISK_MB = {
    "L1": {"actor_update": (5.1, 5.2), "actor_compute_log_prob": (2.6, 2.6), "ref_compute_log_prob": (2.6, 2.6)},
    "L0": {"actor_update": (2.5, 2.5), "actor_compute_log_prob": (1.1, 1.1), "ref_compute_log_prob": (0.86, 0.87)},
}
# Stages the guide did not measure on disk, and the measured stage that does the same work.
ANALOGY = {"compute_values": "actor_compute_log_prob", "critic_update": "actor_update",
           "compute_rm_score": "actor_compute_log_prob"}

# Time overhead table: seconds per step.
BASELINE_S = 17.0  # "about 16-18 s/step in steady state"
PROFILED_S = {"L0": (48.78, 66.81), "L1": (161.80, 177.35)}
MEASURED_STAGES = {
    "L0": ("actor_compute_log_prob", "ref_compute_log_prob", "compute_values", "critic_update", "actor_update"),
    "L1": ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update"),
}


BASIS_LAYERS = QWEN2_0_5B["num_hidden_layers"]
# A stage's kind: a forward pass, a forward and backward pass, or vLLM's engine steps (what the fits are per).
KIND = {"actor_update": "forward_backward", "critic_update": "forward_backward", "rollout_generate": "engine"}
TENSOR_BYTES = 4  # the fit's runs are fp32; a bf16 run writes half


def _load_basis() -> dict:
    return json.loads(resources.files("verl_pdbg_conf.run").joinpath("cost_basis.json").read_text())


COST_BASIS = _load_basis()


def guide_seconds_per_mb(level: str) -> tuple[float, float]:
    """The guide's extra seconds of a profiled step over the MB its measured stages wrote (its Ascend run)."""
    mb = [sum(_stage_mb(level, s)[0][i] for s in MEASURED_STAGES[level]) for i in (0, 1)]
    return ((PROFILED_S[level][0] - BASELINE_S) / mb[1], (PROFILED_S[level][1] - BASELINE_S) / mb[0])


@dataclass
class Params:
    count: float | None  # None: unknown
    source: str  # how it was found
    layers: int | None = None  # decoder layers, from config.json
    hidden: int | None = None  # hidden size, from config.json: a tensor dump's size


@dataclass
class StageEstimate:
    stage: str
    mb_per_step: tuple[float, float]  # per rank
    basis: str  # "measured", "like <stage> (not measured)", or "fitted: ..."
    extra_s: tuple[float, float] = (0.0, 0.0)  # extra seconds on a profiled step: CPU rate, the guide's rate
    calls: int | None = None
    tokens: int | None = None


@dataclass
class Estimate:
    level: str
    task: str
    params: Params
    scale: float  # params / basis params
    stages: list[StageEstimate] = field(default_factory=list)
    steps: int = 0
    ranks: int | None = None  # None: per rank (the number of ranks is not known)
    total_mb: tuple[float, float] | None = None
    inflation_at_basis: tuple[float, float] | None = None  # profiled step / baseline step, basis model
    # the guide's own measured slowdown per level, for the stages it measured: {level: (lo, hi)}
    measured_inflation: dict = field(default_factory=dict)
    inflation_measured: bool = False  # True: these stages are the ones measured, at one level
    extra_s_per_step: tuple[float, float] | None = None  # extra seconds per profiled step, scaled
    notes: list[str] = field(default_factory=list)
    basis: str = BASIS_RUN
    available: bool = True  # False: no measured figures for this level/task


def params_from_hf_config(cfg: dict) -> float | None:
    """Parameter count of a decoder-only transformer from its HF config.json: embeddings,
    attention (grouped-query aware), gated MLP (or MoE experts), untied LM head."""
    cfg = dict(cfg.get("text_config") or {}, **{k: v for k, v in cfg.items() if k != "text_config"}) \
        if isinstance(cfg.get("text_config"), dict) and "hidden_size" not in cfg else cfg
    try:
        h = int(cfg["hidden_size"])
        n_layers = int(cfg["num_hidden_layers"])
        inter = int(cfg["intermediate_size"])
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    heads = cfg.get("num_attention_heads")
    if isinstance(heads, int) and heads > 0:
        head_dim = int(cfg.get("head_dim") or h // heads)
        kv = int(cfg.get("num_key_value_heads") or heads)
        attn = h * heads * head_dim * 2 + 2 * h * kv * head_dim
    else:
        attn = 4 * h * h
    experts = num_experts(cfg)
    if experts is not None and experts > 1:
        mlp = 3 * h * int(cfg.get("moe_intermediate_size") or inter) * experts
    else:
        mlp = 3 * h * inter
    embed = vocab * h
    head = 0 if cfg.get("tie_word_embeddings", False) else vocab * h
    return float(n_layers * (attn + mlp) + embed + head)


BASIS_PARAMS = params_from_hf_config(QWEN2_0_5B)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)\s*$", re.I)
_NAME_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.I)
_UNIT = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_params(value: str) -> Params | None:
    """`7e9`, `7B`, `0.5b`, `500M`, or a model directory / its config.json."""
    m = _SIZE.match(value or "")
    if m:
        return Params(float(m.group(1)) * _UNIT[m.group(2).lower()], f"--params {value}")
    return params_from_path(value, f"--params {value}")


def params_from_path(path: str, source: str) -> Params | None:
    """Parameters of an HF model directory (or its config.json file) when it exists here."""
    cfg_file = path if path.endswith(".json") else os.path.join(path, "config.json")
    try:
        with open(cfg_file, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    n = params_from_hf_config(cfg) if isinstance(cfg, dict) else None
    if n is None:
        return None
    text = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg else cfg
    layers, hidden = (text.get(k) for k in ("num_hidden_layers", "hidden_size"))

    def positive(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    return Params(n, f"{source}: {cfg_file} (num_hidden_layers, hidden_size, intermediate_size, vocab_size)",
                  positive(layers), positive(hidden))


def params_from_name(name: str) -> Params | None:
    """`Qwen/Qwen2.5-7B-Instruct` -> 7e9, from the size written in the model's name."""
    m = _NAME_SIZE.search(os.path.basename(str(name).rstrip("/")))
    if not m:
        return None
    return Params(float(m.group(1)) * _UNIT[m.group(2).lower()], f"the size in the model name {name!r}")


def _stage_mb(level: str, stage: str) -> tuple[tuple[float, float], str]:
    table = DISK_MB[level]
    if stage in table:
        return table[stage], "measured"
    like = ANALOGY.get(stage, "actor_compute_log_prob")
    return table[like], f"like {like} (not measured)"


def _levels(level: str) -> list[str] | None:
    if level in DISK_MB:
        return [level]
    if level == "mix":
        return ["L0", "L1"]
    return None


def _extra_s(level: str, stage: str, mb: tuple[float, float], tensor_mb: float = 0.0) -> tuple[float, float]:
    """A stage's extra seconds: its msprobe session (fitted on CPU per kind), the statistics it writes from the
    fastest rate measured on CPU up to the guide's Ascend rate, and tensor data at the rate fitted on CPU."""
    fit = COST_BASIS["levels"][level]
    cpu, (g_lo, g_hi) = fit["seconds_per_mb"], guide_seconds_per_mb(level)
    low = fit.get("seconds_per_mb_low", cpu)
    kind = KIND.get(stage, "forward")
    fixed = fit["seconds_per_stage"]["forward" if kind == "engine" else kind] \
        + tensor_mb * fit.get("seconds_per_tensor_mb", 0.0)
    return fixed + mb[0] * min(low, g_lo), fixed + mb[1] * max(cpu, g_hi)


def _fitted_mb(level: str, stage: str, calls: int, layers: int) -> float:
    """dump.json's statistics: per call, a fixed part and a part per layer (the engine's steps as forwards)."""
    kind = KIND.get(stage, "forward")
    fit = COST_BASIS["levels"][level]["forward" if kind == "engine" else kind]
    return calls * (fit["mb_per_call"] + fit["mb_per_layer_call"] * layers)


def _tensor_mb(level: str, stage: str, tokens: int, layers: int, hidden: int) -> float | None:
    """Task tensor's data files: hidden-sized tensors per layer and token, fitted per level and kind."""
    per = (COST_BASIS["levels"][level].get("tensor") or {}).get(KIND.get(stage, "forward"))
    return per * layers * tokens * hidden * TENSOR_BYTES / 1e6 if per is not None else None


def estimate(level: str, task: str, stages: list[str], steps: int, ranks: int | None,
             params: Params | None, calls: dict | None = None) -> Estimate:
    """`calls`: stage -> calls.Calls, from verl's config; with the model's layers they size each stage."""
    params = params or Params(None, f"not given: figures are for {BASIS_MODEL}")
    scale = params.count / BASIS_PARAMS if params.count else 1.0
    est = Estimate(level, task, params, scale, steps=steps, ranks=ranks)
    levels = _levels(level)
    if levels is None:
        est.available = False
        est.notes.append(f"level {level}: the guide has no measured figures for it"
                         + (" (L2 dumps kernels on Ascend NPUs only)" if level == "L2" else ""))
        return est
    if task not in ("statistics", "tensor"):
        est.notes.append(f"task {task}: the guide's figures are for statistics-style dumps; treat them as rough")
    spread = COST_BASIS["spread"]
    unsized, no_tensors = [], []
    for s in stages:
        c = (calls or {}).get(s)
        n, tokens = getattr(c, "count", None), getattr(c, "tokens", None)
        lo = hi = 0.0
        s_lo = s_hi = 0.0
        if n and params.layers:
            for lv in levels:
                mb, data = _fitted_mb(lv, s, n, params.layers), None
                if task == "tensor":
                    data = _tensor_mb(lv, s, tokens, params.layers, params.hidden) if tokens and params.hidden \
                        else None
                    if data is None:
                        no_tensors.append(s)
                lo, hi = lo + (mb + (data or 0.0)) / spread, hi + (mb + (data or 0.0)) * spread
                e = _extra_s(lv, s, (mb, mb), data or 0.0)
                s_lo, s_hi = s_lo + e[0], s_hi + e[1]
            basis = f"fitted: {n} call(s) x {params.layers} layers" + (
                f", tensors of {tokens} tokens x hidden {params.hidden}" if task == "tensor" and s not in no_tensors
                else "")
        else:
            basis = "measured"
            for lv in levels:
                (a, b), how = _stage_mb(lv, s)
                lo, hi = lo + a, hi + b
                e = _extra_s(lv, s, (a, b))
                s_lo, s_hi = s_lo + e[0], s_hi + e[1]
                if how != "measured":
                    basis = how
            unsized.append(s)
        est.stages.append(StageEstimate(s, (lo, hi), basis, (s_lo, s_hi), n, tokens))
    if task == "tensor" and (unsized or no_tensors):
        est.notes.append("task tensor also writes every tensor's data (dump_tensor_data/*.pt): for "
                         f"{', '.join(dict.fromkeys(unsized + no_tensors))} the figures count only dump.json's "
                         "statistics and are far too low")
    if unsized:
        why = "the model's layers are not known (give its directory)" if not params.layers else \
            "their calls per step are not known before the run"
        est.notes.append(f"{', '.join(unsized)}: the guide's figures for {BASIS_MODEL} ({BASIS_LAYERS} layers), "
                         f"as measured: {why}")
    per_step = (sum(x.mb_per_step[0] for x in est.stages), sum(x.mb_per_step[1] for x in est.stages))
    mult = steps * (ranks or 1)
    est.total_mb = (per_step[0] * mult, per_step[1] * mult)
    # the guide's slowdown at its basis, shared out among the selected stages by their dump volume
    extra_lo = extra_hi = 0.0
    for lv in levels:
        weight = {s: sum(_stage_mb(lv, s)[0]) for s in set(MEASURED_STAGES[lv]) | set(stages)}
        share = sum(weight[s] for s in stages) / sum(weight[s] for s in MEASURED_STAGES[lv])
        extra_lo += (PROFILED_S[lv][0] - BASELINE_S) * share
        extra_hi += (PROFILED_S[lv][1] - BASELINE_S) * share
    est.inflation_at_basis = (1 + extra_lo / BASELINE_S, 1 + extra_hi / BASELINE_S)
    est.measured_inflation = {lv: (PROFILED_S[lv][0] / BASELINE_S, PROFILED_S[lv][1] / BASELINE_S) for lv in levels}
    est.inflation_measured = len(levels) == 1 and set(stages) == set(MEASURED_STAGES[levels[0]])
    est.extra_s_per_step = (sum(x.extra_s[0] for x in est.stages), sum(x.extra_s[1] for x in est.stages))
    return est


def as_dict(est: Estimate) -> dict:
    return {
        "label": "estimate",
        "basis": est.basis,
        "level": est.level,
        "task": est.task,
        "parameters": est.params.count,
        "parameters_source": est.params.source,
        "scale": round(est.scale, 3),
        "available": est.available,
        "stages": [{"stage": s.stage, "mb_per_step_per_rank": [round(v, 3) for v in s.mb_per_step],
                    "calls_per_step_per_rank": s.calls, "tokens_per_step_per_rank": s.tokens,
                    "extra_seconds": [round(v, 2) for v in s.extra_s],
                    "basis": s.basis} for s in est.stages],
        "layers": est.params.layers,
        "hidden_size": est.params.hidden,
        "extra_seconds_basis": f"MB written x {COST_BASIS['source_rate']} to x the guide's Ascend rate",
        "profiled_steps": est.steps,
        "ranks": est.ranks,
        "total_mb": [round(v, 1) for v in est.total_mb] if est.total_mb else None,
        "total_is_per_rank": est.ranks is None,
        "profiled_step_slowdown_at_basis": [round(v, 1) for v in est.inflation_at_basis]
        if est.inflation_at_basis else None,
        "profiled_step_slowdown_measured": est.inflation_measured,
        "guide_measured_slowdown": {lv: {"stages": list(MEASURED_STAGES[lv]), "slowdown": [round(v, 1) for v in r]}
                                    for lv, r in est.measured_inflation.items()},
        "extra_seconds_per_profiled_step": [round(v, 1) for v in est.extra_s_per_step]
        if est.extra_s_per_step else None,
        "notes": est.notes,
    }
