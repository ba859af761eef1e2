"""Which ops compute the same thing in two implementations: a fused kernel and the ops it replaces (as
torch.ao.ns's sets of related ops). Pairing compares such a group at its boundary (the fused op's output
against the last decomposed op's) and names it in the structure difference. One table, data only."""

from __future__ import annotations

# name -> (fused ops, ops of the decomposition). Names are msprobe's op names without their prefix
# (Functional.scaled_dot_product_attention -> scaled_dot_product_attention, NPU.npu_rms_norm -> npu_rms_norm).
EQUIVALENT_OPS = {
    "attention": (
        frozenset({"scaled_dot_product_attention", "npu_fusion_attention", "npu_fusion_attention_v2",
                   "flash_attn_func", "flash_attn_varlen_func", "_flash_attention_forward",
                   "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                   "npu_prompt_flash_attention", "npu_incre_flash_attention"}),
        frozenset({"matmul", "__matmul__", "bmm", "baddbmm", "softmax", "_softmax", "dropout", "mul", "__mul__",
                   "add", "__add__", "__iadd__", "div", "__truediv__", "masked_fill", "transpose", "contiguous",
                   "repeat_kv", "expand", "reshape", "to", "float", "type_as", "__getitem__"})),
    "rms_norm": (
        frozenset({"rms_norm", "npu_rms_norm", "fused_rms_norm", "rms_norm_fn"}),
        frozenset({"pow", "mean", "add", "__add__", "rsqrt", "mul", "__mul__", "to", "float", "type_as",
                   "square", "sqrt", "div", "__truediv__", "__rmul__"})),
    "swiglu": (
        frozenset({"npu_swiglu", "swiglu", "silu_and_mul"}),
        frozenset({"silu", "mul", "__mul__", "chunk", "split", "sigmoid", "__getitem__"})),
    "rotary": (
        frozenset({"npu_rotary_mul", "apply_rotary_emb", "rotary_emb", "npu_apply_rotary_pos_emb"}),
        frozenset({"mul", "__mul__", "add", "__add__", "cat", "neg", "__neg__", "__getitem__", "sub", "__sub__",
                   "unsqueeze", "rotate_half", "chunk"})),
}
_FUSED = {op: name for name, (fused, _) in EQUIVALENT_OPS.items() for op in fused}


def fused_kind(ops) -> str | None:
    """The table entry a group of ops is the fused side of: one fused op (plus decomposition-side glue)."""
    kinds = {_FUSED[o] for o in ops if o in _FUSED}
    return next(iter(kinds)) if len(kinds) == 1 else None


def equivalent(one, other) -> str | None:
    """The table entry under which two groups of ops compute the same thing, or None: one side holds a
    fused op of it, the other side only ops of its decomposition (or a fused op of the same entry)."""
    for a, b in ((one, other), (other, one)):
        kind = fused_kind(a)
        if kind is None or not b:
            continue
        fused, parts = EQUIVALENT_OPS[kind]
        if all(o in parts or o in fused for o in b) and all(o in fused or o in parts for o in a):
            return kind
    return None
