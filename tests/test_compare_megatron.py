"""verl-pdbg-compare between verl's two training backends on real dumps: megatron-core 0.16.1's GPTModel
(weights loaded by mbridge 0.15.1) at tensor-parallel size 1 and 2 and pipeline size 2 over gloo, against
transformers' Qwen2 and its FSDP2 wrap on the same checkpoint, all dumped by this package's runtime on CPU
(tests/make_megatron_dumps.py, in the megatron venv: requirements/venvs/megatron.lock). The right answer:
the same weights are "same" wherever everything was compared, never "same" where something was not (an
optimizer's step over parameters laid out otherwise); a change made on the Megatron side only is named in
its layer and module, on either pipeline stage; TP 2 against TP 1 is "same". Data-parallel ranks, each with
its share of the batch and its loss over the whole batch as verl's Megatron engine computes it, are one
model against one process: the same weights never "diverged", a change named."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import release_venvs
from compare_cli import run_json as compare

pytestmark = [pytest.mark.slow, pytest.mark.venvs("megatron")]

HERE = os.path.dirname(os.path.abspath(__file__))
# directory -> (level, runs, planted layer): "mix-l4" plants on the pipeline's second stage (layers 3-5)
# vtp1, vdp2: as verl's Megatron engine runs its actor (one process; data-parallel 2, each rank its share)
DUMPS = {"mix": ("mix", "hf,fsdp2,tp1,tp2,tp1-fc2,tp1-qkv,tp1-eps,tp2-fc2,pp2,pp2-fc2,vtp1,vdp2,vdp2-fc2", 2),
         "mix-l4": ("mix", "pp2-fc2", 4), "L1": ("L1", "hf,tp1", 2)}
LOG_PROB, UPDATE = "actor_compute_log_prob", "actor_update"


def make_dumps(venv, root):
    """Every run of DUMPS (make_megatron_dumps.py), one invocation at a time (tp2 and pp2 take both cores):
    made in the background while the suite runs (conftest.py)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.dirname(HERE))
    return release_venvs.run_scripts(venv, root, [
        [os.path.join(HERE, "make_megatron_dumps.py"), str(root / name), "--level", level, "--runs", runs,
         "--layer", str(layer)] for name, (level, runs, layer) in DUMPS.items()], env)


BACKGROUND_JOBS = {"megatron-dumps": ("megatron", make_dumps)}


@pytest.fixture(scope="module")
def dumps():
    return release_venvs.job_root("megatron-dumps", "megatron", make_dumps)


def by_stage(doc) -> dict:
    return {p["stage"]: p for p in doc["pairs"]}


def rules(pair) -> dict:
    out: dict = {}
    for f in pair["findings"]:
        out.setdefault(f["rule"], []).append(f["message"])
    return out


@pytest.mark.parametrize("target,golden", [("tp1", "hf"), ("hf", "tp1"), ("tp2", "hf"), ("tp2", "fsdp2"),
                                           ("fsdp2", "tp2")])
def test_same_weights_across_backends(dumps, target, golden):
    code, doc = compare(dumps / "mix" / target, dumps / "mix" / golden)
    pairs = by_stage(doc)
    assert len(doc["pairs"]) == 2, doc["pairs"]  # one pair per data-parallel rank: TP 2's ranks are one model
    lp = pairs[LOG_PROB]
    assert lp["status"] == "same", lp
    assert lp["coverage"]["full"] and lp["coverage"]["target"]["share"] == 1.0
    assert "mbridge" in " ".join(rules(lp)["compare-backends"])
    up = pairs[UPDATE]
    # the optimizer's step runs over parameters laid out otherwise (fused, sharded), outside every module: not
    # compared, so never "same"; everything else was, and nothing diverged
    assert up["status"] == "partial" and up["first_divergence"] is None, up
    for side in ("target", "golden"):
        cov = up["coverage"][side]
        assert set(cov["uncompared_records"]) == {"(outside any module)"} and not cov["uncompared_modules"], cov
    assert code == 3


def test_tp2_against_tp1_is_same(dumps):
    code, doc = compare(dumps / "mix" / "tp2", dumps / "mix" / "tp1")
    assert code == 0, [(p["stage"], p["status"], p["first_divergence"]) for p in doc["pairs"]]
    assert [p["status"] for p in doc["pairs"]] == ["same", "same"]
    layout = [f["message"] for f in doc["diagnostics"] if f["rule"] == "compare-layout"]
    assert any("tensor-parallel size 2 from the dumps" in m for m in layout), doc["diagnostics"]
    assert all(p["coverage"]["full"] for p in doc["pairs"])


def _manifest(dumps, where: str = "mix") -> dict:
    return json.loads((dumps / where / "manifest.json").read_text())["runs"]


@pytest.mark.parametrize("run,golden", [("tp1-fc2", "hf"), ("tp1-qkv", "hf"), ("tp1-eps", "hf"), ("tp2-fc2", "hf"),
                                        ("tp2-fc2", "tp1"), ("tp1-qkv", "fsdp2"), ("pp2-fc2", "hf"),
                                        ("mix-l4/pp2-fc2", "tp1"), ("mix-l4/pp2-fc2", "hf")])
def test_megatron_side_change_is_named(dumps, run, golden):
    where, _, run = run.rpartition("/")
    want = _manifest(dumps, where or "mix")[run]
    code, doc = compare(dumps / (where or "mix") / run, dumps / "mix" / golden)
    assert code == 1
    for pair in doc["pairs"]:
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first is not None, pair
        assert first["module"] == want["expect_module"] and first["layer"] == want["layer"], first


@pytest.mark.parametrize("golden", ["hf", "tp1"])
def test_pipeline_stages_as_one_model(dumps, golden):
    """Two pipeline stages, each numbering its layers from 0, put together: nothing diverges. What is not
    compared is the schedule's own arithmetic outside every module (its loss scaling and token count, and
    the optimizer's step), so the verdict says how much was compared."""
    code, doc = compare(dumps / "mix" / "pp2", dumps / "mix" / golden)
    assert code in (0, 3)
    for pair in doc["pairs"]:
        assert pair["status"] in ("same", "partial") and pair["first_divergence"] is None, pair
        cov = pair["coverage"]["target"]
        assert set(cov["uncompared_records"]) <= {"(outside any module)"} and not cov["uncompared_modules"], cov
        assert cov["share"] > 0.95
    layout = [f["message"] for f in doc["diagnostics"] if f["rule"] == "compare-layout"]
    assert any("pipeline size 2 from the dumps" in m for m in layout), layout
    stages = [f["message"] for p in doc["pairs"] for f in p["findings"] if "pipeline stages put together" in f["message"]]
    assert stages and "numbered from 0, 3" in stages[0]


def test_hf_side_names_its_own_module(dumps):
    """The golden side Megatron: the target's (transformers) parts are fused into the record it is judged by."""
    code, doc = compare(dumps / "mix" / "hf", dumps / "mix" / "tp1-qkv")
    assert code == 1
    first = by_stage(doc)[LOG_PROB]["first_divergence"]
    assert first["layer"] == 2 and first["module"].startswith("model.layers.2.self_attn."), first


def test_layout_from_a_verl_config(dumps, tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      tensor_model_parallel_size: 2\n")
    code, doc = compare(dumps / "mix" / "tp2", dumps / "mix" / "tp1", "--target-conf", conf)
    assert code == 0
    assert any(f"from conf {conf}" in f["message"] for f in doc["diagnostics"] if f["rule"] == "compare-layout")


def test_layout_unknown_is_said_never_guessed(dumps, tmp_path):
    """Two ranks alike (rank1 a copy of rank0): nothing says they are one tensor-parallel group."""
    run = tmp_path / "tp2-alike"
    shutil.copytree(dumps / "mix" / "tp2", run)
    for stage in (LOG_PROB, UPDATE):
        inner = run / "step_1" / stage / "step0"
        shutil.rmtree(inner / "rank1")
        shutil.copytree(inner / "rank0", inner / "rank1")
    code, doc = compare(run, dumps / "mix" / "tp1")
    warned = [f["message"] for f in doc["diagnostics"] if f["rule"] == "compare-layout" and f["severity"] == "warning"]
    assert warned and "could not be established" in warned[0]
    assert len(doc["only_in_target"]) == 2 and code != 0


def test_l1_says_collect_at_mix(dumps):
    code, doc = compare(dumps / "L1" / "tp1", dumps / "L1" / "hf")
    assert code == 3
    for pair in doc["pairs"]:
        assert pair["status"] == "partial", pair
        notes = rules(pair)["compare-backends"]
        assert "at L1 no module record" in notes[0]


@pytest.mark.parametrize("target,golden", [("vdp2", "vtp1"), ("vtp1", "vdp2"), ("vdp2", "hf"), ("vdp2", "fsdp2")])
def test_data_parallel_ranks_as_one_model(dumps, target, golden):
    """Two data-parallel ranks, each with its share of the batch, against one process: one model on the whole
    batch. Each rank's loss and its parameter gradients (before the all-reduce) are its own, never judged
    against the whole; the index megatron-core's cross entropy builds for each rank's rows is recognised."""
    code, doc = compare(dumps / "mix" / target, dumps / "mix" / golden)
    pairs = by_stage(doc)
    assert len(doc["pairs"]) == 2 and code in (0, 3), [(p["stage"], p["status"], p["first_divergence"])
                                                       for p in doc["pairs"]]
    dp = "target" if target == "vdp2" else "golden"
    layout = [f["message"] for f in doc["diagnostics"] if f["rule"] == "compare-layout"]
    assert any(f"{dp}: data-parallel size 2 from the dumps" in m for m in layout), layout
    for pair in doc["pairs"]:
        assert pair["status"] in ("same", "partial") and pair["first_divergence"] is None, pair
    up = pairs[UPDATE]["coverage"][dp]
    assert set(up["rank_own_records"]) == {"partial sum", "rank-local index"}, up
    said = " ".join(f["message"] for f in pairs[UPDATE]["findings"])
    assert "each data-parallel group of 2 ranks combined" in said
    if "vtp1" in (target, golden):  # the same code: every record paired, the log-probs all compared
        assert pairs[LOG_PROB]["status"] == "same" and pairs[LOG_PROB]["coverage"]["full"]
        assert "gradients are 2 times the" in said  # its loss scaled for an averaging all-reduce, as verl's


@pytest.mark.parametrize("golden", ["vtp1", "hf", "fsdp2"])
def test_data_parallel_change_is_named(dumps, golden):
    want = _manifest(dumps)["vdp2-fc2"]
    code, doc = compare(dumps / "mix" / "vdp2-fc2", dumps / "mix" / golden)
    assert code == 1
    for pair in doc["pairs"]:
        first = pair["first_divergence"]
        assert pair["status"] == "diverged" and first["module"] == want["expect_module"], first


def test_data_parallel_from_a_verl_config(dumps, tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      tensor_model_parallel_size: 1\n")
    code, doc = compare(dumps / "mix" / "vdp2", dumps / "mix" / "vtp1", "--target-conf", conf)
    assert code == 3 and by_stage(doc)[LOG_PROB]["status"] == "same"
    assert any(f"data-parallel size 2 from conf {conf}" in f["message"] for f in doc["diagnostics"])
