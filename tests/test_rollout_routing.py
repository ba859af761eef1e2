"""The rollout compare's MoE routing settings read from vLLM's own table (compare/rollout/vllm-0.32.0.json,
written by extract.py off the installed engine), and the engine's choice recomputed from router logits."""

from __future__ import annotations

import torch

from verl_pdbg_conf.compare.rollout import routing as R
from verl_pdbg_conf.compare.rollout import table as T


def test_qwen_moe_routing_reads_its_hf_config():
    for arch in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"):
        moe = T.moe_for([arch])
        assert moe["top_k"] == {"config": "num_experts_per_tok"} and moe["prefix"] == {"module": "experts"}
        got = R.setting(moe, {"num_experts_per_tok": 4, "norm_topk_prob": True})
        assert got.top_k == 4 and not got.unknown
    # the shared expert's fused gate_up_proj is added in the model's __init__, not its class attribute
    assert T.packed_for(["Qwen2MoeForCausalLM"])["gate_up_proj"] == ["gate_proj", "up_proj"]
    assert T.moe_for(["Qwen2MoeForCausalLM"])["shared_experts"] == {"self": "shared_expert"}


def test_a_router_the_compare_does_not_recompute_says_why():
    got = R.setting(T.moe_for(["DeepseekV3ForCausalLM"]), {"num_experts_per_tok": 8})
    assert got.top_k is None and "grouped top-k" in got.unknown
    assert R.setting({}, {}).unknown  # a dense model


def test_choice_and_margins():
    logits = torch.tensor([0.1, 0.9, 0.5, 0.48, -1.0])
    chosen, margin = R.choose(logits, 2)
    assert chosen == (1, 2) and abs(margin - 0.02) < 1e-6
    assert abs(R.margin_of(logits, (1, 3)) - (0.48 - 0.5)) < 1e-7  # a choice that is not the top-k: negative


def test_replay_is_read_off_the_routes():
    """A router that keeps experts its own logits rank lower replayed a record; under replay each layer's
    experts are matched to the engine layer they follow, which names a replay attached one layer off."""
    def route(layer, engine, trainer, tm):
        return R.Route(layer, engine, trainer, 0.5, tm)

    a, b = "model.layers.0.mlp", "model.layers.1.mlp"
    own = {("r", 0): {a: route(a, (0, 1), (0, 1), 0.3), b: route(b, (2, 3), (2, 3), 0.2)}}
    assert R.replay(own, [a, b]) is None  # every router chose its own top-k: no replay seen
    right = {("r", 0): {a: route(a, (0, 1), (0, 1), -0.01), b: route(b, (2, 3), (2, 3), 0.2)}}
    got = R.replay(right, [a, b])
    assert got["imposed"] == 1 and not got["bug"] and got["misattached"] == []
    off = {("r", p): {a: route(a, (0, 1), (2, 3), -0.4), b: route(b, (2, 3), (0, 1), -0.3)} for p in range(3)}
    got = R.replay(off, [a, b])
    assert got["bug"] and got["misattached"] == [a, b]
    got_layers = [(l["follows"], l["follows_tokens"], l["routed_differently"]) for l in got["layers"]]
    assert got_layers == [(b, 3, 3), (a, 3, 3)]
    # experts that are no layer's of the engine's: a replay bug, attached to no layer of this step
    stray = {("r", 0): {a: route(a, (0, 1), (4, 5), -0.4), b: route(b, (2, 3), (2, 3), 0.2)}}
    got = R.replay(stray, [a, b])
    assert got["bug"] and got["misattached"] == [] and got["layers"][0]["follows"] is None
