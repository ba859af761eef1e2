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
  names, the shared experts it hands over, which HF config keys set top-k, renormalisation, scoring and
  expert groups, and where the score-correction bias lives. `routing` says how the engine's router
  chooses, probed here on random logits: softmax top-k, and grouped top-k checked against the compare's
  own recomputation (routing.choose), so that the compare follows the engine.

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
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]:
            call = next((n for n in ast.walk(cls) if isinstance(n, ast.Call)
                         and _name(n.func) in ("FusedMoE", "FusedMoEFactory", "SharedFusedMoE")), None)
            if call is not None:
                out[arch] = {"call": _name(call.func), **{k.arg: _passed(k.value, cls, tree) for k in call.keywords
                                                          if k.arg in _MOE_KEYS}}
                break
    return out


def _passed(node, cls, tree):
    """_value(node); where node names an argument of its class's __init__ (Mixtral's `top_k=top_k`), what the
    module's call of that class passes for it (`MixtralMoE(top_k=config.num_experts_per_tok)`)."""
    if not (isinstance(node, ast.Name) and isinstance(cls, ast.ClassDef)):
        return _value(node)
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None or node.id not in [a.arg for a in init.args.args + init.args.kwonlyargs]:
        return _value(node)
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and _name(call.func) == cls.name:
            given = next((k.value for k in call.keywords if k.arg == node.id), None)
            if given is not None:
                return _value(given)
    return _value(node)


def _self_chain(node) -> str:
    """self.a.b -> "a.b"; "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join(reversed(parts)) if parts and isinstance(node, ast.Name) and node.id == "self" else ""


def _name(func) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


_CONFIGS = ("config", "hf_config", "text_config")


def _value(node):
    if isinstance(node, ast.Constant):
        return {"constant": node.value}
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in _CONFIGS:
            return {"config": node.attr}
    chain = _self_chain(node)
    if chain:  # self.gate.e_score_correction_bias -> {"self": "gate.e_score_correction_bias"}
        return {"self": chain}
    if isinstance(node, ast.Call) and _name(node.func) == "getattr" and len(node.args) == 3 \
            and isinstance(node.args[0], ast.Name) and node.args[0].id in _CONFIGS \
            and all(isinstance(a, ast.Constant) for a in node.args[1:]):
        return {"config": node.args[1].value, "default": node.args[2].value}  # getattr(config, 'n_group', 1)
    if isinstance(node, ast.JoinedStr):  # f"{prefix}.experts"
        tail = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        return {"module": tail.rpartition(".")[2]}
    return {"expression": ast.unparse(node)}


def probe_routing() -> dict:
    """The engine's router on random logits: which experts it keeps and with what weights, checked against
    the compare's own recomputation (routing.py). What is written is what held here."""
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.router.router_factory import create_fused_moe_router

    from verl_pdbg_conf.compare.rollout import routing as R

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
        grouped_router, cases = None, 0
        # grouped top-k as GLM-4.5 and DeepSeek-V3 call it: sigmoid with a score-correction bias (noaux_tc),
        # and softmax without; 16 experts in 4 groups so that both choices (groups, then experts) matter
        logits16, hidden16 = 0.5 * torch.randn(256, 16), torch.randn(256, 4)
        for scoring, bias, groups, top_groups, k in (("sigmoid", 0.05 * torch.randn(16), 4, 2, 3),
                                                     ("sigmoid", 0.05 * torch.randn(16), 2, 1, 2),
                                                     ("softmax", None, 4, 2, 3), ("sigmoid", None, 4, 1, 2)):
            grouped_router = create_fused_moe_router(
                top_k=k, global_num_experts=16, renormalize=True, use_grouped_topk=True, num_expert_group=groups,
                topk_group=top_groups, scoring_func=scoring, e_score_correction_bias=bias)
            _, ids = grouped_router.select_experts(hidden_states=hidden16, router_logits=logits16)
            setting = R.Setting(k, scoring=scoring, grouped=True, n_group=groups, topk_group=top_groups,
                                bias="gate.e_score_correction_bias" if bias is not None else "")
            for row in range(logits16.shape[0]):
                mine, margin = R.choose(logits16[row], k, setting, bias)
                assert mine == tuple(sorted(int(i) for i in ids[row])), f"grouped top-k ({scoring}), row {row}"
                assert margin >= 0 and R.margin_of(logits16[row], mine, setting, bias) == margin
                cases += 1
    return {"softmax": {"choose": "top_k largest router logits (softmax is monotonic)",
                        "weights": "softmax of the logits at the chosen experts, divided by their sum where "
                                   "renormalize", "router": type(router).__name__,
                        "defaults": {"scoring_func": "softmax", "renormalize": True}},
            "grouped": {"choose": "scores = scoring_func(float32 logits) + e_score_correction_bias (where the "
                                  "model passes one); per group its score: the sum of its 2 largest scores with "
                                  "a bias, its largest without; the topk_group groups of num_expert_group with "
                                  "the largest group scores kept, then the top_k largest scores within them",
                        "weights": "the scores without the bias at the chosen experts, divided by their sum where "
                                   "renormalize, times routed_scaling_factor",
                        "scoring": ["sigmoid", "softmax"], "router": type(grouped_router).__name__,
                        "checked": f"routing.choose against the router on {cases} random rows"}}


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
