"""Module trees aligned across wrappers (pipeline/trees.py) and the coverage of a pair
(pipeline/coverage.py), on module paths as the real wrappers write them (measured in
tests/test_compare_wrappers.py), and the proc<pid> against rank0 pairing."""

from __future__ import annotations

import pytest

from verl_pdbg_conf.compare.pairs import Side, pair_up
from verl_pdbg_conf.compare.pipeline.coverage import Coverage, kind
from verl_pdbg_conf.compare.pipeline.reading import Record
from verl_pdbg_conf.compare.pipeline.trees import Alignment, Tree, parse_call

LAYER = [("input_layernorm", "Qwen2RMSNorm"), ("self_attn", "Qwen2Attention"), ("self_attn.q_proj", "Linear"),
         ("self_attn.k_proj", "Linear"), ("self_attn.v_proj", "Linear"), ("self_attn.o_proj", "Linear"),
         ("post_attention_layernorm", "Qwen2RMSNorm"), ("mlp", "Qwen2MLP"), ("mlp.gate_proj", "Linear"),
         ("mlp.up_proj", "Linear"), ("mlp.down_proj", "Linear")]


def plain(layers: int = 3) -> list[tuple[str, str]]:
    mods = [("model", "Qwen2Model"), ("model.embed_tokens", "Embedding")]
    for i in range(layers):
        mods.append((f"model.layers.{i}", "Qwen2DecoderLayer"))
        mods += [(f"model.layers.{i}.{p}", c) for p, c in LAYER]
    return mods + [("model.norm", "Qwen2RMSNorm"), ("lm_head", "Linear")]


def fsdp1(mods):
    out = [("_fsdp_wrapped_module", "Qwen2ForCausalLM")]
    for p, c in mods:
        parts = p.split(".")
        if len(parts) > 3 and parts[1] == "layers":
            p = ".".join(parts[:3] + ["_fsdp_wrapped_module"] + parts[3:])
        elif len(parts) == 3 and parts[1] == "layers":
            p += "._fsdp_wrapped_module"
        out.append(("_fsdp_wrapped_module." + p, c))
    return out


def prefixed(prefix: str, cls: str):
    return lambda mods: [(prefix.rstrip("."), cls)] + [(prefix + p, c) for p, c in mods]


def lora(mods):
    out = []
    for p, c in mods:
        out.append(("base_model.model." + p, c))
        if p.endswith("_proj"):
            out += [(f"base_model.model.{p}.{x}", k) for x, k in (
                ("base_layer", "Linear"), ("lora_dropout.default", "Identity"), ("lora_A.default", "Linear"),
                ("lora_B.default", "Linear"))]
    return out


def ckpt(mods):
    out = []
    for p, c in mods:
        if p.endswith(".mlp"):
            out.append((p, "CheckpointWrapper"))
        if ".mlp" in p:
            p = p.replace(".mlp", ".mlp._checkpoint_wrapped_module", 1)
        out.append((p, c))
    return out


def tree(mods) -> Tree:
    t = Tree()
    for p, c in mods:
        parent = p.rsplit(".", 1)[0] if "." in p else None
        cls = dict(mods).get(parent)
        t.add(f"Module.{p}.{c}.forward.0", f"Module.{parent}.{cls}.forward.0" if cls else None)
    return t


WRAPS = {"fsdp1": fsdp1, "ddp": prefixed("module.", "DistributedDataParallel"),
         "compile": prefixed("_orig_mod.", "OptimizedModule"), "lora": lora, "ckpt": ckpt}


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_every_plain_module_pairs_with_its_wrapped_self(wrap):
    g = plain()
    t = WRAPS[wrap](g)
    a = Alignment(tree(t), tree(g))
    back = {gp: tp for tp, (gp, _c) in a.to_golden.items()}
    assert set(back) == {p for p, _c in g}
    for gp, tp in back.items():
        words = [w for w in tp.split(".") if w not in ("_fsdp_wrapped_module", "module", "_orig_mod", "base_model",
                                                           "_checkpoint_wrapped_module")]
        if wrap == "lora":
            words = words[1:]  # base_model.model.<path>
        assert ".".join(words) == gp, (wrap, gp, tp)


def test_lora_pairs_the_wrapping_layer_and_leaves_its_branch_inside():
    a = Alignment(tree(lora(plain(1))), tree(plain(1)))
    assert a.to_golden["base_model.model.model.layers.0.self_attn.q_proj"][0] == "model.layers.0.self_attn.q_proj"
    assert "base_model.model.model.layers.0.self_attn.q_proj.base_layer" not in a.to_golden
    # an API call in the base layer is scoped to the wrapping layer's counterpart
    call = "Module.base_model.model.model.layers.0.self_attn.q_proj.base_layer.Linear.forward.0"
    a.target.parent[call] = "Module.base_model.model.model.layers.0.self_attn.q_proj.Linear.forward.0"
    assert a.call(call) == "Module.model.layers.0.self_attn.q_proj.Linear.forward.0"


def test_both_sides_wrapped_differently():
    g = plain(2)
    a = Alignment(tree(fsdp1(g)), tree(prefixed("module.", "DistributedDataParallel")(g)))
    assert a.to_golden["_fsdp_wrapped_module.model.layers.1._fsdp_wrapped_module.mlp.down_proj"][0] == \
        "module.model.layers.1.mlp.down_proj"
    # FSDP1's inner root (the model's class) against DDP's wrapper (another class): no counterpart
    assert "_fsdp_wrapped_module" not in a.to_golden


def test_layers_never_pair_across_indices_and_the_same_tree_is_identity():
    g = plain(2)
    assert Alignment(tree(g), tree(g)).identity
    t = [(p.replace("layers.1", "layers.7"), c) for p, c in g]
    a = Alignment(tree(t), tree(g))
    assert not any(".7" in tp and ".1" in gp for tp, (gp, _c) in a.to_golden.items())


def test_rename_keeps_the_call_and_direction():
    a = Alignment(tree(fsdp1(plain(1))), tree(plain(1)))
    name = "Module._fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.mlp.down_proj.Linear.parameters_grad.0"
    r = Record(name, name, name.rsplit(".", 1)[0], "parameters_grad", [], module="_fsdp_wrapped_module.model."
               "layers.0._fsdp_wrapped_module.mlp.down_proj")
    a.rename(r)
    assert r.key == "Module.model.layers.0.mlp.down_proj.Linear.parameters_grad.0" and r.layer == 0
    assert parse_call(r.key) == ("model.layers.0.mlp.down_proj", "Linear", "parameters_grad.0")


def _rec(name, module=None, scope=""):
    return Record(name, name, name.rsplit(".", 2)[0], "forward", [], module=module, scope=scope)


def test_coverage_counts_wrappers_and_branches_inside_a_paired_module_as_compared():
    cov = Coverage()
    cov.pair(_rec("Module.w.Outer.forward.0", "w"), None)  # a wrapper level around paired modules
    cov.pair(_rec("Module.w.q.Linear.forward.0", "w.q"), _rec("Module.q.Linear.forward.0", "q"))
    cov.pair(_rec("Module.w.q.lora_A.Linear.forward.0", "w.q.lora_A"), None)  # a branch inside q
    cov.pair(_rec("Functional.linear.1.forward", scope="Module.w.q.Linear.forward.0"), None)
    out = cov.finish()
    assert out["full"] and out["target"]["share"] == 1.0 and out["target"]["accounted_modules"] == 2


def test_coverage_names_what_was_not_compared():
    cov = Coverage()
    cov.pair(_rec("Module.a.layers.0.x.X.forward.0", "a.layers.0.x"), None)
    cov.pair(_rec("Module.a.layers.1.x.X.forward.0", "a.layers.1.x"), None)
    cov.golden_only([_rec("Module.b.X.forward.0", "b")])
    out = cov.finish()
    assert not out["full"] and out["target"]["uncompared_modules"] == {"a.layers.*.x": 2}
    assert out["golden"]["share"] == 0.0 and kind("") == "(outside any module)"
    assert Coverage().finish()["full"]  # nothing on either side: nothing left uncompared


def test_proc_pairs_with_rank0_and_says_so(tmp_path):
    t = [Side(("step_1", "actor_update", "step0"), "proc123", str(tmp_path / "a" / "dump.json"))]
    g = [Side(("step_1", "actor_update", "step0"), "rank0", str(tmp_path / "b" / "dump.json"))]
    pairs, only_t, only_g, notes = pair_up(t, g)
    assert len(pairs) == 1 and not only_t and not only_g
    assert notes[0].rule == "compare-pairing" and notes[0].severity.value == "info" and "proc123" in notes[0].message
    # two ranks against one proc directory stay apart
    g2 = g + [Side(("step_1", "actor_update", "step0"), "rank1", str(tmp_path / "c" / "dump.json"))]
    pairs, only_t, only_g, _ = pair_up(t, g2)
    assert not pairs and len(only_t) == 1 and len(only_g) == 2
