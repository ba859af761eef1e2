"""Write real msprobe dumps on CPU of two small transformers models (Qwen2ForCausalLM, LlamaForCausalLM)
whose code paths differ between runs, through this package's runtime profiler, for the compare engine's
cross-implementation tests and bench/cross_impl.py.

    python make_cross_impl_dumps.py OUT --arch qwen2 --level mix --task statistics \\
        --runs golden,sdpa,sdpa-weight [--layer K] [--swap-layer J] [--steps 1]

One process writes the runs it is given, each with its own profiler and save_path OUT/<run>, step_N/
{actor_compute_log_prob (a no-grad forward), actor_update (forward, backward, one SGD step)}: msprobe's
PrecisionDebugger is a process singleton, so one level/task per process. OUT/manifest.json says, per run,
its implementation, its planted change, the planted layer and the right answer a compare must give
against OUT/golden (`expect_layer` None: no divergence). Model: hidden 64, 6 layers, 4 heads, 2 KV heads,
vocab 128, random init, torch.manual_seed(0): the same weights in every run. A run is IMPL[-PLANT]:

  golden   attn_implementation eager, fp32 (the reference); `same` is it again
  sdpa     attn_implementation sdpa (one scaled_dot_product_attention for matmul, softmax, matmul)
  rmsnorm  every RMSNorm's forward is torch.nn.functional.rms_norm (one op for pow, mean, add, rsqrt, mul)
  swiglu   every MLP computes act(gate)*up as one fused op, torch.ops.pdbg_cpu.swiglu, which msprobe
           records as a custom API (config custom_op_namespaces), as it records torch_npu's npu_swiglu
  bf16     the whole model in bfloat16
  split    actor_compute_log_prob's forward as 2 calls of batch 1 where golden makes 1 call of batch 2
  swap1    the fused swiglu in layer J only (--swap-layer; default: another layer than K)

  -weight  layer K's mlp.down_proj.weight x1.01 (x1.05 in bf16)
  -eps     layer K's post_attention_layernorm.variance_epsilon = 0.1
  -op       layer K's self_attn.o_proj output x1.01 (a forward hook, through an op msprobe does not record)

K defaults to one seeded from today's date (printed, and in the manifest), so each day plants elsewhere.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import random
import re
import sys
import types

ARCHS = ("qwen2", "llama")
IMPLS = ("golden", "same", "sdpa", "rmsnorm", "swiglu", "bf16", "split", "swap1")
PLANTS = ("weight", "eps", "op")
LAYERS, HIDDEN, HEADS, KV_HEADS, VOCAB, INTER = 6, 64, 4, 2, 128, 128
# a mixture-of-experts model: transformers' fused experts (3-D weights, an expert is an index)
MOE = {"qwen3_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16,
                         norm_topk_prob=True)}
MOE_EXPERT = 3  # the expert a weight plant changes
BATCH, SEQ = 2, 8
STAGES = ("actor_compute_log_prob", "actor_update")
CUSTOM_NS = "pdbg_cpu"  # the namespace of the fused swiglu op, hooked through msprobe's custom_op_namespaces


def default_layer(today: str | None = None) -> int:
    """The planted layer for today: seeded from the date, so a rerun on the same day plants the same."""
    return random.Random(today or datetime.date.today().isoformat()).randrange(LAYERS)


def other_layer(k: int) -> int:
    return (k + 3) % LAYERS


def parse_run(run: str) -> tuple[str, str | None]:
    impl, _, plant = run.partition("-")
    if impl not in IMPLS or (plant and plant not in PLANTS):
        raise SystemExit(f"unknown run {run!r}: IMPL[-PLANT], IMPL in {IMPLS}, PLANT in {PLANTS}")
    return impl, plant or None


def config_doc(level: str, task: str) -> dict:
    """The msprobe config.json of one process: every rank and step, the fused op's namespace hooked."""
    return {"task": task, "level": level, "rank": [], "step": [], "async_dump": False,
            "custom_op_namespaces": [CUSTOM_NS], task: {"scope": [], "list": [], "data_mode": ["all"]}}


# ---------------------------------------------------------------- the fused op and the swapped kernels

_SWIGLU = None


def swiglu_op():
    """torch.ops.pdbg_cpu.swiglu(gate, up) = silu(gate) * up as one custom op with its own backward.
    Its body uses torch._C's raw functions, which msprobe does not wrap: one record, as a fused kernel."""
    global _SWIGLU
    if _SWIGLU is None:
        import torch
        raw = torch._C._VariableFunctions

        def body(gate, up):
            return raw.mul(torch._C._nn.silu(gate), up)

        swiglu = torch.library.custom_op(f"{CUSTOM_NS}::swiglu", body, mutates_args=(),
                                         schema="(Tensor gate, Tensor up) -> Tensor")

        @swiglu.register_fake
        def _(gate, up):
            return torch.empty_like(gate)

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        def backward(ctx, grad):
            gate, up = ctx.saved_tensors
            sig = raw.sigmoid(gate)
            silu = raw.mul(gate, sig)
            dsilu = raw.add(sig, raw.mul(silu, raw.rsub(sig, 1.0)))  # sig * (1 + gate * (1 - sig))
            return raw.mul(raw.mul(grad, up), dsilu), raw.mul(grad, silu)

        swiglu.register_autograd(backward, setup_context=setup_context)
        _SWIGLU = True
    import torch
    return torch.ops.pdbg_cpu.swiglu  # looked up at each call: msprobe replaces it with its recording wrapper


def _fused_mlp_forward(self, x):
    return self.down_proj(swiglu_op()(self.gate_proj(x), self.up_proj(x)))


def _rms_norm_forward(self, x):
    import torch.nn.functional as F
    return F.rms_norm(x, (x.shape[-1],), self.weight, self.variance_epsilon)


def _scale_output(_module, _inputs, output):
    import torch
    return torch._C._VariableFunctions.mul(output, 1.01)  # raw: msprobe records no op of its own here


# ---------------------------------------------------------------- the model of one run

def build(arch: str, impl: str, plant: str | None, layer: int, swap_layer: int):
    import torch
    import transformers

    cls, cfg_cls = {"qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
                    "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                    "qwen3_moe": (transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig)}[arch]
    cfg = cfg_cls(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                  max_position_embeddings=64, tie_word_embeddings=False, **MOE.get(arch, {}))
    cfg._attn_implementation = "sdpa" if impl == "sdpa" else "eager"
    torch.manual_seed(0)
    model = cls(cfg)
    layers = model.model.layers
    if impl == "rmsnorm":
        for m in model.modules():
            if type(m).__name__.endswith("RMSNorm"):
                m.forward = types.MethodType(_rms_norm_forward, m)
    for i in ({"swiglu": range(LAYERS), "swap1": [swap_layer]}.get(impl) or ()):
        layers[i].mlp.forward = types.MethodType(_fused_mlp_forward, layers[i].mlp)
    if impl == "bf16":
        model.to(torch.bfloat16)
    with torch.no_grad():
        if plant == "weight" and arch in MOE:  # one expert's (its tokens' share of the layer's output)
            layers[layer].mlp.experts.down_proj[MOE_EXPERT].mul_(1.05)
        elif plant == "weight":
            layers[layer].mlp.down_proj.weight.mul_(1.05 if impl == "bf16" else 1.01)
    if plant == "eps":
        layers[layer].post_attention_layernorm.variance_epsilon = 0.1
    elif plant == "op":
        layers[layer].self_attn.o_proj.register_forward_hook(_scale_output)
    return model


def expect_layer(impl: str, plant: str | None, layer: int) -> int | None:
    return layer if plant else None


def log_probs(model, ids, mask):
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    return logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def run_one(prof, model, impl: str, steps: list[int], log_probs=log_probs) -> None:
    """Each step: the log-prob stage (a no-grad forward) and the update stage; `log_probs(model, ids, mask)`.
    Frozen parameters (a LoRA model's base weights) get no gradient and SGD leaves them."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
    for step in steps:
        torch.manual_seed(1000 * step)  # the same data in every run
        ids = torch.randint(0, VOCAB, (BATCH, SEQ))
        mask = torch.ones_like(ids)
        prof.start(profile_step=step)
        with prof.stage("actor_compute_log_prob", model=model), torch.no_grad():
            if impl == "split":
                for b in range(BATCH):
                    log_probs(model, ids[b:b + 1], mask[b:b + 1])
            else:
                log_probs(model, ids, mask)
        with prof.stage("actor_update", model=model):
            model.zero_grad(set_to_none=True)
            (-log_probs(model, ids, mask).mean()).backward()
            opt.step()
        prof.stop()


# ---------------------------------------------------------------- the pair matrix and its driver

UNPLANTED = ("same", "sdpa", "rmsnorm", "swiglu", "bf16", "split", "swap1")
PLANTED = ("same-weight", "same-eps", "same-op", "sdpa-weight", "rmsnorm-eps", "swiglu-op", "bf16-weight",
           "split-weight", "swap1-weight")
MATRIX = UNPLANTED + PLANTED  # 16 targets against golden, at mix and at L1: the 32 verdicts


def job(out: str, arch: str, level: str, task: str, runs, layer: int, swap_layer: int | None = None) -> dict:
    return {"out": os.path.join(out, f"{arch}-{level}-{task}"), "arch": arch, "level": level, "task": task,
            "runs": ["golden", *[r for r in runs if r != "golden"]], "layer": layer, "swap_layer": swap_layer}


def make(jobs: list[dict], parallel: int = 2, env: dict | None = None, timeout: float = 1200) -> None:
    """Run this script once per job (a directory of one arch, level and task), `parallel` at a time."""
    import subprocess
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            j = pending.pop(0)
            os.makedirs(j["out"], exist_ok=True)
            cmd = [sys.executable, os.path.abspath(__file__), j["out"], "--arch", j["arch"], "--level", j["level"],
                   "--task", j["task"], "--runs", ",".join(j["runs"]), "--layer", str(j["layer"])]
            if j.get("swap_layer") is not None:
                cmd += ["--swap-layer", str(j["swap_layer"])]
            running.append((j, subprocess.Popen(cmd, cwd=j["out"], env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True)))
        j, proc = running.pop(0)
        log, _ = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"make_cross_impl_dumps {j['out']}: exit {proc.returncode}\n{log[-3000:]}")


def pairs(root: str) -> list[dict]:
    """Every (target, golden) pair under root, from each directory's manifest.json, with its right answer."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "*", "manifest.json"))):
        with open(path) as f:
            man = json.load(f)
        base = os.path.dirname(path)
        for run, info in man["runs"].items():
            if run == man["golden"]:
                continue
            out.append({"name": f"{man['arch']}-{man['level']}-{man['task']}/{run}", "run": run,
                        "target": os.path.join(base, run), "golden": os.path.join(base, man["golden"]),
                        "arch": man["arch"], "level": man["level"], "task": man["task"], "layers": man["layers"],
                        "swap_layer": man["swap_layer"],
                        **info})
    return out


# ---------------------------------------------------------------- the right answer

LAYER_OF = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def module_layer(text: str | None) -> int | None:
    m = LAYER_OF.search(text or "")
    return int(m.group(1)) if m else None


def named_layer(first: dict, level: str) -> int | None:
    """The layer a first divergence names: JSON `layer` at L1, the `layers.K` of `module` at mix and L0."""
    if level == "L1":
        return first.get("layer")
    return module_layer(first.get("module"))


def firsts_in_layer(doc: dict, level: str, layer: int) -> list[dict]:
    """Each pair's first divergence, every pair asserted diverged in `layer` (a test's common check)."""
    firsts = [p["first_divergence"] for p in doc["pairs"]]
    for p, first in zip(doc["pairs"], firsts):
        assert p["status"] == "diverged" and named_layer(first, level) == layer, (p["stage"], first)
    return firsts


def judge(pair: dict, code: int, doc: dict) -> tuple[bool, str]:
    """(right, what it said) for one pair's verdict against the planted answer."""
    if "pairs" not in doc:
        return False, f"exit {code}, no JSON: {doc.get('error', '')[-200:]!r}"
    k = pair["expect_layer"]
    said = []
    for p in doc["pairs"]:
        f = p.get("first_divergence") or {}
        where = named_layer(f, pair["level"]) if p["status"] == "diverged" else None
        said.append((p["stage"], p["status"], where, f.get("name")))
    text = "; ".join(f"{st}: {status}" + (f" at {name} (layer {where})" if status == "diverged" else "")
                     for st, status, where, name in said)
    if k is None:
        return code in (0, 3) and all(s[1] != "diverged" for s in said), f"exit {code}: {text}"
    return code == 1 and bool(said) and all(s[1] == "diverged" and s[2] == k for s in said), f"exit {code}: {text}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", choices=ARCHS, default="qwen2")
    ap.add_argument("--level", choices=("mix", "L0", "L1"), default="mix")
    ap.add_argument("--task", choices=("statistics", "tensor"), default="statistics")
    ap.add_argument("--runs", default="golden,sdpa,sdpa-weight", help="comma-separated IMPL[-PLANT]")
    ap.add_argument("--layer", type=int, default=None, help="the planted layer (default: seeded by --seed)")
    ap.add_argument("--seed", default=None, help="a string seeding the planted layer (default: today's date)")
    ap.add_argument("--swap-layer", type=int, default=None, help="swap1's layer (default: (K+3) mod 6)")
    ap.add_argument("--steps", default="1")
    a = ap.parse_args(argv)
    layer = default_layer(a.seed) if a.layer is None else a.layer
    swap = other_layer(layer) if a.swap_layer is None else a.swap_layer
    if not (0 <= layer < LAYERS and 0 <= swap < LAYERS):
        raise SystemExit(f"--layer and --swap-layer are layers 0..{LAYERS - 1}")
    runs = [r for r in a.runs.split(",") if r]
    parsed = [parse_run(r) for r in runs]
    print(f"planted layer K = {layer}, swap1 layer J = {swap}", flush=True)

    import torch
    torch.set_num_threads(1)
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    os.makedirs(a.out, exist_ok=True)
    cfg = os.path.join(a.out, "config.json")
    with open(cfg, "w") as f:
        json.dump(config_doc(a.level, a.task), f)
    swiglu_op()  # defined before the profiler starts, so msprobe hooks it
    steps = [int(s) for s in a.steps.split(",")]
    manifest = {"arch": a.arch, "level": a.level, "task": a.task, "layer": layer, "swap_layer": swap,
                "layers": LAYERS, "steps": steps, "golden": "golden", "runs": {}}
    for run, (impl, plant) in zip(runs, parsed):
        model = build(a.arch, impl, plant, layer, swap)
        prof = PrecisionDebuggerProfiler({"config_path": cfg, "stages": list(STAGES)}, rank=0,
                                         save_path=os.path.join(a.out, run))
        run_one(prof, model, impl, steps)
        for stage in STAGES:
            if not glob.glob(os.path.join(a.out, run, f"step_{steps[0]}", stage, "*", "*", "dump.json")):
                raise SystemExit(f"{run}: msprobe wrote no dump.json for {stage}")
        manifest["runs"][run] = {"impl": impl, "plant": plant, "expect_layer": expect_layer(impl, plant, layer),
                                 "dtype_aware": impl == "bf16"}
        print(f"{run}: written", flush=True)
    path = os.path.join(a.out, "manifest.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    if old.get("layer") == layer:
        manifest["runs"] = {**old.get("runs", {}), **manifest["runs"]}
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
