"""Facts read off a Hugging Face model config (its config.json as a dict), shared by the validator's MoE
rules, the cost plan and the compare's token-record boundary."""

from __future__ import annotations

# the keys a model's expert count is under, in the order verl reads them (trainer/ppo/metric_utils.py)
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


def num_experts(cfg: dict) -> int | None:
    """The model's routed experts: the first of EXPERT_KEYS holding an integer (a bool is none), or None."""
    return next((v for v in map(cfg.get, EXPERT_KEYS) if type(v) is int), None)
