"""Units of the Megatron-against-transformers compare: mbridge's extracted table as a module correspondence,
fused parts put together, tensor-parallel shards combined, the statistics of a concatenation, the layout
read from a verl config. The real runs are in test_compare_megatron.py."""

from __future__ import annotations

import math
import os
import random

import pytest

from compare_cli import run_json
from verl_pdbg_conf.compare.dumpread import Row
from verl_pdbg_conf.compare.parallel.kinds import CONTEXT, PIPELINE
from verl_pdbg_conf.compare.parallel.layout import LayoutError, from_conf
from verl_pdbg_conf.compare.megatron.table import Correspondence, tables
from verl_pdbg_conf.compare.pipeline.concat import concat_rows
from verl_pdbg_conf.compare.pipeline.fusion import Fuser, Group
from verl_pdbg_conf.compare.records import Record
from verl_pdbg_conf.compare.parallel.merge import ShardMerge


def _stats(values):
    return (max(values), min(values), sum(values) / len(values), math.sqrt(sum(v * v for v in values)))


def _row(name, values, shape, state="output", direction="forward"):
    return Row(name, name, name.rsplit(".", 2)[0], state, direction, "torch.float32", shape, _stats(values), "-1")


@pytest.mark.parametrize("seed", range(5))
def test_concat_statistics_are_exact(seed):
    rnd = random.Random(seed)
    parts = [[rnd.uniform(-3, 3) for _ in range(rnd.randint(1, 40))] for _ in range(rnd.randint(2, 4))]
    rows = [_row(f"x.{i}.output.0", p, [1, len(p)]) for i, p in enumerate(parts)]
    whole = [v for p in parts for v in p]
    got = concat_rows(rows, -1)
    assert got.shape == [1, len(whole)]
    for a, b in zip(got.stats, _stats(whole)):
        assert a == pytest.approx(b, rel=1e-12)
    assert concat_rows([rows[0], _row("y", [1.0], [2, 1])], -1) is None  # other dimensions differ


QWEN_MC = ["embedding", "embedding.word_embeddings", "rotary_pos_emb", "decoder", "output_layer",
           "decoder.final_layernorm"]
QWEN_HF = ["model", "model.embed_tokens", "model.rotary_emb", "model.norm", "lm_head"]
for _i in range(2):
    QWEN_MC += [f"decoder.layers.{_i}", f"decoder.layers.{_i}.input_layernorm", f"decoder.layers.{_i}.self_attention",
                f"decoder.layers.{_i}.self_attention.linear_qkv", f"decoder.layers.{_i}.self_attention.linear_proj",
                f"decoder.layers.{_i}.self_attention.core_attention", f"decoder.layers.{_i}.pre_mlp_layernorm",
                f"decoder.layers.{_i}.mlp", f"decoder.layers.{_i}.mlp.linear_fc1", f"decoder.layers.{_i}.mlp.linear_fc2"]
    QWEN_HF += [f"model.layers.{_i}", f"model.layers.{_i}.input_layernorm", f"model.layers.{_i}.self_attn",
                *(f"model.layers.{_i}.self_attn.{p}_proj" for p in "qkvo"), f"model.layers.{_i}.post_attention_layernorm",
                f"model.layers.{_i}.mlp", *(f"model.layers.{_i}.mlp.{p}_proj" for p in ("gate", "up", "down")),
                f"model.layers.{_i}.mlp.act_fn"]


def test_table_is_extracted_data():
    doc = tables()
    assert doc["mbridge"] and doc["megatron_core"]
    assert "qwen2" in doc["models"] and "llama" in doc["models"]
    assert doc["local_spec_keys"]["input_layernorm."] == "self_attention.linear_qkv.layer_norm_"


def test_correspondence_local_spec():
    c = Correspondence(QWEN_MC, QWEN_HF)
    assert c.links["decoder.layers.1.self_attention.linear_qkv"].hf == tuple(
        f"model.layers.1.self_attn.{p}_proj" for p in "qkv")
    assert c.links["decoder.layers.0.mlp.linear_fc1"].hf == ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj")
    assert c.links["decoder.layers.0.mlp.linear_fc2"].hf == ("model.layers.0.mlp.down_proj",)
    # the local spec's own norms, named through megatron-core's key map
    assert c.links["decoder.layers.0.input_layernorm"].hf == ("model.layers.0.input_layernorm",)
    assert c.links["decoder.layers.0.pre_mlp_layernorm"].hf == ("model.layers.0.post_attention_layernorm",)
    assert not c.links["decoder.layers.0.self_attention.linear_qkv"].norm_in
    assert c.parents["decoder.layers.1"] == "model.layers.1"
    assert c.parents["decoder.layers.0.self_attention"] == "model.layers.0.self_attn"
    assert c.parents["decoder"] == "model"
    assert "embedding" not in c.parents  # "model" went to decoder, by more votes: one to one
    assert "decoder.layers.0.self_attention.core_attention" not in c.links


def test_correspondence_transformer_engine_fused_norm():
    te = [p for p in QWEN_MC if not p.endswith(("input_layernorm", "pre_mlp_layernorm"))]
    c = Correspondence(te, QWEN_HF)
    assert c.links["decoder.layers.0.self_attention.linear_qkv"].norm_in == "model.layers.0.input_layernorm"
    assert c.links["decoder.layers.0.mlp.linear_fc1"].norm_in == "model.layers.0.post_attention_layernorm"


def test_correspondence_none_between_two_hf_models():
    assert not Correspondence(QWEN_HF, QWEN_HF)


def _rec(name, rows, order, direction="forward"):
    module = name.split(".", 1)[1].rsplit(".", 3)[0] if name.startswith("Module.") else None
    r = Record(name, name, name.rsplit(".", 2)[0], direction, rows, order)
    if name.endswith("parameters_grad"):
        module = name.split(".", 1)[1].rsplit(".", 2)[0]
    r.module = module
    return r


def test_fuser_puts_parts_together_forward_and_backward():
    base = "Module.model.layers.0.self_attn"
    x = [0.5, -1.0, 2.0]
    outs = {"q": [1.0, 2.0, 3.0, 4.0], "k": [-2.0, 0.0], "v": [5.0, -5.0]}
    recs, order = [], 0
    for p in "qkv":
        name = f"{base}.{p}_proj.Linear.forward.0"
        recs.append(_rec(name, [_row(name + ".input.0", x, [1, 3], "input"),
                                _row(name + ".output.0", outs[p], [1, len(outs[p])])], order))
        order += 1
    recs.append(_rec("Functional.matmul.0.forward", [], order))
    for p in "vkq":  # backward runs in reverse
        name = f"{base}.{p}_proj.Linear.backward.0"
        recs.append(_rec(name, [_row(name + ".input.0", outs[p], [1, len(outs[p])], "input", "backward"),
                                _row(name + ".output.0", x, [1, 3], "output", "backward")], order, "backward"))
        order += 1
    fuser = Fuser([Group(tuple(f"model.layers.0.self_attn.{p}_proj" for p in "qkv"))])
    out = list(fuser(recs))
    assert [r.name for r in out] == [f"{base}.q_proj.Linear.forward.0", "Functional.matmul.0.forward",
                                     f"{base}.q_proj.Linear.backward.0"]
    fwd = out[0]
    assert fwd.extra["parts"][1:] == ["model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj"]
    inp, o = fwd.rows
    assert inp.stats == _stats(x)
    whole = outs["q"] + outs["k"] + outs["v"]
    assert o.shape == [1, 8] and o.stats == pytest.approx(_stats(whole))
    bwd = out[2]
    assert [r.state for r in bwd.rows] == ["input"]  # the shared input's gradient (a sum) left out
    assert fuser.left_out == 1


def test_fuser_takes_the_fused_norms_input():
    norm = "Module.model.layers.0.input_layernorm.RMSNorm.forward.0"
    pre = [3.0, -4.0]
    recs = [_rec(norm, [_row(norm + ".input.0", pre, [1, 2], "input"), _row(norm + ".output.0", [0.6, -0.8], [1, 2])], 0)]
    for i, p in enumerate("qkv"):
        name = f"Module.model.layers.0.self_attn.{p}_proj.Linear.forward.0"
        recs.append(_rec(name, [_row(name + ".input.0", [0.6, -0.8], [1, 2], "input"),
                                _row(name + ".output.0", [float(i)], [1, 1])], i + 1))
    g = Group(tuple(f"model.layers.0.self_attn.{p}_proj" for p in "qkv"), "model.layers.0.input_layernorm")
    out = list(Fuser([g])(recs))
    assert out[1].rows[0].stats == _stats(pre)
    assert out[1].rows[0].name.startswith("Module.model.layers.0.self_attn.q_proj")


def test_fuser_leaves_incomplete_groups_alone():
    name = "Module.model.layers.0.self_attn.q_proj.Linear.forward.0"
    recs = [_rec(name, [_row(name + ".output.0", [1.0], [1, 1])], 0)]
    out = list(Fuser([Group(("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj"))])(recs))
    assert [r.name for r in out] == [name] and "parts" not in out[0].extra


def _rank_stream(rank: int):
    col = "Module.decoder.layers.0.self_attention.linear_qkv.ColumnParallelLinear.forward.0"
    red = "Distributed.all_reduce.0.forward"
    row = "Module.decoder.layers.0.self_attention.linear_proj.RowParallelLinear.forward.0"
    x = [1.0, 2.0, 3.0, 4.0]
    shard = [[1.0, -1.0], [7.0, 0.5]][rank]
    return [
        _rec(col, [_row(col + ".input.0", x, [2, 1, 4], "input"), _row(col + ".output.0", shard, [2, 1, 1])], 0),
        _rec(red, [_row(red + ".input.0", [10.0 * (rank + 1)], [1], "input"), _row(red + ".output.0", [30.0], [1])], 1),
        _rec(row, [_row(row + ".input.0", shard, [2, 1, 1], "input"), _row(row + ".output.0", x, [2, 1, 4])], 2),
    ]


def test_shards_combined_replicated_once_partial_left_out():
    merge = ShardMerge()
    out = list(merge([iter(_rank_stream(0)), iter(_rank_stream(1))]))
    col, red, row = out
    assert col.rows[0].shape == [2, 1, 4] and col.rows[0].stats == _stats([1.0, 2.0, 3.0, 4.0])  # replicated: once
    assert col.rows[1].shape == [2, 1, 2] and col.rows[1].stats == pytest.approx(_stats([1.0, -1.0, 7.0, 0.5]))
    assert [r.state for r in red.rows] == ["output"] and red.extra["sharded"]  # the partial sum is not a shard
    assert row.rows[0].shape == [2, 1, 2] and row.rows[1].shape == [2, 1, 4]
    assert merge.partial == 1 and not merge.failed


def test_shards_stop_where_ranks_ran_different_calls():
    a, b = _rank_stream(0), _rank_stream(1)
    b[1] = _rec("Torch.matmul.0.forward", [], 1)
    merge = ShardMerge()
    out = list(merge([iter(a), iter(b)]))
    assert len(out) == 3 and "different calls" in merge.failed
    assert out[2].rows[0].shape == [2, 1, 1]  # past it, one rank's own record


def test_layout_from_verl_config(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      tensor_model_parallel_size: 2\n"
                 "      pipeline_model_parallel_size: 1\n")
    lay = from_conf(str(p))
    assert (lay.tp, lay.size(PIPELINE), lay.size(CONTEXT)) == (2, 1, 1) and lay.source.startswith("conf")
    p.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      tensor_model_parallel_size: two\n")
    with pytest.raises(LayoutError, match="not a positive integer"):
        from_conf(str(p))
    p.write_text("trainer:\n  n_gpus_per_node: 2\n")
    with pytest.raises(LayoutError, match="no megatron"):
        from_conf(str(p))


def test_correspondence_through_wrappers():
    """verl's Megatron worker names its modules under the model chunk and DDP (`0.module.`); FSDP1 inserts
    `_fsdp_wrapped_module` levels on the transformers side: the table's names are found through both."""
    mc = ["0", "0.module", *(f"0.module.{p}" for p in QWEN_MC)]
    hf = []
    for p in QWEN_HF:
        parts = p.split(".")
        if len(parts) >= 3 and parts[1] == "layers":  # model.layers.N -> FSDP unit with its wrapped module
            parts = parts[:3] + ["_fsdp_wrapped_module"] + parts[3:]
        hf.append(".".join(["_fsdp_wrapped_module", *parts]))
    hf += [f"_fsdp_wrapped_module.model.layers.{i}" for i in range(2)]
    c = Correspondence(mc, hf)
    link = c.links["0.module.decoder.layers.1.self_attention.linear_qkv"]
    assert link.hf == tuple(f"_fsdp_wrapped_module.model.layers.1._fsdp_wrapped_module.self_attn.{p}_proj" for p in "qkv")
    assert c.links["0.module.decoder.layers.0.input_layernorm"].hf == (
        "_fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.input_layernorm",)
    # a module the table says nothing of, inside one it does, is never taken for it
    assert "0.module.decoder.layers.0.self_attention.core_attention" not in c.links


@pytest.fixture(scope="module")
def verl_megatron(tmp_path_factory):
    import tarfile

    root = tmp_path_factory.mktemp("verl-megatron")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples", "verl-megatron", "verl-megatron.tar.gz")
    with tarfile.open(here) as tar:
        tar.extractall(root, filter="data")
    return root


def test_verl_megatron_worker_against_transformers(verl_megatron):
    """verl's own Megatron worker (module names under `0.module.module.`, bf16) against transformers fed the
    same tensors: nothing diverges (a fused projection's bf16 statistics put together keep bf16's rounding),
    and what was not compared is said: verl's own log-prob code outside every module, and lm_head, whose
    Megatron counterpart msprobe leaves out in verl ("first or last layer")."""
    code, doc = run_json(verl_megatron / "megatron", verl_megatron / "hf-packed")
    (pair,) = doc["pairs"]
    assert pair["status"] == "partial" and pair["first_divergence"] is None and code == 3
    assert pair["coverage"]["golden"]["uncompared_modules"] == {"lm_head": 1}
    assert set(pair["coverage"]["target"]["uncompared_records"]) == {"(outside any module)"}


def test_verl_megatron_worker_change_named(verl_megatron):
    code, doc = run_json(verl_megatron / "megatron-fc2", verl_megatron / "hf-packed")
    first = doc["pairs"][0]["first_divergence"]
    assert code == 1 and first["module"] == "0.module.module.decoder.layers.1.mlp.linear_fc2" and first["layer"] == 1


def test_verl_megatron_worker_other_token_layout_is_a_mismatch(verl_megatron):
    """The trainer's padded batch against what verl's Megatron engine was fed (a padding column removed):
    no tensor after the ids covers the same tokens, so nothing is compared, and it says why."""
    code, doc = run_json(verl_megatron / "megatron", verl_megatron / "hf")
    (pair,) = doc["pairs"]
    assert pair["status"] == "mismatch" and code == 3  # nothing comparable: incomplete
    msg = [f["message"] for f in pair["findings"] if f["rule"] == "compare-mismatch"][0]
    assert "[4, 10] against [4, 11]" in msg


def test_megatron_scratch_buffer_ignored_by_default(verl_megatron):
    """Two runs alike but for one planted weight: the first difference is the planted layer's, not the
    uninitialised buffer Megatron's attention hands torch.baddbmm with beta=0."""
    code, doc = run_json(verl_megatron / "megatron-fc2", verl_megatron / "megatron")
    first = doc["pairs"][0]["first_divergence"]
    assert code == 1 and first["layer"] == 1 and "baddbmm" not in first["name"]


def test_pipeline_stages_chained_and_renumbered():
    """Two pipeline stages, each numbering its layers from 0: put together as one model's records, layers
    numbered by what the stages before hold, forwards in stage order and the rest in reverse."""
    from verl_pdbg_conf.compare.pipeline import stages as S
    from verl_pdbg_conf.compare.records import layer_of_path
    from verl_pdbg_conf.compare.pipeline.trees import Tree

    pattern = S.layer_pattern()

    def stage(paths, order0):
        recs = []
        for i, (p, direction) in enumerate(paths):
            name = f"Module.{p}.X.{direction}.0"
            r = _rec(name, [_row(name + ".output.0", [1.0], [1])], order0 + i, direction)
            r.after_backward = direction == "backward"
            r.layer = layer_of_path(r.module)  # as reading.Reader sets it
            recs.append(r)
        return recs

    s0 = stage([("embedding", "forward"), ("decoder.layers.0", "forward"), ("decoder.layers.1", "forward"),
                ("decoder.layers.1", "backward"), ("decoder.layers.0", "backward")], 0)
    s1 = stage([("decoder.layers.0", "forward"), ("output_layer", "forward"), ("output_layer", "backward"),
                ("decoder.layers.0", "backward")], 0)
    trees = []
    for recs in (s0, s1):
        t = Tree()
        for r in recs:
            t.add(r.name, None)
        trees.append(t)
    offs = S.offsets(trees, pattern)
    assert offs == [0, 2]
    relayers = [S.Relayer(o, pattern) for o in offs]
    out = [(r.module, r.direction, r.layer) for r in S.chain([iter(s0), iter(s1)], relayers)]
    assert out == [("embedding", "forward", None), ("decoder.layers.0", "forward", 0),
                   ("decoder.layers.1", "forward", 1), ("decoder.layers.2", "forward", 2),
                   ("output_layer", "forward", None), ("output_layer", "backward", None),
                   ("decoder.layers.2", "backward", 2), ("decoder.layers.1", "backward", 1),
                   ("decoder.layers.0", "backward", 0)]
    merged = S.merged_tree(trees, relayers)
    assert "decoder.layers.2" in merged.modules and "output_layer" in merged.modules


def test_relayer_keeps_wrappers_and_other_indices():
    from verl_pdbg_conf.compare.pipeline import stages as S

    rl = S.Relayer(3, S.layer_pattern())
    assert rl.sub("Module.0.module.decoder.layers.1.mlp.experts.2.X.forward.0") == \
        "Module.0.module.decoder.layers.4.mlp.experts.2.X.forward.0"
    assert rl.sub("Module.embedding.word_embeddings.X.forward.0") == "Module.embedding.word_embeddings.X.forward.0"


def test_layer_of_path_skips_a_model_chunk_index():
    from verl_pdbg_conf.compare.records import layer_of_path

    assert layer_of_path("0.module.module.decoder.layers.3.mlp") == 3
    assert layer_of_path("0.module.module.embedding") is None
    assert layer_of_path("model.layers.2.mlp.experts.5") == 2
    assert layer_of_path("2.0") == 2 and layer_of_path("4") == 4  # an nn.Sequential's blocks
    assert layer_of_path("module.1.0") == 1


def test_replicas_grouped_in_megatron_rank_order():
    """Tensor-parallel ranks next to each other, pipeline stages outermost: with 2 data-parallel replicas
    of 2 stages, replica 0 is ranks 0 and 2, replica 1 ranks 1 and 3."""
    from verl_pdbg_conf.compare.parallel.layout import Layout, group_sides
    from verl_pdbg_conf.compare.parallel.replica import Level
    from verl_pdbg_conf.compare.pairs import RankDump

    sides = [RankDump(("step_1", "s", "step0"), f"rank{r}", f"/d/rank{r}/dump.json") for r in (3, 1, 0, 2)]
    one, two = group_sides(sides, Layout({"pipeline": 2}))
    assert (one.rank_dir, one.members, one.replica.levels) == ("rank0", ("rank0", "rank2"), (Level("pipeline", 2),))
    assert two.members == ("rank1", "rank3") and two.replica.group == ("/d/rank1/dump.json", "/d/rank3/dump.json")
    (only,) = group_sides(sides, Layout({"tensor": 2, "pipeline": 2}))
    assert only.members == ("rank0", "rank1", "rank2", "rank3")
    assert only.replica.levels == (Level("tensor", 2), Level("pipeline", 2))
    # expert-parallel ranks are next to each other too: replica 0 is ranks 0 and 1; data and context make none
    one, two = group_sides(sides, Layout({"expert": 2, "data": 2, "context": 2}))
    assert (one.members, two.members) == (("rank0", "rank1"), ("rank2", "rank3"))
    assert one.replica.levels == (Level("expert", 2),)
