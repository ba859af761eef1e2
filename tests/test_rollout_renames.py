"""The rollout compare's pairing through transformers' own conversion mapping (compare/rollout/
transformers-5.19.0.json, written by extract_renames.py off the installed library, which checks renames.py's
renaming against transformers' own): an engine module named as the checkpoint names it is paired under the
name transformers gives it at load, only where the trainer's dump holds that name and not the engine's."""

from __future__ import annotations

from verl_pdbg_conf.compare.records import Record
from verl_pdbg_conf.compare.rollout import renames as RN
from verl_pdbg_conf.compare.rollout import routing as R
from verl_pdbg_conf.compare.rollout import table as T
from verl_pdbg_conf.compare.rollout.dumps import Dump


def test_the_table_is_transformers_own():
    doc = RN.table()
    assert doc["library"] == "transformers" and doc["version"] == "5.19.0" and doc["checked"] > 1000
    assert {"mixtral", "phimoe", "minimax_m2", "qwen3_moe"} <= set(doc["models"])


def test_moe_families_renamed_at_load():
    mixtral, phimoe = RN.rules_for("mixtral"), RN.rules_for("phimoe")
    assert RN.module_name("model.layers.3.block_sparse_moe.gate", mixtral) == "model.layers.3.mlp.gate"
    assert RN.module_name("model.layers.3.block_sparse_moe.experts", mixtral) == "model.layers.3.mlp.experts"
    assert RN.module_name("model.layers.3.self_attn.qkv_proj", mixtral) == "model.layers.3.self_attn.qkv_proj"
    assert RN.module_name("model.layers.0.block_sparse_moe.gate", phimoe) == "model.layers.0.mlp.router"
    # the checkpoint's per-expert weights become the fused experts' parameters (a converter, after renamings)
    assert RN.rename_key("model.layers.1.block_sparse_moe.experts.5.w2.weight", mixtral) == \
        "model.layers.1.mlp.experts.down_proj"
    # Qwen3-MoE renames no module: its experts are fused, their module keeps its name
    assert RN.module_name("model.layers.0.mlp.gate", RN.rules_for("qwen3_moe")) == "model.layers.0.mlp.gate"
    assert RN.rules_for("no_such_model") == [] and RN.module_name("a.b", []) == "a.b"


def _dump(*modules: str) -> Dump:
    d = Dump("rank0")
    d.every = [Record(f"Module.{m}.X.forward.0", f"Module.{m}.X.forward.0", f"Module.{m}.X", "forward", [], module=m)
               for m in modules]
    d.records = list(d.every)
    return d


def test_engine_modules_take_the_trainers_names_only_where_it_has_them():
    engine = ["model.layers.1.block_sparse_moe", "model.layers.1.block_sparse_moe.gate",
              "model.layers.1.block_sparse_moe.experts", "model.layers.1.self_attn.qkv_proj"]
    trainer5 = _dump("model.layers.1.mlp", "model.layers.1.mlp.gate", "model.layers.1.mlp.experts",
                     "model.layers.1.self_attn.q_proj")
    d = _dump(*engine)
    (said,) = RN.apply([d], [trainer5], "mixtral", "rollout")
    assert [r.module for r in d.every] == ["model.layers.1.mlp", "model.layers.1.mlp.gate",
                                           "model.layers.1.mlp.experts", "model.layers.1.self_attn.qkv_proj"]
    assert d.records[1] is d.every[1] and said.rule == "compare-modules"
    assert "transformers 5.19.0" in said.message and "model.layers.*.block_sparse_moe.gate as model.layers.*.mlp.gate" \
        in said.message
    # a trainer on transformers 4 keeps the checkpoint's names: nothing renamed
    trainer4 = _dump("model.layers.1.block_sparse_moe", "model.layers.1.block_sparse_moe.gate")
    d = _dump(*engine)
    assert RN.apply([d], [trainer4], "mixtral", "rollout") == [] and [r.module for r in d.every] == engine
    # no model type in the engine's record, or one transformers has no mapping for: nothing renamed
    for model_type in (None, "no_such_model", 3):
        d = _dump(*engine)
        assert RN.apply([d], [trainer5], model_type, "rollout") == [] and [r.module for r in d.every] == engine


def test_top_k_passed_by_the_models_own_call():
    """Mixtral's FusedMoE takes top_k from its MoE block's __init__, which the model calls with the config's
    num_experts_per_tok: read through that call (extract.py), so the engine's own top-k is recomputed."""
    moe = T.moe_for(["MixtralForCausalLM"])
    assert moe["top_k"] == {"config": "num_experts_per_tok"}
    assert R.setting(moe, {"num_experts_per_tok": 2}).top_k == 2
