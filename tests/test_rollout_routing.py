"""The rollout compare's MoE routing settings read from vLLM's own table (compare/rollout/vllm-0.32.0.json,
written by extract.py off the installed engine), and the engine's choice recomputed from router logits:
softmax top-k, and grouped top-k with sigmoid scoring and a score-correction bias (extract.py checks the
same recomputation against vLLM's own router)."""

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


def test_grouped_routing_reads_its_hf_config():
    """GLM-4.5 sets sigmoid scoring and grouped top-k in its FusedMoE call; DeepSeek-V3 reads them from its
    config (getattr with a default): both with the router's score-correction bias (noaux_tc)."""
    got = R.setting(T.moe_for(["Glm4MoeForCausalLM"]), {"num_experts_per_tok": 8, "n_group": 1, "topk_group": 1})
    assert (got.top_k, got.scoring, got.grouped, got.n_group, got.topk_group) == (8, "sigmoid", True, 1, 1)
    assert got.bias == "gate.e_score_correction_bias" and not got.unknown
    dsv3 = T.moe_for(["DeepseekV3ForCausalLM"])
    got = R.setting(dsv3, {"num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "scoring_func": "sigmoid"})
    assert (got.top_k, got.scoring, got.n_group, got.topk_group, got.bias) == \
        (8, "sigmoid", 8, 4, "gate.e_score_correction_bias")
    assert R.setting(dsv3, {"num_experts_per_tok": 6}).scoring == "softmax"  # DeepSeek-V2's default


def test_a_router_the_compare_does_not_recompute_says_why():
    got = R.setting(T.moe_for(["PhiMoEForCausalLM"]), {"num_experts_per_tok": 2})  # a custom routing function
    assert got.top_k is None and "not one this compare recomputes" in got.unknown
    got = R.setting(T.moe_for(["LagunaForCausalLM"]), {"num_experts_per_tok": 2})  # sigmoid without groups
    assert got.top_k is None and "scoring sigmoid, grouped top-k False" in got.unknown
    got = R.setting(T.moe_for(["Ernie4_5_MoeForCausalLM"]), {"moe_k": 2})  # a bias without groups
    assert got.top_k is None and "bias outside grouped top-k" in got.unknown
    assert R.setting({}, {}).unknown  # a dense model


def test_choice_and_margins():
    logits = torch.tensor([0.1, 0.9, 0.5, 0.48, -1.0])
    chosen, margin = R.choose(logits, 2)
    assert chosen == (1, 2) and abs(margin - 0.02) < 1e-6
    assert abs(R.margin_of(logits, (1, 3)) - (0.48 - 0.5)) < 1e-7  # a choice that is not the top-k: negative


def test_grouped_choice_and_margins():
    """Sigmoid scores of 8 experts in 2 groups, the top group kept, 2 experts: the bias on expert 3 lifts
    group 0 (0.9 + 0.3 + 0.4 = 1.6) over group 1 (0.8 + 0.75 = 1.55), so the choice is (0, 3), not the top-2
    of the logits (0, 4). Its margin is the group stage's 0.05 (within the group 0.7 - 0.2 = 0.5)."""
    p = torch.tensor([0.9, 0.1, 0.2, 0.3, 0.8, 0.75, 0.7, 0.1])
    logits, bias = torch.logit(p), torch.tensor([0.0, 0, 0, 0.4, 0, 0, 0, 0])
    st = R.Setting(2, scoring="sigmoid", grouped=True, n_group=2, topk_group=1, bias="gate.e_score_correction_bias")
    chosen, margin = R.choose(logits, 2, st, bias)
    assert chosen == (0, 3) and abs(margin - 0.05) < 1e-5
    assert R.choose(logits, 2)[0] == (0, 4)
    no_bias = R.Setting(2, scoring="sigmoid", grouped=True, n_group=2, topk_group=1)
    chosen, margin = R.choose(logits, 2, no_bias)  # group score = its largest: 0.9 against 0.8
    assert chosen == (0, 3) and abs(margin - 0.1) < 1e-5  # group 0.9 - 0.8 = 0.1; within 0.3 - 0.2 = 0.1
    assert R.choose(logits, 2, st, torch.zeros(8))[0] == (4, 5)  # no bias: group 1 (1.55) over group 0 (1.2)
    # a choice made elsewhere: where it parts from the router's own, a margin never positive
    assert abs(R.margin_of(logits, (0, 3), st, bias) - 0.05) < 1e-5
    assert abs(R.margin_of(logits, (4, 5), st, bias) - (1.55 - 1.6)) < 1e-5  # another group
    assert abs(R.margin_of(logits, (0, 2), st, bias) - (0.2 - 0.7)) < 1e-5  # same group, another expert


def test_grouped_margins_sign_any_choice():
    """On random logits with and without a bias: the router's own choice has a margin not below 0, and every
    other choice of as many experts a margin not above 0 (how a replayed choice is told from the router's)."""
    import itertools

    gen = torch.Generator().manual_seed(0)
    for bias, groups, top_groups in ((0.05 * torch.randn(8, generator=gen), 4, 2), (None, 2, 1)):
        st = R.Setting(2, scoring="sigmoid", grouped=True, n_group=groups, topk_group=top_groups,
                       bias="gate.e_score_correction_bias" if bias is not None else "")
        for _ in range(20):
            logits = torch.randn(8, generator=gen)
            own, margin = R.choose(logits, 2, st, bias)
            assert margin >= 0 and R.margin_of(logits, own, st, bias) == margin
            others = [c for c in itertools.combinations(range(8), 2) if c != own]
            assert all(R.margin_of(logits, c, st, bias) <= 0 for c in others)


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
