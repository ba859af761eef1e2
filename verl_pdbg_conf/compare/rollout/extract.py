"""Read the inference engine's own statements of what it fused off the installed vLLM, and write them as
data for the rollout compare (table.py), which never imports vLLM:

- `packed`: per architecture, the model class's `packed_modules_mapping` (qkv_proj <- q_proj, k_proj,
  v_proj; gate_up_proj <- gate_proj, up_proj): the engine module whose output is its parts' outputs
  concatenated on the last axis.
- `classes`: vLLM's layer classes that compute something no trainer module computes alone, each probed
  here on a small input so that a changed engine fails this script instead of the compare:
  RMSNorm called with a residual returns (norm(x + residual), x + residual); SiluAndMul is
  silu(x[..., :d]) * x[..., d:]; RotaryEmbedding and Attention have no module in a transformers model;
  LogitsProcessor applies the lm_head to the rows the engine samples from.

    python -m verl_pdbg_conf.compare.rollout.extract OUT.json     (in a venv with vllm installed)"""

from __future__ import annotations

import importlib
import json
import sys


def packed_mappings() -> dict:
    from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS

    out, failed = {}, []
    for arch, (module, cls) in sorted(_TEXT_GENERATION_MODELS.items()):
        try:
            mapping = getattr(getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls),
                              "packed_modules_mapping", None)
        except Exception:  # a model module that needs what the CPU build lacks
            failed.append(arch)
            continue
        if mapping:
            out[arch] = {k: list(v) for k, v in sorted(dict(mapping).items())}
    return out


def probe_classes() -> dict:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.layernorm import RMSNorm

    torch.manual_seed(0)
    x, r = torch.randn(3, 8), torch.randn(3, 8)
    with set_current_vllm_config(VllmConfig()):
        norm = RMSNorm(8, eps=1e-6)
        normed, summed = norm.forward_native(x, r)
        ref = (x + r) * torch.rsqrt((x + r).pow(2).mean(-1, keepdim=True) + 1e-6)
        assert torch.allclose(summed, x + r) and torch.allclose(normed, ref, atol=1e-5), "RMSNorm(x, residual)"
        g = torch.randn(3, 16)
        act = SiluAndMul().forward_native(g)
        assert torch.allclose(act, torch.nn.functional.silu(g[:, :8]) * g[:, 8:], atol=1e-6), "SiluAndMul"
    return {
        "RMSNorm": {"residual_output": {"output.0": "output.0", "output.1": "input.0"},
                    "why": "called with (x, residual) it returns (norm(x + residual), x + residual): the "
                           "trainer's norm takes x + residual"},
        "SiluAndMul": {"fused": True, "why": "silu(x[..., :d]) * x[..., d:]: the trainer's act_fn computes "
                                             "silu alone; the product is the down projection's input"},
        "RotaryEmbedding": {"fused": True, "why": "one module shared by all layers; the trainer rotates q "
                                                  "and k in a function"},
        "Attention": {"fused": True, "why": "the attention kernel; the trainer calls it as a function"},
        "LogitsProcessor": {"counterpart": "lm_head", "rows": "sampled",
                            "why": "applies lm_head to the hidden rows the engine samples from: the last "
                                   "scheduled token of each request"},
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import vllm

    doc = {"engine": "vllm", "version": vllm.__version__, "packed": packed_mappings(), "classes": probe_classes()}
    with open(argv[0], "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"{argv[0]}: {len(doc['packed'])} architectures with packed modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
