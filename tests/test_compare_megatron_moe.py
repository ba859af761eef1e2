"""verl-pdbg-compare on a mixture-of-experts model between verl's two training backends, on real dumps
(issue 35): megatron-core 0.16.1's MoE GPTModel (local spec, SequentialMLP, allgather dispatcher; weights
loaded by mbridge 0.15.1's Qwen3MoEBridge) at expert-parallel size 1 and 2 over gloo, and transformers'
Qwen3-MoE (fused experts) on the same checkpoint, all dumped by this package's runtime on CPU
(tests/make_megatron_dumps.py --arch qwen3_moe, in the megatron venv). At EP 2 each rank takes half of the
batch and holds experts 4r..4r+3 as its local_experts.0..3.

The right answer: Megatron's router pairs with transformers' gate and the same weights are never
"diverged"; Megatron's per-expert modules are a family of transformers' fused experts (mbridge's per-expert
rows), compared at the MoE block where the fused experts run every expert's rows in one call (grouped_mm,
transformers' default: which expert parts cannot be said, and the verdict says why), and expert by expert
where they run one expert at a time (`hfloop`, experts_implementation="eager"): the log-prob stage is "same"
at full coverage either way. EP 2 against EP 1 is "same" in the log-prob stage (the expert-parallel group put
together as one model); in the update stage an EP rank's gradients of the parameters outside the experts are
its partial sum, said not compared. The same holds for EP 2 run as verl runs its actor (vep2: the loss over the
global batch, gradients averaged over the data-parallel group). One expert changed is named by its global
index, the router changed at the router (or the gate)."""

from __future__ import annotations

import json
import os

import pytest

import release_venvs
from compare_cli import run as compare_text
from compare_cli import run_json as compare

pytestmark = [pytest.mark.slow, pytest.mark.venvs("megatron")]

HERE = os.path.dirname(os.path.abspath(__file__))
LAYER = 1  # the planted layer
# fsdp2: transformers under FSDP2, as verl's other backend; hfloop: its fused experts one expert at a time
RUNS = "hf,fsdp2,hfloop,ep1,ep2,ep2-expert,ep2-router"
VERL_RUNS = "vep1,vep2,vep2-expert"  # as verl's Megatron engine runs its actor (make_megatron_dumps.run_verl)
Q2_RUNS = "hf,ep2,ep2-expert,ep2-shared"  # Qwen2-MoE: a shared expert and its gate
# directory -> (arch, level, runs)
DUMPS = {"mix": ("qwen3_moe", "mix", f"{RUNS},{VERL_RUNS}"), "L0": ("qwen3_moe", "L0", "hf,hfloop,ep2,ep2-expert"),
         "qwen2_moe": ("qwen2_moe", "mix", Q2_RUNS)}
LOG_PROB, UPDATE = "actor_compute_log_prob", "actor_update"


def make_dumps(venv, root):
    """The runs of DUMPS, one invocation per level (EP 2 takes both cores): made in the background (conftest.py)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.dirname(HERE))
    return release_venvs.run_scripts(venv, root, [
        [os.path.join(HERE, "make_megatron_dumps.py"), str(root / name), "--arch", arch, "--level", level,
         "--runs", runs, "--layer", str(LAYER)] for name, (arch, level, runs) in DUMPS.items()], env)


BACKGROUND_JOBS = {"megatron-moe-dumps": ("megatron", make_dumps)}


@pytest.fixture(scope="module")
def root():
    return release_venvs.job_root("megatron-moe-dumps", "megatron", make_dumps)


@pytest.fixture(scope="module")
def dumps(root):
    return root / "mix"


def manifest(dumps) -> dict:
    return json.loads((dumps / "manifest.json").read_text())


@pytest.mark.parametrize("where,runs", [("mix", f"{RUNS},{VERL_RUNS}"), ("qwen2_moe", Q2_RUNS)])
def test_log_probs_agree_where_unplanted(root, where, runs):
    """The weights loaded right: every unplanted run's log-probs are transformers' to 1e-5, planted ones not."""
    got = manifest(root / where)["runs"]
    for name in runs.split(","):
        diff = got[name]["log_prob_diff"]
        assert (diff > 1e-5) == bool(got[name]["plant"]), (name, diff)


def pairs_of(doc) -> list:
    """The report's pairs, both stages of every dump here: a loop over them never checks nothing."""
    assert sorted(p["stage"] for p in doc["pairs"]) == sorted([LOG_PROB, UPDATE]), doc["pairs"]
    return doc["pairs"]


def by_stage(doc) -> dict:
    return {p["stage"]: p for p in pairs_of(doc)}


def same_but_the_update(doc, code, split: bool):
    """The log-prob stage `same` at full coverage; the update `partial`, no divergence, for its optimizer step
    (outside every module: the parameters are laid out otherwise), as two backends' dense runs are, and where
    `split` (an EP 2 side) for the gradients of the parameters outside the experts too: each rank's partial sum
    (these runs do no data-parallel all-reduce: run_shards), counted as the ranks' own. Never an expert."""
    assert code == 3, [(p["stage"], p["status"], p["first_divergence"]) for p in doc["pairs"]]
    pairs = by_stage(doc)
    assert len(doc["pairs"]) == 2  # an expert-parallel group is one model
    assert pairs[LOG_PROB]["status"] == "same" and pairs[LOG_PROB]["coverage"]["full"], pairs[LOG_PROB]
    up = pairs[UPDATE]
    assert up["status"] == "partial" and up["first_divergence"] is None, up
    for side in ("target", "golden"):
        cov = up["coverage"][side]
        more = set(cov["uncompared_records"]) - {"(outside any module)"}
        assert not cov["uncompared_modules"] and not any(".experts" in k for k in more), cov
        assert all(k.endswith("(its calls)") for k in more) if split else not more, cov
    if split:
        assert any(up["coverage"][s]["rank_own_records"].get("partial sum") for s in ("target", "golden")), up


@pytest.mark.parametrize("target,golden", [("ep1", "hf"), ("ep2", "hf"), ("hf", "ep1"), ("hf", "ep2"),
                                           ("ep2", "fsdp2"), ("fsdp2", "ep2"), ("ep2", "hfloop"), ("hfloop", "ep2")])
def test_same_weights_against_transformers(dumps, target, golden):
    code, doc = compare(dumps / target, dumps / golden)
    same_but_the_update(doc, code, "ep2" in (target, golden))
    for pair in pairs_of(doc):
        notes = " ".join(f["message"] for f in pair["findings"] if f["rule"] == "compare-backends")
        assert "mbridge's qwen2_moe table" in notes or "mbridge's qwen3_moe table" in notes, notes
        said = " ".join(f["message"] for f in pair["findings"] if f["rule"] == "compare-modules")
        assert "decoder.layers.*.mlp.experts: one module per index" in said or \
            "model.layers.*.mlp.experts: one module per index" in said, said


def test_ep2_against_ep1_is_same(dumps):
    code, doc = compare(dumps / "ep2", dumps / "ep1")
    pairs = by_stage(doc)
    lp = pairs[LOG_PROB]
    assert lp["status"] == "same" and lp["coverage"]["full"], lp
    assert lp["rank_dir"] == {"target": "rank0", "golden": "rank0"} and len(doc["pairs"]) == 2
    # the optimizer's step outside every module, and each rank's gradients of the parameters outside the
    # experts (its part of their sum, before the data-parallel all-reduce): not compared
    up = pairs[UPDATE]
    assert up["status"] == "partial" and up["first_divergence"] is None, up
    cov = up["coverage"]["target"]
    assert all(k == "(outside any module)" or k.endswith("(its calls)") for k in cov["uncompared_records"]), cov
    assert set(cov["rank_own_records"]) == {"partial sum"}, cov
    assert code == 3
    layout = [f["message"] for f in doc["diagnostics"] if f["rule"] == "compare-layout"]
    assert any("target: expert-parallel size 2 from the dumps" in m for m in layout), layout
    said = " ".join(f["message"] for f in lp["findings"] if f["rule"] == "compare-layout")
    assert "each expert-parallel group of 2 ranks combined" in said


@pytest.mark.parametrize("run,golden", [("ep2-expert", "ep1"), ("ep2-expert", "ep2")])
def test_one_expert_named_by_its_global_index(dumps, run, golden):
    """Expert 5 is rank 1's local expert 1 at EP 2, local expert 5 at EP 1: named 5 either way."""
    want = manifest(dumps)["runs"][run]
    code, doc = compare(dumps / run, dumps / golden)
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first["layer"] == LAYER, pair
        assert first["module"].startswith(f"decoder.layers.{LAYER}.mlp.experts.local_experts.{want['expert']}."), first
        assert first["expert"] == want["expert"] == 5
    code, text = compare_text([dumps / run, dumps / golden])
    assert code == 1 and f"[decoder.layers.{LAYER}.mlp.experts.local_experts.5.linear_fc2]" in text and \
        "expert 5" in text


@pytest.mark.parametrize("golden", ["hf", "fsdp2"])
def test_one_expert_against_fused_experts(dumps, golden):
    """transformers' fused experts (grouped_mm) run every expert's rows in one call: the change is named in its
    layer's MoE block, plain or under FSDP2, and the verdict says why not which expert, in one line."""
    code, doc = compare(dumps / "ep2-expert", dumps / golden)
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert first["layer"] == LAYER and first["module"] == f"decoder.layers.{LAYER}.mlp", first
        assert "expert" not in first
        assert f"inside decoder.layers.{LAYER}.mlp.experts" in first["note"] and "\n" not in first["note"]
        assert "which index cannot be said: the one module runs every index's rows in one call" in first["note"]


@pytest.mark.parametrize("target,golden,module", [
    ("ep2-expert", "hfloop", f"model.layers.{LAYER}.mlp.experts"),
    ("hfloop", "ep2-expert", f"decoder.layers.{LAYER}.mlp.experts.local_experts.5")])
def test_one_expert_against_experts_run_one_at_a_time(dumps, target, golden, module):
    """transformers' fused experts run one expert at a time: each expert's calls pair with Megatron's expert of
    that global index (rank 1's local expert 1 at EP 2), and the changed one is named by it, in both stages, as
    the rollout compare names it: the golden's module of it and the index."""
    code, doc = compare(dumps / target, dumps / golden)
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first["layer"] == LAYER and first["kind"] == "output", first
        assert first["module"] == module and first["expert"] == 5, first
    code, text = compare_text([dumps / target, dumps / golden])
    assert code == 1 and "expert 5" in text


def test_qwen2_moe_expert_change_says_where_it_may_be(root):
    """Qwen2-MoE, one expert x1.05 against fused experts: the MoE layer's output moves less than the threshold
    (unnormalised top-k weights and a shared expert), but the calls inside the layer, each EP rank's share of
    the batch put together, part in layer 1 (the routed experts' sum), in both stages. The fused experts (one
    call for every expert's rows) are compared only at the layer's boundary, so the verdict says the part may be
    inside them, and why their index cannot be said."""
    code, doc = compare(root / "qwen2_moe" / "ep2-expert", root / "qwen2_moe" / "hf")
    assert code == 1 and len(doc["pairs"]) == 2
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first["layer"] == LAYER, pair
        assert first["module"].endswith(f"layers.{LAYER}.mlp") and first.get("expert") is None, first
        assert f"inside model.layers.{LAYER}.mlp.experts" in first["note"], first
        assert "which index cannot be said: the one module runs every index's rows in one call" in first["note"]


@pytest.mark.parametrize("target,golden,module", [("ep2-router", "hf", f"decoder.layers.{LAYER}.mlp.router"),
                                                  ("ep2-router", "ep1", f"decoder.layers.{LAYER}.mlp.router"),
                                                  ("hf", "ep2-router", f"model.layers.{LAYER}.mlp.gate")])
def test_router_change_is_named(dumps, target, golden, module):
    code, doc = compare(dumps / target, dumps / golden)
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first["module"] == module and first["layer"] == LAYER, first


def test_expert_parallel_size_from_a_verl_config(dumps, tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      expert_model_parallel_size: 2\n")
    code, doc = compare(dumps / "ep2", dumps / "ep1", "--target-conf", conf)
    assert by_stage(doc)[LOG_PROB]["status"] == "same"
    assert any(f"expert-parallel size 2 from conf {conf}" in f["message"] for f in doc["diagnostics"]
               if f["rule"] == "compare-layout")


def test_l0_same_weights_against_transformers(root):
    """At L0 only module records: Megatron's experts run inside its MoE layer, paired with transformers' MoE
    block and compared at its input and output. The log-prob stage is "same"; in the update stage each EP rank's
    gradients of the parameters outside the experts are its part of their sum (before the data-parallel
    all-reduce), so they and only they are not compared."""
    code, doc = compare(root / "L0" / "ep2", root / "L0" / "hf")
    pairs = by_stage(doc)
    assert code == 3, [(p["stage"], p["status"], p["first_divergence"], p["coverage"]) for p in doc["pairs"]]
    assert pairs[LOG_PROB]["status"] == "same" and pairs[LOG_PROB]["coverage"]["full"]
    up = pairs[UPDATE]
    assert up["status"] == "partial" and up["first_divergence"] is None
    cov = up["coverage"]["target"]
    assert not cov["uncompared_modules"] and all(k.endswith("(its calls)") for k in cov["uncompared_records"]), cov
    assert set(cov["rank_own_records"]) == {"partial sum"}, cov


def test_l0_one_expert(root):
    code, doc = compare(root / "L0" / "ep2-expert", root / "L0" / "hf")
    assert code == 1 and {p["first_divergence"]["module"] for p in pairs_of(doc)} == {f"decoder.layers.{LAYER}.mlp"}
    # experts run one at a time: at L0 no call names its expert (module calls only), and the verdict says so
    code, doc = compare(root / "L0" / "ep2-expert", root / "L0" / "hfloop")
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert first["module"] == f"decoder.layers.{LAYER}.mlp" and "expert" not in first, first
        assert "which index cannot be said: the one module's calls name no index at this level" in first["note"]
    code, doc = compare(root / "L0" / "ep2-expert", root / "L0" / "ep2")
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert first["expert"] == 5 and first["module"] == f"decoder.layers.{LAYER}.mlp.experts.local_experts.5.linear_fc2"


@pytest.mark.parametrize("target,golden", [("ep2", "hf"), ("hf", "ep2")])
def test_qwen2_moe_shared_expert_same_weights(root, target, golden):
    """Megatron's shared experts apply their gate (mbridge's gate_weight) in their own output, transformers in
    a module of its own (shared_expert_gate): compared by their input and parts, never diverged."""
    code, doc = compare(root / "qwen2_moe" / target, root / "qwen2_moe" / golden)
    # among the update's calls not compared, the gated shared expert's backward calls: its output's gradient
    # is of the gate's product (fusion.py)
    same_but_the_update(doc, code, split=True)


@pytest.mark.parametrize("target,golden,module,expert", [
    ("ep2-shared", "hf", f"decoder.layers.{LAYER}.mlp.shared_experts.linear_fc2", None),
    ("hf", "ep2-shared", f"model.layers.{LAYER}.mlp.shared_expert.down_proj", None),
    ("ep2-expert", "ep2", f"decoder.layers.{LAYER}.mlp.experts.local_experts.5.linear_fc2", 5)])
def test_qwen2_moe_change_is_named(root, target, golden, module, expert):
    code, doc = compare(root / "qwen2_moe" / target, root / "qwen2_moe" / golden)
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert first["module"] == module and first.get("expert") == expert, first


@pytest.mark.parametrize("target,golden", [("vep2", "vep1"), ("vep1", "vep2"), ("vep2", "hf"), ("vep2", "fsdp2"),
                                           ("vep2", "hfloop")])
def test_verl_expert_parallel_same_weights(dumps, target, golden):
    """EP 2 (which is data-parallel 2) as verl's Megatron engine runs it: each rank its share of the batch, its
    loss over the whole batch times the data-parallel size, log-probs through megatron-core's vocab-parallel
    cross entropy. Against one process, transformers or FSDP2: never "diverged". The index the cross entropy
    builds for each rank's rows (cross_entropy.py's arange) is recognised, not compared as data."""
    code, doc = compare(dumps / target, dumps / golden)
    assert code in (0, 3) and len(doc["pairs"]) == 2, [(p["stage"], p["status"], p["first_divergence"])
                                                       for p in doc["pairs"]]
    for pair in pairs_of(doc):
        assert pair["status"] in ("same", "partial") and pair["first_divergence"] is None, pair
        # the experts compared (at the MoE block, or expert by expert): no module left out
        assert not any(c["uncompared_modules"] for c in (pair["coverage"]["target"], pair["coverage"]["golden"]))
    ep = "target" if target == "vep2" else "golden"
    assert "rank-local index" in by_stage(doc)[UPDATE]["coverage"][ep]["rank_own_records"]
    if "vep1" in (target, golden):
        assert by_stage(doc)[LOG_PROB]["status"] == "same"
        judged = " ".join(f["message"] for f in by_stage(doc)[UPDATE]["findings"] if f["rule"] == "compare-judged")
        assert "gradients are 2 times the" in judged


@pytest.mark.parametrize("golden,module,expert", [
    ("vep1", f"decoder.layers.{LAYER}.mlp.experts.local_experts.5.linear_fc2", 5),
    ("hf", f"decoder.layers.{LAYER}.mlp", None), ("fsdp2", f"decoder.layers.{LAYER}.mlp", None),
    ("hfloop", f"model.layers.{LAYER}.mlp.experts", 5)])
def test_verl_expert_parallel_change_is_named(dumps, golden, module, expert):
    code, doc = compare(dumps / "vep2-expert", dumps / golden)
    assert code == 1
    for pair in pairs_of(doc):
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first["module"] == module and first.get("expert") == expert, first
