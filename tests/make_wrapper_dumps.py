"""Write real msprobe dumps on CPU of one small model under the wrappers verl and its users put around it
(FSDP1, FSDP2, DDP, PEFT LoRA, torch.compile, activation checkpointing, identity hooks), through this
package's runtime profiler, for the compare's wrapper tests (tests/test_compare_wrappers.py).

    python make_wrapper_dumps.py OUT --arch qwen2 --level mix --runs plain,fsdp1,fsdp1-weight [--layer K]
        [--no-group]

One process writes the runs it is given, each into OUT/<run> (stages actor_compute_log_prob, a no-grad
forward, and actor_update: forward, backward, one SGD step), on a one-rank gloo group (msprobe writes
rank0) unless --no-group (it writes proc<pid>). A run is WRAP[-weight]:

  plain    the model itself          fsdp1   FullyShardedDataParallel, each decoder layer auto-wrapped
  fsdp2    fully_shard per layer     ddp     DistributedDataParallel
  fsdp1flat  fsdp1 with flat parameters (use_orig_params=False, verl's default): one flat parameter a unit
  lora     peft get_peft_model (B = 0: the forward is unchanged) on every projection
  compile  torch.compile (msprobe 26.2 refuses the compiled module: no dump)
  ckpt     checkpoint_wrapper around each layer's MLP
  hook     an identity forward hook on one block (--hook-layer)
  hookall  an identity forward hook on every block

  -weight  layer K's MLP down projection weight x1.01 (seq: block K's linear; qwen3_moe: one expert's x1.05)

Arch qwen2 is make_cross_impl_dumps' transformers Qwen2 (6 layers), qwen3_moe its Qwen3-MoE (8 experts,
top 2, fused); seq is an nn.Sequential of an embedding, eight Linear+Tanh blocks and a head. OUT/manifest.json says each run's right answer.

--save-checkpoint DIR writes the qwen3_moe model (before any plant) with save_pretrained; --checkpoint DIR
loads it instead of building one, as the installed transformers builds it: 5.x fuses the experts, 4.x keeps
one module per expert (mlp.experts.J), so one checkpoint runs on both releases (tests/test_moe_releases.py);
--experts-loop has 5.x's fused experts run one expert at a time (experts_implementation="eager")."""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime"))

import make_cross_impl_dumps as X  # noqa: E402
from scenarios import gloo  # noqa: E402

WRAPS = ("plain", "fsdp1", "fsdp1flat", "fsdp2", "ddp", "lora", "compile", "ckpt", "hook", "hookall")
SEQ_BLOCKS = 8
STAGES = X.STAGES


def parse_run(run: str) -> tuple[str, bool]:
    wrap, _, plant = run.partition("-")
    if wrap not in WRAPS or plant not in ("", "weight"):
        raise SystemExit(f"unknown run {run!r}: WRAP[-weight], WRAP in {WRAPS}")
    return wrap, plant == "weight"


def build_seq(plant: bool, layer: int):
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(X.HIDDEN, X.HIDDEN), nn.Tanh()) for _ in range(SEQ_BLOCKS)]
    model = nn.Sequential(nn.Embedding(X.VOCAB, X.HIDDEN), *blocks, nn.Linear(X.HIDDEN, X.VOCAB))
    if plant:
        with torch.no_grad():
            model[1 + layer][0].weight.mul_(1.01)
    return model


def save_checkpoint(model, path: str) -> None:
    """save_pretrained, and the config keys transformers 4.x reads where 5.x writes new ones (num_experts for
    num_local_experts, rope_theta beside rope_parameters), as Qwen's published checkpoints hold them."""
    model.save_pretrained(path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg.setdefault("num_experts", cfg.get("num_local_experts"))
    cfg.setdefault("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def load(path: str, plant: bool, layer: int, loop: bool = False):
    """A saved Qwen3-MoE as this transformers builds it; the plant scales expert X.MOE_EXPERT's down
    projection x1.05 in layer `layer`, a slice of the fused 3-D weight or that expert's own Linear. `loop`:
    transformers 5's fused experts run one expert at a time (experts_implementation="eager")."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                              attn_implementation="eager",
                                                              **({"experts_implementation": "eager"} if loop else {}))
    if plant:
        experts = model.model.layers[layer].mlp.experts
        with torch.no_grad():
            if isinstance(experts, torch.nn.ModuleList):
                experts[X.MOE_EXPERT].down_proj.weight.mul_(1.05)
            else:
                experts.down_proj[X.MOE_EXPERT].mul_(1.05)
    return model


def blocks_of(arch: str, model) -> list:
    return list(model)[1:1 + SEQ_BLOCKS] if arch == "seq" else list(model.model.layers)


def _identity(_module, _inputs, output):
    return output


def wrap(arch: str, name: str, model, hook_layer: int):
    """The model as WRAP puts it around the plain one."""
    import torch

    blocks = blocks_of(arch, model)
    if name == "hook":
        blocks[hook_layer].register_forward_hook(_identity)
    elif name == "hookall":
        for b in blocks:
            b.register_forward_hook(_identity)
    elif name in ("fsdp1", "fsdp1flat"):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return FSDP(model, device_id=torch.device("cpu"), use_orig_params=name == "fsdp1",
                    auto_wrap_policy=ModuleWrapPolicy({type(blocks[0])}))
    elif name == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for b in blocks:
            fully_shard(b)
        fully_shard(model)
    elif name == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model)
    elif name == "lora":
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] if arch == "qwen2" \
            else r"[1-8]\.0"
        return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    elif name == "compile":
        return torch.compile(model, backend="eager")
    elif name == "ckpt":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

        inner = type(blocks[0].mlp) if arch == "qwen2" else torch.nn.Linear
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, inner))
    return model


def make_all(root, jobs: dict[str, list[str]], at_once: int = 2, python: str = sys.executable) -> None:
    """This script once per job (root/<name>, with that job's arguments), `at_once` processes at a time (one
    per core), each on one thread, run by `python` (another venv's: tests/test_moe_releases.py); the tests'
    one way to make their wrapper dumps. Raises with the output's tail where one fails."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (os.path.dirname(here), os.environ.get("PYTHONPATH")) if p))
    names = list(jobs)
    for i in range(0, len(names), at_once):
        procs = [(n, subprocess.Popen([python, os.path.abspath(__file__), os.path.join(str(root), n),
                                       *jobs[n]], cwd=str(root), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)) for n in names[i:i + at_once]]
        for n, p in procs:
            out, _ = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"make_wrapper_dumps.py {n}: {out[-3000:]}")


def seq_log_probs(model, ids, _mask):
    logits = model(ids)
    return logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", choices=("qwen2", "qwen3_moe", "seq"), default="qwen2")
    ap.add_argument("--level", choices=("mix", "L0", "L1"), default="mix")
    ap.add_argument("--runs", default="plain,fsdp1-weight")
    ap.add_argument("--layer", type=int, default=None, help="the planted layer (default: seeded by today's date)")
    ap.add_argument("--hook-layer", type=int, default=None, help="hook's block (default: (K+3) mod layers)")
    ap.add_argument("--no-group", action="store_true", help="no process group: msprobe writes proc<pid>")
    ap.add_argument("--steps", default="1")
    ap.add_argument("--checkpoint", help="load the model from this directory (save_pretrained) instead")
    ap.add_argument("--save-checkpoint", help="write the unplanted model here first")
    ap.add_argument("--experts-loop", action="store_true",
                    help="with --checkpoint: transformers 5's fused experts run one expert at a time")
    a = ap.parse_args(argv)
    layers = SEQ_BLOCKS if a.arch == "seq" else X.LAYERS
    layer = (X.default_layer() % layers) if a.layer is None else a.layer
    hook_layer = (layer + 3) % layers if a.hook_layer is None else a.hook_layer
    runs = [r for r in a.runs.split(",") if r]
    parsed = [parse_run(r) for r in runs]
    print(f"planted layer K = {layer}, hook layer = {hook_layer}", flush=True)

    import torch

    torch.set_num_threads(1)
    if not a.no_group:
        gloo()
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    os.makedirs(a.out, exist_ok=True)
    cfg = os.path.join(a.out, f"config-{a.level}.json")
    with open(cfg, "w") as f:
        json.dump(X.config_doc(a.level, "statistics"), f)
    steps = [int(s) for s in a.steps.split(",")]
    path = os.path.join(a.out, "manifest.json")
    manifest = json.load(open(path)) if os.path.exists(path) else {"runs": {}}
    manifest.update({"arch": a.arch, "level": a.level, "layer": layer, "hook_layer": hook_layer, "layers": layers})
    if a.save_checkpoint:
        save_checkpoint(X.build(a.arch, "golden", None, layer, 0), a.save_checkpoint)
    for run, (wname, plant) in zip(runs, parsed):
        model = build_seq(plant, layer) if a.arch == "seq" else \
            load(a.checkpoint, plant, layer, a.experts_loop) if a.checkpoint else \
            X.build(a.arch, "golden", "weight" if plant else None, layer, 0)
        model = wrap(a.arch, wname, model, hook_layer)
        prof = PrecisionDebuggerProfiler({"config_path": cfg, "stages": list(STAGES)}, rank=0,
                                         save_path=os.path.join(a.out, run))
        X.run_one(prof, model, "golden", steps, seq_log_probs if a.arch == "seq" else X.log_probs)
        for stage in STAGES:
            if not glob.glob(os.path.join(a.out, run, f"step_{steps[0]}", stage, "*", "*", "dump.json")):
                raise SystemExit(f"{run}: msprobe wrote no dump.json for {stage}")
        manifest["runs"][run] = {"wrap": wname, "expect_layer": layer if plant else None,
                                 "group": not a.no_group}
        print(f"{run}: written", flush=True)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
