"""Rules for collecting `rollout_generate` (the vLLM engine's steps) beside the trainer's stages with
this package's runtime, judged by what verl and vLLM do with the rollout's settings. They run only
when the stage is selected and this package's runtime is in the workers (verl's own backend skips
the stage: `stage-ignored`).

What they rest on (verl main 1dda039b9 / 0.9.1, vLLM 0.32.0):
- verl's vLLM server passes `dtype`, `logprobs_mode` and `enforce_eager` from
  actor_rollout_ref.rollout to vLLM, then `**engine_kwargs` (rollout.engine_kwargs.vllm, None values
  dropped) over them (workers/rollout/vllm_rollout/vllm_async_server.py: launch_server).
- vLLM's enforce_eager turns torch.compile and CUDA graphs off (vllm/config/vllm.py: mode NONE,
  cudagraph_mode NONE); otherwise hooks on the model's modules miss the captured kernels.
- The agent loop asks vLLM for log-probs only with rollout.calculate_log_probs
  (`logprobs=config.calculate_log_probs`), and the trainer logs training/rollout_probs_diff_* only then.
- vLLM's logprobs_mode: raw_* before temperature, processed_* after temperature and top-k/top-p
  (vllm/config/model.py, vllm/v1/sample/sampler.py); a greedy batch (temperature < 1e-5) returns
  the untempered log-probs. verl's actor divides the logits by rollout.temperature (clamped at 1e-8)
  and applies no top-k/top-p.
- The actor's forward dtype: FSDP engines autocast to fsdp_config.mixed_precision.param_dtype (bf16
  when unset), Megatron runs in megatron.dtype.
"""

from __future__ import annotations

import json
import os

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.document import Document, get, is_unknown
from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.verl_facts.stages import ROLLOUT_ENV, ROLLOUT_ENV_AT, ROLLOUT_STAGE

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO
ROLLOUT = ("actor_rollout_ref", "rollout")
ACTOR = ("actor_rollout_ref", "actor")
VLLM_KWARGS = ROLLOUT + ("engine_kwargs", "vllm")
SAMPLING_EPS = 1e-5  # vLLM's _SAMPLING_EPS: below it a request is greedy

# Spellings of one dtype in verl (PrecisionType) and vLLM (ModelDType) -> one name.
_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16", "half": "float16",
           "16": "float16", "fp32": "float32", "float32": "float32", "float": "float32", "32": "float32"}


def _known(v) -> bool:
    return v is not None and not is_unknown(v) and not (isinstance(v, str) and v.strip() == "???")


def _effective(data, key: str):
    """(value, path) of a vLLM engine argument verl builds from rollout.<key>: an engine_kwargs.vllm
    value that is not None wins (it is spread after verl's own arguments)."""
    kw = get(data, VLLM_KWARGS + (key,))
    if kw is not None:
        return kw, VLLM_KWARGS + (key,)
    return get(data, ROLLOUT + (key,)), ROLLOUT + (key,)


def check_rollout(doc: Document, data, tc, options: Options) -> list[Finding]:
    if "actor_rollout_ref" not in data:
        return []  # the runtime's own tool config alone (check_tool_config): no verl settings to judge
    at = tc.stages_at + (tc.stages.index(ROLLOUT_STAGE),) if isinstance(tc.stages, list) else tc.stages_at
    name = get(data, ROLLOUT + ("name",))
    if _known(name) and name != "vllm":
        return [doc.finding("rollout-env", W, f"rollout_generate is selected but the rollout engine is {name!r}: "
                            "this package collects rollout_generate inside vLLM only", ROLLOUT + ("name",),
                            hint="actor_rollout_ref.rollout.name=vllm, or remove rollout_generate")]
    out = _env(doc, data, tc, options, at)
    out += _eager(doc, data)
    out += _log_probs(doc, data)
    out += _dtype(doc, data)
    return out


def _env(doc, data, tc, options, stage_at) -> list[Finding]:
    value = get(data, ROLLOUT_ENV_AT)
    gp = data.get("global_profiler") or {}
    steps = gp.get("steps")
    want = {"config_path": tc.config_path, "save_path": tc.save_path, "steps": steps}
    example = json.dumps({k: v for k, v in want.items() if _known(v) and isinstance(v, (str, list))})
    if value is None:
        return [doc.finding(
            "rollout-env", W, f"rollout_generate is selected but {ROLLOUT_ENV} is not passed to the Ray workers: "
            "this package's vLLM plugin does not start and the rollout is not dumped", stage_at,
            hint=f"+profiler=precision_debugger_rollout, or set ray_kwargs.ray_init.runtime_env.env_vars."
                 f"{ROLLOUT_ENV}: '{example}'")]
    if is_unknown(value):
        return []
    at = ROLLOUT_ENV_AT
    if not isinstance(value, str) or not value.strip():
        return [doc.finding("rollout-env", W, f"{ROLLOUT_ENV} must be a JSON string or the path of a JSON file, "
                            f"got {value!r}: the vLLM plugin cannot read it", at, hint=f"'{example}'")]
    text, shown = value, ROLLOUT_ENV
    if not value.lstrip().startswith("{"):
        path = value if os.path.isabs(value) else os.path.join(options.base_dir, value)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as e:
            return [doc.finding("rollout-env", W, f"{ROLLOUT_ENV} names {value!r}, which cannot be read here "
                                f"({e.strerror or e}): the vLLM plugin cannot load the rollout settings", at,
                                hint="point it at a JSON file that every node can read, or give the JSON itself")]
        shown = value
    try:
        got = json.loads(text)
    except ValueError as e:
        return [doc.finding("rollout-env", W, f"{shown} is not valid JSON ({e.msg} at character {e.pos}): the vLLM "
                            "plugin cannot read the rollout settings", at, hint=f"'{example}'")]
    if not isinstance(got, dict):
        return [doc.finding("rollout-env", W, f"{shown} must hold a JSON object with config_path, save_path and "
                            "steps", at, hint=f"'{example}'")]
    diffs = []
    # verl's v1 trainer (trainer.use_v1, 0.9's default) starts the engines' profile through this package's
    # runtime, which names the trainer's step (runtime/patch.py): the settings' steps then go unused.
    v1 = get(data, ("trainer", "use_v1")) is True
    for key, mine in want.items():
        if not _known(mine) or (key == "steps" and v1):
            continue
        theirs = got.get(key)
        if key == "config_path" and isinstance(theirs, str) and isinstance(mine, str):
            same = _real(theirs, options) == _real(mine, options)
        elif key == "steps" and isinstance(theirs, list) and isinstance(mine, list):
            same = sorted(map(str, theirs)) == sorted(map(str, mine))
        else:
            same = theirs == mine
        if not same:
            diffs.append(f"{key} {theirs!r} (the trainer's: {mine!r})")
    if diffs:
        return [doc.finding(
            "rollout-env", W, f"the rollout settings in {ROLLOUT_ENV} differ from global_profiler's: "
            + "; ".join(diffs) + ": the rollout's dumps do not pair with the trainer's stages", at,
            hint=f"'{example}'")]
    return []


def _real(path: str, options: Options) -> str:
    return os.path.realpath(path if os.path.isabs(path) else os.path.join(options.base_dir, path))


def _eager(doc, data) -> list[Finding]:
    eager, at = _effective(data, "enforce_eager")
    if eager is True or is_unknown(eager):
        return []
    return [doc.finding(
        "rollout-eager", E, "the rollout is not in eager mode ("
        + ("enforce_eager is not set: verl's default is False" if eager is None else f"enforce_eager {eager!r}")
        + "): vLLM captures CUDA graphs "
        "and compiles the model with torch.compile, whose kernels the module hooks of rollout_generate miss, so "
        "the rollout dumps are incomplete or empty", at, key=get(data, at) is None,
        hint="actor_rollout_ref.rollout.enforce_eager=True" + (" (and drop engine_kwargs.vllm.enforce_eager)"
                                                              if at[:len(VLLM_KWARGS)] == VLLM_KWARGS else ""))]


def _log_probs(doc, data) -> list[Finding]:
    calc = get(data, ROLLOUT + ("calculate_log_probs",))
    if calc is False:
        return [doc.finding(
            "rollout-log-probs", W, "calculate_log_probs is False: the rollout returns no rollout_log_probs, so "
            "verl does not log training/rollout_probs_diff_* next to the dumps (verl-pdbg-compare still works "
            "from the dumps)", ROLLOUT + ("calculate_log_probs",),
            hint="actor_rollout_ref.rollout.calculate_log_probs=True")]
    if calc is not True:
        return []
    return _logprobs_mode(doc, data)


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _logprobs_mode(doc, data) -> list[Finding]:
    mode, at = _effective(data, "logprobs_mode")
    temp = _num(get(data, ROLLOUT + ("temperature",)))
    top_k = _num(get(data, ROLLOUT + ("top_k",)))
    top_p = _num(get(data, ROLLOUT + ("top_p",)))
    if not isinstance(mode, str) or is_unknown(mode):
        return []
    tail = ("rollout_log_probs and verl's training/rollout_probs_diff_* then measure that difference, not a "
            "precision gap (the dumps' logits are not affected)")
    hint = "actor_rollout_ref.rollout.logprobs_mode=processed_logprobs with top_k=-1 and top_p=1"
    why = None
    if mode in ("raw_logits", "processed_logits"):
        why = f"logprobs_mode {mode}: vLLM returns logits where verl expects log-probs"
    elif mode == "raw_logprobs" and temp is not None and temp >= SAMPLING_EPS and temp != 1:
        why = (f"logprobs_mode raw_logprobs: vLLM returns log-probs before temperature, while verl's actor divides "
               f"the logits by temperature {temp}")
        hint = "actor_rollout_ref.rollout.logprobs_mode=processed_logprobs"
    elif temp is not None and temp < SAMPLING_EPS:
        why = (f"temperature {temp} is greedy sampling: vLLM returns the log-probs of the untempered logits, while "
               "verl's actor divides the logits by max(temperature, 1e-8)")
        hint = "sample with a temperature > 0 on the profiled steps (actor_rollout_ref.rollout.temperature=1.0)"
        at = ROLLOUT + ("temperature",)
    elif mode == "processed_logprobs" and ((top_k is not None and top_k > 0) or (top_p is not None and top_p < 1)):
        what = " and ".join(x for x in (f"top_k={top_k}" if top_k is not None and top_k > 0 else "",
                                        f"top_p={top_p}" if top_p is not None and top_p < 1 else "") if x)
        why = (f"logprobs_mode processed_logprobs with {what}: vLLM returns log-probs of the truncated, renormalized "
               "distribution, while verl's actor applies no top-k/top-p")
        hint = ("actor_rollout_ref.rollout.top_k=-1 and top_p=1 on the profiled run, or logprobs_mode=raw_logprobs "
                "with temperature=1.0")
        at = ROLLOUT + ("top_k",) if top_k is not None and top_k > 0 else ROLLOUT + ("top_p",)
    if why is None:
        return []
    return [doc.finding("rollout-logprobs-mode", W, f"the rollout's and the actor's log-probs are not comparable: "
                        f"{why}; {tail}", at, hint=hint)]


def _dtype_name(v):
    return _DTYPES.get(str(v).lower()) if isinstance(v, (str, int)) and not is_unknown(v) else None


def actor_dtype(data):
    """(dtype, path) of the actor's forward: FSDP engines autocast to mixed_precision.param_dtype (bf16
    when unset), Megatron runs in megatron.dtype (bfloat16 by default)."""
    strategy = get(data, ACTOR + ("strategy",))
    if strategy == "megatron":
        at = ACTOR + ("megatron", "dtype")
        return _dtype_name(get(data, at, "bfloat16")), at
    if strategy in ("fsdp", "fsdp2") or strategy is None:
        at = ACTOR + ("fsdp_config", "mixed_precision", "param_dtype")
        mp = get(data, ACTOR + ("fsdp_config", "mixed_precision"))
        value = mp.get("param_dtype", "bf16") if isinstance(mp, dict) else "bf16"
        return _dtype_name(value), at
    return None, None


def _dtype(doc, data) -> list[Finding]:
    raw, at = _effective(data, "dtype")
    rollout = _dtype_name(raw)
    actor, actor_at = actor_dtype(data)
    if rollout is None or actor is None or rollout == actor:
        return []
    return [doc.finding(
        "rollout-dtype", I, f"the rollout runs in {rollout} ({'.'.join(at)}), the actor's forward in {actor} "
        f"({'.'.join(actor_at)}): differences of that rounding are expected between rollout_generate and "
        "actor_compute_log_prob", at, hint="compare the two with verl-pdbg-compare --dtype-aware, or run both in one "
                                          "dtype to look for other causes")]
