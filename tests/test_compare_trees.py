"""Module trees aligned across wrappers (pipeline/trees.py) and the coverage of a pair
(pipeline/coverage.py), on module paths as the real wrappers write them (measured in
tests/test_compare_wrappers.py), and the proc<pid> against rank0 pairing."""

from __future__ import annotations

import pytest

from verl_pdbg_conf.compare.pairs import RankDump, pair_up
from verl_pdbg_conf.compare.pipeline.coverage import Coverage, kind
from verl_pdbg_conf.compare.records import Record
from verl_pdbg_conf.compare.pipeline.trees import Tree, TreeAlignment, parse_call

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
    a = TreeAlignment(tree(t), tree(g))
    back = {gp: tp for tp, (gp, _c) in a.to_golden.items()}
    assert set(back) == {p for p, _c in g}
    for gp, tp in back.items():
        words = [w for w in tp.split(".") if w not in ("_fsdp_wrapped_module", "module", "_orig_mod", "base_model",
                                                           "_checkpoint_wrapped_module")]
        if wrap == "lora":
            words = words[1:]  # base_model.model.<path>
        assert ".".join(words) == gp, (wrap, gp, tp)


def test_lora_pairs_the_wrapping_layer_and_leaves_its_branch_inside():
    a = TreeAlignment(tree(lora(plain(1))), tree(plain(1)))
    assert a.to_golden["base_model.model.model.layers.0.self_attn.q_proj"][0] == "model.layers.0.self_attn.q_proj"
    assert "base_model.model.model.layers.0.self_attn.q_proj.base_layer" not in a.to_golden
    # an API call in the base layer is scoped to the wrapping layer's counterpart
    call = "Module.base_model.model.model.layers.0.self_attn.q_proj.base_layer.Linear.forward.0"
    a.target.parent[call] = "Module.base_model.model.model.layers.0.self_attn.q_proj.Linear.forward.0"
    assert a.call(call) == "Module.model.layers.0.self_attn.q_proj.Linear.forward.0"


def test_both_sides_wrapped_differently():
    g = plain(2)
    a = TreeAlignment(tree(fsdp1(g)), tree(prefixed("module.", "DistributedDataParallel")(g)))
    assert a.to_golden["_fsdp_wrapped_module.model.layers.1._fsdp_wrapped_module.mlp.down_proj"][0] == \
        "module.model.layers.1.mlp.down_proj"
    # FSDP1's inner root (the model's class) against DDP's wrapper (another class): no counterpart
    assert "_fsdp_wrapped_module" not in a.to_golden


def test_layers_never_pair_across_indices_and_the_same_tree_is_identity():
    g = plain(2)
    assert TreeAlignment(tree(g), tree(g)).identity
    t = [(p.replace("layers.1", "layers.7"), c) for p, c in g]
    a = TreeAlignment(tree(t), tree(g))
    assert not any(".7" in tp and ".1" in gp for tp, (gp, _c) in a.to_golden.items())


def test_rename_keeps_the_call_and_direction():
    a = TreeAlignment(tree(fsdp1(plain(1))), tree(plain(1)))
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
    t = [RankDump(("step_1", "actor_update", "step0"), "proc123", str(tmp_path / "a" / "dump.json"))]
    g = [RankDump(("step_1", "actor_update", "step0"), "rank0", str(tmp_path / "b" / "dump.json"))]
    pairs, only_t, only_g, notes = pair_up(t, g)
    assert len(pairs) == 1 and not only_t and not only_g
    assert notes[0].rule == "compare-pairing" and notes[0].severity.value == "info" and "proc123" in notes[0].message
    # two ranks against one proc directory stay apart
    g2 = g + [RankDump(("step_1", "actor_update", "step0"), "rank1", str(tmp_path / "c" / "dump.json"))]
    pairs, only_t, only_g, _ = pair_up(t, g2)
    assert not pairs and len(only_t) == 1 and len(only_g) == 2


# ---- L1: what one run's call stacks say and the other's cannot

def _api(name, layer, direction="forward", site="m.py:1 in f", shape=(2, 8)):
    from verl_pdbg_conf.compare.dumpread import Row

    rows = [Row(f"{name}.{direction}.{s}.0", f"{name}.{direction}.{s}.0", f"{name}.{direction}", s, direction,
                "torch.float32", list(shape), (1.0, -1.0, 0.0, 2.0), "-1") for s in ("input", "output")]
    return Record(f"{name}.{direction}", f"{name}.{direction}", name.rsplit(".", 1)[0], direction, rows,
                  site=site, layer=layer)


def test_a_layer_known_on_one_side_only_still_pairs_a_known_other_one_does_not():
    """The stacks of an nn.Sequential's update stage give no layer where a LoRA run's (other frames) do."""
    from verl_pdbg_conf.compare.pipeline.pairing import Aligner

    golden = [_api("Functional.linear.0", None)]
    (t, g, _), *_ = Aligner(golden).pairs([_api("Functional.linear.5", 2)])
    assert g is golden[0]
    golden = [_api("Functional.linear.0", 3)]
    pairs = list(Aligner(golden).pairs([_api("Functional.linear.5", 2)]))
    assert pairs[0][1] is None


def test_a_backward_pairs_with_its_forwards_counterpart_whatever_its_stack_says():
    """The forward paired by its name: its backward pairs by its name too, though its layer (read from the
    stacks of the backward pass) says another; a forward with no counterpart: its backward has none."""
    from verl_pdbg_conf.compare.pipeline.pairing import Aligner

    golden = [_api("Torch.rsqrt.12", None), _api("Torch.rsqrt.11", 5, "backward"),
              _api("Torch.rsqrt.12", None, "backward")]
    target = [_api("Torch.rsqrt.12", None), _api("Torch.rsqrt.12", 5, "backward")]
    out = [(t.name, g.name if g else None) for t, g, _ in Aligner(golden).pairs(target) if t is not None]
    assert out == [("Torch.rsqrt.12.forward", "Torch.rsqrt.12.forward"),
                   ("Torch.rsqrt.12.backward", "Torch.rsqrt.12.backward")]
    golden = [_api("Functional.linear.3", 0, "backward")]
    target = [_api("Functional.linear.9", 0, shape=(2, 4)), _api("Functional.linear.9", 0, "backward")]
    assert [g for t, g, _ in Aligner(golden).pairs(target) if t is not None] == [None, None]
    # counters shifted (one op fewer before it), and the backward read in the next mini-batch (verl's update
    # runs a backward after the opening op of the next pass): still its forward's counterpart's
    golden = [_api("Tensor.__mul__.59", 0), _api("Tensor.__mul__.55", 0, "backward"),
              _api("Tensor.__mul__.59", 0, "backward")]
    target = [_api("Tensor.__mul__.55", 0), _api("Tensor.__mul__.55", 0, "backward")]
    target[1].minibatch = 1
    out = [(t.name, g.name if g else None) for t, g, _ in Aligner(golden).pairs(target) if t is not None]
    assert out == [("Tensor.__mul__.55.forward", "Tensor.__mul__.59.forward"),
                   ("Tensor.__mul__.55.backward", "Tensor.__mul__.59.backward")]


def test_wrapper_files_are_read_past_but_a_library_file_of_the_same_name_is_not_one(tmp_path):
    """PEFT's tuners/lora/layer.py is a file the plain run's stacks never hold, even where msprobe has a
    layer.py of its own in both."""
    import json

    from verl_pdbg_conf.compare.pipeline.stacks import Stacks, skip_foreign

    lib = "File /x/msprobe/core/layer.py, line 5, in hook"
    model = "File /w/train.py, line 9, in log_probs"
    (tmp_path / "t.json").write_text(json.dumps({"0": [["Functional.linear.0.forward"], [
        lib, "File /x/peft/tuners/lora/layer.py, line 1102, in forward", model]]}))
    (tmp_path / "g.json").write_text(json.dumps({"0": [["Functional.linear.0.forward"], [lib, model]]}))
    t, g = Stacks(str(tmp_path / "t.json")), Stacks(str(tmp_path / "g.json"))
    assert t.sites == ["layer.py:1102 in forward"]
    skip_foreign(t, g)
    assert t.sites == g.sites == ["train.py:9 in log_probs"]


def test_indexed_family_against_one_fused_module():
    """transformers 4.x's experts (one module per index, the ModuleList never called) against 5.x's fused one:
    the act_fn both call is a part per expert, in index order (10 after 2); every per-expert module is in the
    family; a path whose index has no one-module counterpart (model.layers.1) is not."""
    from verl_pdbg_conf.compare.pipeline.trees import indexed_parts

    per_expert = {"model.layers.1.mlp": "Block", "model.layers.1.mlp.gate": "Linear",
                  "model.layers.1.mlp.experts.10": "MLP", "model.layers.1.mlp.experts.10.act_fn": "SiLU",
                  "model.layers.1.mlp.experts.10.down_proj": "Linear",
                  "model.layers.1.mlp.experts.2": "MLP", "model.layers.1.mlp.experts.2.act_fn": "SiLU"}
    fused = {"model.layers.1.mlp": "Block", "model.layers.1.mlp.gate": "Router",
             "model.layers.1.mlp.experts": "Experts", "model.layers.1.mlp.experts.act_fn": "SiLU"}
    parts, family = indexed_parts(per_expert, fused)
    assert parts == {"model.layers.1.mlp.experts.act_fn": ["model.layers.1.mlp.experts.2.act_fn",
                                                           "model.layers.1.mlp.experts.10.act_fn"]}
    assert set(family) == {p for p in per_expert if ".experts." in p}
    assert set(family.values()) == {"model.layers.1.mlp.experts"}
    assert indexed_parts(fused, per_expert) == ({}, {})
    assert indexed_parts(per_expert, per_expert) == ({}, {})  # the same tree: no family


def _row(record: str, state: str, i: int, shape, dtype="torch.float32", stats=(1.0, 0.0, 0.5, 1.0)):
    from verl_pdbg_conf.compare.dumpread import Row

    name = f"{record}.{state}.{i}"
    return Row(name, name, record, state, "forward", dtype, shape, stats, "-1")


def _scoped(name: str, scope: str, inputs=(), outputs=((4, 8),)):
    """An API record: `inputs` are shapes, or (shape, dtype, stats) for a 0-d tensor."""
    rows = [_row(name, "input", i, *((list(x),) if isinstance(x[0], int) else (list(x[0]), *x[1:])))
            for i, x in enumerate(inputs)]
    rows += [_row(name, "output", i, list(s)) for i, s in enumerate(outputs)]
    return Record(name, name, name.rsplit(".", 2)[0], "forward", rows, scope=scope)


def test_one_module_running_its_indices_one_at_a_time_is_split_by_its_loop_index():
    """transformers 5's fused experts with experts_implementation="eager" against 4.x's per-expert modules: the
    act_fn called once per expert is no part put together by rows; each iteration's calls, from the one taking
    the loop's index (a 0-d integer tensor) on, are that expert's, in the same scope as the other run's calls
    of that expert (pipeline/indices.py); the iteration's end is its last call that is not an in-place write."""
    from verl_pdbg_conf.compare.pipeline import indices

    per_expert = [("model", "M"), ("model.layers.1", "L"), ("model.layers.1.mlp", "Block"),
                  ("model.layers.1.mlp.experts.2", "MLP"), ("model.layers.1.mlp.experts.2.act_fn", "SiLU"),
                  ("model.layers.1.mlp.experts.10", "MLP"), ("model.layers.1.mlp.experts.10.act_fn", "SiLU")]
    fused = tree([("model", "M"), ("model.layers.1", "L"), ("model.layers.1.mlp", "Block"),
                  ("model.layers.1.mlp.experts", "Experts")])
    p_call = "Module.model.layers.1.mlp.experts.Experts.forward.0"
    for k in range(2):  # the act_fn called once per expert inside one call of the experts
        fused.add(f"Module.model.layers.1.mlp.experts.act_fn.SiLU.forward.{k}", p_call)
    a = TreeAlignment(tree(per_expert), fused)
    assert a.groups == {"target": [], "golden": []} and "model.layers.1.mlp.experts.act_fn" in a.per_index
    assert a.roots == {"model.layers.1.mlp.experts": "model.layers.1.mlp.experts"}
    fams = indices.families(a.family, a.roots)
    golden = indices.Scopes("golden", a.family["golden"], fams, fused.modules)
    recs = [_scoped("Functional.one_hot.0.forward", p_call),
            _scoped("Tensor.__eq__.0.forward", p_call, inputs=(((), "torch.int64", (2, 2, None, 2)),)),
            _scoped("Functional.linear.5.forward", p_call, inputs=((4, 8), (8, 8))),
            _scoped("Functional.silu.0.forward", "Module.model.layers.1.mlp.experts.act_fn.SiLU.forward.0"),
            _scoped("Tensor.__mul__.3.forward", p_call), _scoped("Tensor.index_add_.0.forward", p_call),
            _scoped("Tensor.__eq__.1.forward", p_call, inputs=(((), "torch.int64", (10, 10, None, 10)),)),
            _scoped("Tensor.__eq__.2.forward", p_call, inputs=(((), "torch.bool", (True, True, None, None)),)),
            _scoped("Tensor.__eq__.3.forward", p_call, inputs=(((), "torch.int64", ("x", "x", None, None)),))]
    out = list(golden(recs))
    assert "index" not in out[0].extra and out[0].scope == p_call  # before the loop: the one module's own
    assert [r.extra["index"] for r in out[1:6]] == [("model.layers.1.mlp.experts", 2)] * 5
    assert {r.scope for r in out[1:6]} == {"Module.model.layers.1.mlp.experts.2.Index.forward.0"}
    assert out[3].extra["own_scope"].endswith("act_fn.SiLU.forward.0") and out[3].layer == 1
    # a bool, or statistics that are no integer (an edited file), name no index: the iteration goes on
    assert out[6].extra["index"] == ("model.layers.1.mlp.experts", 10) == out[7].extra["index"] == out[8].extra["index"]
    assert indices.index_end(out[1:6]) is out[4]  # index_add_ writes the one module's result in place
    # the per-expert run's calls of expert 2, inside its module's submodules, take the same scope
    target = indices.Scopes("target", a.family["target"], fams, tree(per_expert).modules)
    mine = _scoped("Functional.silu.4.forward", "Module.model.layers.1.mlp.experts.2.act_fn.SiLU.forward.0")
    (r,) = target([mine])
    assert r.scope == "Module.model.layers.1.mlp.experts.2.Index.forward.0" and r.extra["index"][1] == 2
