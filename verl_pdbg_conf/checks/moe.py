"""Rules for mixture-of-experts runs: verl's routing-replay settings, and whether the rollout profiling
collects what comparing the routing of rollout_generate with actor_compute_log_prob needs.

What they rest on (verl 0.8.0, 0.9.0, 0.9.1; their code, read):
- The worker reads the actor's replay mode from `actor_rollout_ref.actor.<strategy>.router_replay.mode`
  for strategies megatron and veomni, and replays nothing for any other (workers/engine_workers.py);
  which sections it reads is a per-release fact (target.routing_replay, releases/extract.py). 0.8.0 and
  0.9.0 still compose the older `actor_rollout_ref.actor.router_replay`, which nothing reads.
- R3 replays the experts the rollout chose, in compute_log_prob and the update: with no
  `routed_experts` in the batch the actor's first compute_log_prob fails (0.9.1: RuntimeError
  "router_replay REPLAY: micro_batch has no routed_experts"). The rollout returns them only with
  `rollout.enable_rollout_routing_replay` and only from the engines whose server reads it (vLLM sets
  enable_return_routed_experts; sglang). vLLM 0.32 refuses enable_return_routed_experts without
  prefix caching, on a dense model, and without Model Runner V2 (VllmConfig.
  _verify_aux_output_compatibility); only the first is a verl setting.
- R2 records compute_log_prob's own routes and replays them in the update. With the rollout's
  routes in the batch too, the trainer raises ValueError ("Detected conflicting router replay
  configuration", trainer/ppo/ray_trainer.py) once compute_log_prob returns routes of its own
  (VeOmni; Megatron in 0.8.0 and 0.9.0); 0.9.1's Megatron engine then records nothing and replays
  the rollout's routes without R3's alignment.
- Under replay the router's top-k choice is the replayed one (Megatron: the patched
  topk_routing_with_score_function; VeOmni: its router hooks), so the router modules' outputs that
  the dumps hold carry the rollout's experts.
- Whether the model is MoE: its Hugging Face config.json, read as verl's infer_moe_num_experts
  does (trainer/ppo/metric_utils.py): num_experts, n_routed_experts, num_local_experts, also in
  text_config and model.override_config. A model that cannot be read here is not judged.
"""

from __future__ import annotations

import json
import os
import re

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.document import Document, get, is_unknown
from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.core.hf_config import EXPERT_KEYS, num_experts as experts_in
from verl_pdbg_conf.core.reading import read_text

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO
ACTOR = ("actor_rollout_ref", "actor")
ROLLOUT = ("actor_rollout_ref", "rollout")
MODEL = ("actor_rollout_ref", "model")
FLAG = ROLLOUT + ("enable_rollout_routing_replay",)

# Router modules as msprobe names them at L0 (module path, class), with layer numbers as 0: vLLM
# (GateLinear, ReplicatedLinear), transformers (a TopKRouter, or nn.Linear in older releases and in
# Mixtral's block_sparse_moe), Megatron (TopKRouter). A `list` entry is matched as a substring.
ROUTER_NAMES = tuple(f"Module.{p}.layers.0.{block}.{gate}.{cls}.forward.0"
                     for p in ("model", "language_model.model", "decoder")
                     for block in ("mlp", "block_sparse_moe", "feed_forward")
                     for gate in ("gate", "router")
                     for cls in ("GateLinear", "ReplicatedLinear", "Linear", "TopKRouter"))


def _known(v) -> bool:
    return v is not None and not is_unknown(v) and v != "???"


def _walk(node, path):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, path + (k,))
    else:
        yield path, node


def check_routing_replay(doc: Document, tc, options: Options) -> list[Finding]:
    """The actor's replay mode against where the workers read it, the rollout's routing replay
    against that mode, and what the routing comparison then shows."""
    data = doc.data
    facts = options.target.routing_replay
    if not isinstance(data, dict) or "actor_rollout_ref" not in data or not facts:
        return []
    reads = facts.get("reads") or {}
    strategy = get(data, ACTOR + ("strategy",))
    if not _known(strategy):
        return []
    read_at = tuple(reads[strategy].split(".")) if strategy in reads else None
    mode = get(data, read_at) if read_at else "disabled"
    modes = facts.get("modes") or []
    out = []
    for path, value in _walk(get(data, ACTOR) or {}, ACTOR):
        if path[-2:] != ("router_replay", "mode") or value is None or is_unknown(value):
            continue
        if modes and value not in modes:
            out.append(doc.finding(
                "routing-replay-mode", E, f"{'.'.join(path)} {value!r} is not a routing-replay mode: verl raises "
                f"ValueError ('Invalid router_replay mode') when the workers build their config", path,
                hint="one of " + ", ".join(modes)))
        elif path != read_at and value != "disabled" and value != mode:
            out.append(_ignored(doc, path, value, strategy, read_at, reads, options.target.label, mode))
    if modes and mode not in modes:
        return out
    flag = get(data, FLAG)
    name = get(data, ROLLOUT + ("name",))
    engines = facts.get("rollout_engines") or []
    if is_unknown(mode) or is_unknown(flag):
        return out
    if mode == "R3" and flag is not True:
        out.append(doc.finding(
            "routing-replay-rollout", E, f"{'.'.join(read_at)} is R3, which replays the experts the rollout chose, "
            "but enable_rollout_routing_replay is " + ("not set (verl's default is False)" if flag is None else
                                                       repr(flag)) + ": the rollout returns no routed_experts and the actor's "
            "first compute_log_prob fails (there is nothing to replay)", read_at,
            hint="actor_rollout_ref.rollout.enable_rollout_routing_replay=True"))
    elif mode == "R3" and _known(name) and engines and name not in engines:
        out.append(doc.finding(
            "routing-replay-rollout", E, f"{'.'.join(read_at)} is R3, but the {name!r} rollout never returns "
            f"routed_experts ({options.target.label} reads enable_rollout_routing_replay only in the "
            f"{', '.join(engines)} servers): the actor's first compute_log_prob fails", read_at,
            hint=f"actor_rollout_ref.rollout.name={engines[-1]}"))
    elif mode == "R2" and flag is True:
        out.append(doc.finding(
            "routing-replay-conflict", E, f"{'.'.join(read_at)} is R2 and enable_rollout_routing_replay is True: "
            "verl's trainer raises ValueError ('Detected conflicting router replay configuration') once "
            "compute_log_prob returns routes of its own beside the rollout's; where it does not, compute_log_prob "
            "replays the rollout's routes without R3's alignment", FLAG,
            hint=f"{'.'.join(read_at)}=R3 to replay the rollout's routes, or "
                 "actor_rollout_ref.rollout.enable_rollout_routing_replay=False for R2"))
    elif flag is True and mode == "disabled" and not out:
        metrics = get(data, ROLLOUT + ("moe_load_balance_metrics_interval",))
        if not (isinstance(metrics, int) and not isinstance(metrics, bool) and metrics > 0):
            out.append(doc.finding(
                "routing-replay-ignored", W, "enable_rollout_routing_replay is True but the actor replays no route "
                + (f"({'.'.join(read_at)} is disabled)" if read_at else f"(strategy {strategy} has no routing "
                   "replay)") + ": the rollout captures and returns routed_experts that nothing uses", FLAG,
                hint=(f"{'.'.join(read_at)}=R3" if read_at else "actor strategy " + " or ".join(sorted(reads)))
                + " to replay them, or enable_rollout_routing_replay=False"))
    if flag is True and (name == "vllm" or not _known(name)) and not out:
        out += _prefix_caching(doc, data)
    fails = any(f.rule != "routing-replay-ignored" for f in out)  # the run does not get as far as a compare
    if mode == "R3" and flag is True and not fails and tc.rollout \
            and "actor_compute_log_prob" in tc.collected:
        out.append(doc.finding(
            "routing-replay-compare", I, "R3 routes actor_compute_log_prob's tokens to the experts the rollout "
            "chose: comparing the routing of rollout_generate with actor_compute_log_prob checks the replay (no "
            "token routed differently is expected; one that is points at a misaligned replay), not how the "
            "trainer would route on its own", read_at,
            hint=f"to measure the trainer's own routing, profile a step with {'.'.join(read_at)}=disabled (R2 "
                 "replays only in actor_update)"))
    return out


def _prefix_caching(doc, data) -> list[Finding]:
    """verl's vLLM server passes rollout.enable_prefix_caching (engine_kwargs.vllm wins) and, for the
    rollout's routes, enable_return_routed_experts; vLLM 0.32 refuses the second without the first
    (VllmConfig._verify_aux_output_compatibility: "AuxOutput Connector requires prefix caching")."""
    at = ROLLOUT + ("engine_kwargs", "vllm", "enable_prefix_caching")
    value = get(data, at)
    if value is None:
        at = ROLLOUT + ("enable_prefix_caching",)
        value = get(data, at)
    if value is not False:
        return []
    return [doc.finding(
        "routing-replay-rollout", W, "enable_rollout_routing_replay makes verl start vLLM with "
        f"enable_return_routed_experts, which vLLM 0.32 refuses without prefix caching ({'.'.join(at)} is False): "
        "the rollout server fails to start ('AuxOutput Connector requires prefix caching')", at,
        hint=f"{'.'.join(at)}=True")]


def _ignored(doc, path, value, strategy, read_at, reads, label, mode) -> Finding:
    if read_at:
        where = f"with strategy {strategy} they read {'.'.join(read_at)}, which is {mode!r}"
        hint = f"{'.'.join(read_at)}={value}"
    else:
        where = (f"with strategy {strategy} they replay no route (they read a mode for "
                 f"{' and '.join(sorted(reads)) or 'no strategy'} only)")
        hint = (f"routing replay needs actor strategy {' or '.join(sorted(reads))} "
                f"(model_engine={sorted(reads)[0]})" if reads else "drop it")
    return doc.finding("routing-replay-ignored", W, f"{'.'.join(path)} is {value!r}, which the workers of {label} "
                       f"never read: {where}", path, hint=hint)


# ------------------------------------------------------------------ the model

def hf_config_file(ref: str, base_dir: str) -> str | None:
    """The config.json of a model reference: a local directory, else a repository id already in the
    Hugging Face cache (its refs/main snapshot); None when it is not on this machine."""
    local = os.path.expanduser(ref)
    local = local if os.path.isabs(local) else os.path.join(base_dir, local)
    if os.path.isdir(local):
        path = os.path.join(local, "config.json")
        return path if os.path.isfile(path) else None
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", ref):
        return None
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = os.path.join(hub, "models--" + ref.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="utf-8") as f:
            snapshot = f.read().strip()
    except OSError:
        return None
    path = os.path.join(repo, "snapshots", snapshot, "config.json")
    return path if re.fullmatch(r"\w+", snapshot) and os.path.isfile(path) else None


def num_experts(data, options: Options) -> int | None:
    """The routed experts of the actor's model (more than one: MoE; 0: a dense model), or None when
    its config cannot be read here. override_config wins over the checkpoint's config.json."""
    model = get(data, MODEL) or {}
    ref = next((model.get(k) for k in ("hf_config_path", "path") if isinstance(model.get(k), str)
                and model.get(k) and not is_unknown(model.get(k))), None)
    override = model.get("override_config") if isinstance(model.get("override_config"), dict) else {}
    candidates = [override, override.get("model_config"), override.get("text_config")]
    try:
        path = hf_config_file(ref, options.base_dir) if ref else None
    except (OSError, ValueError):  # a path the OS cannot look at (a NUL character): not known here
        path = None
    if path:
        text, _ = read_text(path, "config.json")  # the model's own file: unreadable means not known here
        try:
            hf = json.loads(text) if text is not None else None
        except ValueError:
            hf = None
        if isinstance(hf, dict):
            candidates += [hf, hf.get("text_config")]
    elif not any(isinstance(c, dict) and any(k in c for k in EXPERT_KEYS) for c in candidates):
        return None
    for c in candidates:
        n = experts_in(c) if isinstance(c, dict) else None
        if n is not None:
            return n
    return 0 if path and isinstance(hf, dict) else None


def rollout_routers(doc: Document, jdoc: Document, tc, options: Options) -> list[Finding]:
    """rollout_generate collected from an MoE model with a config.json that leaves the router modules
    out: the routing (each router's logits and chosen experts) cannot be compared."""
    cfg = jdoc.data if isinstance(jdoc.data, dict) else None
    if cfg is None or cfg.get("task", "statistics") != "tensor":
        return []  # statistics: rollout-task says the rollout cannot be aligned at all
    level = cfg.get("level", "L1")
    section = cfg.get("tensor") if isinstance(cfg.get("tensor"), dict) else {}
    lst = section.get("list")
    if level == "L1":
        why = "level L1 dumps torch API calls, not modules, so no router module's output is in the dumps"
        hint = 'set "level": "L0" (or "mix")'
    elif level in ("L0", "mix") and isinstance(lst, list) and lst and all(isinstance(e, str) for e in lst) \
            and not any(_may_name_router(e) for e in lst):
        why = f"tensor.list {lst} names no router module (msprobe dumps only modules whose name holds an entry)"
        hint = 'add the routers to "list" (e.g. "mlp.gate" for vLLM and transformers, "mlp.router" for Megatron)'
    else:
        return []
    n = num_experts(doc.data, options)
    if not n or n < 2:
        return []
    return [doc.finding(
        "rollout-moe-routing", W, f"the model routes tokens to {n} experts, but the msprobe config collecting "
        f"rollout_generate leaves its routers out: {why}; the routing of the rollout and the actor cannot be "
        "compared", tc.config_path_at,
        hint=f"{hint} in {tc.config_path} (the config of rollout_generate and actor_compute_log_prob alike), as "
             "+profiler=precision_debugger_rollout's msprobe/tensor_rollout.json does")]


def _may_name_router(entry: str) -> bool:
    """Whether a `list` entry can be part of a router module's name (layer numbers aside)."""
    low = entry.lower()
    if any(w in low for w in ("gate", "router", "moe")):
        return True
    norm = re.sub(r"\d+", "0", entry)
    return any(norm in name for name in ROUTER_NAMES)
