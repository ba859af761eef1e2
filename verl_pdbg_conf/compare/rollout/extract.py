"""Read the inference engine's own statements of what it fused off the installed vLLM, and write them as
data for the rollout compare (table.py), which never imports vLLM:

- `packed`: per architecture, the model class's `packed_modules_mapping` (qkv_proj <- q_proj, k_proj,
  v_proj; gate_up_proj <- gate_proj, up_proj), with the entries its __init__ adds where its config
  builds the module: the engine module whose output is its parts' outputs
  concatenated on the last axis.
- `classes`: vLLM's layer classes that compute something no trainer module computes alone, each probed
  here on a small input so that a changed engine fails this script instead of the compare:
  RMSNorm called with a residual returns (norm(x + residual), x + residual); SiluAndMul is
  silu(x[..., :d]) * x[..., d:]; RotaryEmbedding and Attention have no module in a transformers model;
  LogitsProcessor applies the lm_head to the rows the engine samples from; GateLinear is the router's
  linear (its output the router logits); MoERunner is the fused experts (every routed expert of a layer,
  the routing itself, and the shared experts where the model hands them over).
- `moe`: per architecture, how its model builds its fused experts (the keyword arguments of its
  FusedMoE / FusedMoEFactory call, read from the model's source): the experts' and router's module
  names, the shared experts it hands over, and which HF config keys set top-k, renormalisation and
  scoring. `routing` says how the engine's router chooses, probed here on random logits.

    python -m verl_pdbg_conf.compare.rollout.extract OUT.json     (in a venv with vllm installed)"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys

# what the compare needs of a FusedMoE call: module names and the routing's settings
_MOE_KEYS = ("prefix", "gate", "shared_experts", "top_k", "renormalize", "scoring_func", "use_grouped_topk",
             "num_expert_group", "topk_group", "e_score_correction_bias", "custom_routing_function",
             "routed_scaling_factor", "num_experts")


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
        mapping = {**_added_in_init(getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls)),
                   **dict(mapping or {})}
        if mapping:
            out[arch] = {k: list(v) for k, v in sorted(mapping.items())}
    return out


def _added_in_init(cls) -> dict:
    """Entries a model adds to its packed_modules_mapping when it is built, where its config makes the module
    (Qwen2-MoE's shared expert: `self.packed_modules_mapping["gate_up_proj"] = [...]`)."""
    try:
        tree = ast.parse(inspect.getsource(cls).lstrip())
    except (OSError, TypeError, SyntaxError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if ast.unparse(target.value) == "self.packed_modules_mapping":
                try:
                    out[ast.literal_eval(target.slice)] = list(ast.literal_eval(node.value))
                except ValueError:
                    continue
    return out


def moe_blocks() -> dict:
    """Per architecture, its model's FusedMoE / FusedMoEFactory call (the first one of its module): each
    setting as the HF config key it reads (`config.num_experts_per_tok` -> {"config": "num_experts_per_tok"}),
    an attribute it is handed (`self.shared_expert` -> {"self": "shared_expert"}), its
    own module name (`prefix=f"{prefix}.experts"` -> {"module": "experts"}), a constant, or the expression as written."""
    from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS

    out = {}
    for arch, (module, _cls) in sorted(_TEXT_GENERATION_MODELS.items()):
        try:
            tree = ast.parse(inspect.getsource(importlib.import_module(f"vllm.model_executor.models.{module}")))
        except Exception:  # a model module that needs what the CPU build lacks
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) in ("FusedMoE", "FusedMoEFactory", "SharedFusedMoE"):
                out[arch] = {"call": _name(node.func), **{k.arg: _value(k.value) for k in node.keywords
                                                          if k.arg in _MOE_KEYS}}
                break
    return out


def _name(func) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _value(node):
    if isinstance(node, ast.Constant):
        return {"constant": node.value}
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in ("config", "hf_config", "text_config"):
            return {"config": node.attr}
        if node.value.id == "self":
            return {"self": node.attr}
    if isinstance(node, ast.JoinedStr):  # f"{prefix}.experts"
        tail = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        return {"module": tail.rpartition(".")[2]}
    return {"expression": ast.unparse(node)}


def probe_routing() -> dict:
    """The engine's router on random logits: which experts it keeps and with what weights. What is written
    is what held here; the compare recomputes the choice the same way."""
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.router.router_factory import create_fused_moe_router

    torch.manual_seed(0)
    logits, hidden = torch.randn(64, 8), torch.randn(64, 4)
    with set_current_vllm_config(VllmConfig()):
        for renormalize in (True, False):
            router = create_fused_moe_router(top_k=2, global_num_experts=8, renormalize=renormalize,
                                             scoring_func="softmax")
            weights, ids = router.select_experts(hidden_states=hidden, router_logits=logits)
            kept, ref = logits.topk(2, dim=-1)
            assert torch.equal(ids.long().sort(-1)[0], ref.sort(-1)[0]), "softmax top-k: the largest logits"
            probs = logits.softmax(-1).gather(1, ids.long())
            want = probs / probs.sum(-1, keepdim=True) if renormalize else probs
            assert torch.allclose(weights.float(), want, atol=1e-5), f"weights, renormalize={renormalize}"
    return {"softmax": {"choose": "top_k largest router logits (softmax is monotonic)",
                        "weights": "softmax of the logits at the chosen experts, divided by their sum where "
                                   "renormalize", "router": type(router).__name__,
                        "defaults": {"scoring_func": "softmax", "renormalize": True}}}


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
        "SharedExperts": {"fused": True, "why": "the fused experts' wrapper that calls the shared expert module "
                                                "(its own record) and returns nothing"},
        "LogitsProcessor": {"counterpart": "lm_head", "rows": "sampled",
                            "why": "applies lm_head to the hidden rows the engine samples from: the last "
                                   "scheduled token of each request"},
        "GateLinear": {"router": True, "why": "the router's linear: its output 0 is the router logits "
                                              "[tokens, experts], the trainer router's output 0"},
        "MoERunner": {"experts": True,
                      "why": "every routed expert of the layer in one module, called with hidden_states (its "
                             "input 0) and "
                             "router_logits (the hidden states again where it holds the gate); it chooses the "
                             "experts inside; its output adds the shared experts' where it was handed them "
                             "(the trainer's whole MoE block output)"},
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import vllm

    doc = {"engine": "vllm", "version": vllm.__version__, "packed": packed_mappings(), "classes": probe_classes(),
           "moe": moe_blocks(), "routing": probe_routing()}
    with open(argv[0], "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"{argv[0]}: {len(doc['packed'])} architectures with packed modules, {len(doc['moe'])} with fused experts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
