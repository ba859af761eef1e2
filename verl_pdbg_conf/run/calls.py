"""How many forward (or forward and backward) calls each stage makes per profiled step on one rank, from
verl's config: msprobe writes one set of records per call, so a stage's dump grows with its calls (and the
model's layers), not with the model's parameter count."""

from __future__ import annotations

import math
from dataclasses import dataclass

from verl_pdbg_conf.core.document import get, is_unknown

A = "actor_rollout_ref"
# stage -> (micro-batch size per GPU, dynamic batch switch, epochs): the keys verl's workers read
MICRO = {
    "actor_compute_log_prob": ((A, "rollout", "log_prob_micro_batch_size_per_gpu"),
                               (A, "rollout", "log_prob_use_dynamic_bsz"), None),
    "ref_compute_log_prob": ((A, "ref", "log_prob_micro_batch_size_per_gpu"),
                             (A, "ref", "log_prob_use_dynamic_bsz"), None),
    "actor_update": ((A, "actor", "ppo_micro_batch_size_per_gpu"), (A, "actor", "use_dynamic_bsz"),
                     (A, "actor", "ppo_epochs")),
    "compute_values": (("critic", "forward_micro_batch_size_per_gpu"), ("critic", "use_dynamic_bsz"), None),
    "critic_update": (("critic", "ppo_micro_batch_size_per_gpu"), ("critic", "use_dynamic_bsz"),
                      ("critic", "ppo_epochs")),
    "compute_rm_score": (("reward_model", "micro_batch_size_per_gpu"), ("reward_model", "use_dynamic_bsz"), None),
}
# critic.forward_micro_batch_size_per_gpu falls back to its ppo one in verl's critic config
FALLBACK = {("critic", "forward_micro_batch_size_per_gpu"): ("critic", "ppo_micro_batch_size_per_gpu")}
# the model-parallel sizes that divide the world into data-parallel ranks, per actor strategy
MODEL_PARALLEL = {
    "fsdp": ((A, "actor", "ulysses_sequence_parallel_size"),),
    "megatron": tuple((A, "actor", "megatron", k) for k in ("tensor_model_parallel_size",
                                                            "pipeline_model_parallel_size",
                                                            "context_parallel_size")),
}


ROLLOUT = "rollout_generate"


@dataclass(frozen=True)
class Calls:
    count: int | None  # None: not known before the run
    how: str  # the keys it came from, or why it is not known
    tokens: int | None = None  # tokens the stage's forwards see in a step on one rank (padded): tensor dumps


def _int(data: dict, path: tuple) -> int | None:
    v = get(data, path)
    if v is None and path in FALLBACK:
        v = get(data, FALLBACK[path])
    return v if isinstance(v, int) and not isinstance(v, bool) and not is_unknown(v) and v > 0 else None


def rows_per_rank(data: dict, world_size: int | None) -> tuple[int | None, str]:
    """The rows (responses) each data-parallel rank holds in a step: the batch times rollout.n over the ranks."""
    batch = _int(data, ("data", "train_batch_size"))
    if batch is None:
        return None, "data.train_batch_size is not known"
    n = _int(data, (A, "rollout", "n")) or 1
    strategy = get(data, (A, "actor", "strategy"))
    split = math.prod(_int(data, k) or 1 for k in MODEL_PARALLEL["megatron" if strategy == "megatron" else "fsdp"])
    dp = max(1, (world_size or 1) // split)
    return math.ceil(batch * n / dp), f"data.train_batch_size {batch} x rollout.n {n} / {dp} data-parallel rank(s)"


def seq_len(data: dict) -> int | None:
    prompt, response = _int(data, ("data", "max_prompt_length")), _int(data, ("data", "max_response_length"))
    return prompt + response if prompt and response else None


def rollout_calls(data: dict, world_size: int | None) -> Calls:
    """vLLM's engine: one forward per engine step, the prefill then one per decoded token, on each replica's
    share of the batch (an upper bound: a batch whose responses all end early takes fewer steps)."""
    response, batch = _int(data, ("data", "max_response_length")), _int(data, ("data", "train_batch_size"))
    if response is None or batch is None:
        return Calls(None, "data.max_response_length or data.train_batch_size is not known")
    tp = _int(data, (A, "rollout", "tensor_model_parallel_size")) or 1
    replicas = max(1, (world_size or 1) // tp)
    rows = math.ceil(batch * (_int(data, (A, "rollout", "n")) or 1) / replicas)
    seq = seq_len(data)
    return Calls(1 + response, f"the prefill and up to data.max_response_length {response} decode steps",
                 rows * seq if seq else None)


def stage_calls(data: dict, stage: str, world_size: int | None) -> Calls:
    if stage == ROLLOUT:
        return rollout_calls(data, world_size)
    keys = MICRO.get(stage)
    if keys is None:
        return Calls(None, f"{stage}: calls are not counted")
    rows, how = rows_per_rank(data, world_size)
    micro_at, dynamic_at, epochs_at = keys
    if get(data, dynamic_at) is True:
        return Calls(None, f"{'.'.join(dynamic_at)} is on: micro-batches are made by token count during the run")
    micro = _int(data, micro_at)
    if rows is None or micro is None:
        return Calls(None, how if rows is None else f"{'.'.join(micro_at)} is not set")
    epochs = _int(data, epochs_at) if epochs_at else 1
    epochs = epochs or 1
    count, seq = math.ceil(rows / micro) * epochs, seq_len(data)
    return Calls(count, f"{how}, micro-batch {micro}" + (f", {epochs} epoch(s)" if epochs_at else ""),
                 rows * seq * epochs if seq else None)
