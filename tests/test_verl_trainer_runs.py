"""Two real verl 0.9.1 trainer runs compared against each other (bench/verl_trainer_run.py twice, then
verl-pdbg-compare): world size 2 against 1 and use_remove_padding on against off, on the same weights, are
never a divergence (the same rows in other calls: compare-data, partial), a run against itself `same`; one
planted layer in one run (the actor's layer 1 mlp.down_proj scaled by 1.01 after step 1's rollout) is named at
that layer. docs/compare-trainer-runs.md holds the commands and the figures.

Each run takes 2 to 4 minutes and about 8 GB: with VERL_PDBG_TRAINER_MATRIX=1 only."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import release_venvs
from compare_cli import run
from verl_pdbg_conf.compare.modes import compare_runs

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "bench" / "verl_trainer_run.py"
pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm"),
              pytest.mark.skipif(os.environ.get("VERL_PDBG_TRAINER_MATRIX") != "1",
                                 reason="real trainer run pairs: VERL_PDBG_TRAINER_MATRIX=1")]
# one profiled step, greedy rollouts (the same responses in both runs), a rank's whole share in one call
COMMON = ["--group", "precision_debugger_l1", "--steps", "1", "--profile-steps", "1", "--greedy",
          "--micro-batch", "4"]
LEGACY = ["--", "trainer.use_v1=False"]  # verl's legacy trainer keeps the batch in the dataset's order
RUNS = {
    "ws1": COMMON + LEGACY,
    "ws2": COMMON + ["--nproc", "2"] + LEGACY,
    "rmpad": COMMON + ["--remove-padding"] + LEGACY,
    "ws2plant": COMMON + ["--nproc", "2", "--plant-actor-layer", "1"] + LEGACY,
    "rmpadplant": COMMON + ["--remove-padding", "--plant-actor-layer", "1"] + LEGACY,
    "ws1v1": COMMON,  # verl's default v1 trainer: the batch in rollout completion order
}
# the same runs with tensors and each forward's token ids (tokens.json): compared token by token
TENSOR = ["--group", "precision_debugger_tensor"] + COMMON[2:]
RUNS.update({
    "t_ws1": TENSOR + LEGACY,
    "t_ws2": TENSOR + ["--nproc", "2"] + LEGACY,
    "t_rmpad": TENSOR + ["--remove-padding"] + LEGACY,
    "t_ws2plant": TENSOR + ["--nproc", "2", "--plant-actor-layer", "1"] + LEGACY,
    "t_rmpadplant": TENSOR + ["--remove-padding", "--plant-actor-layer", "1"] + LEGACY,
})
STAGES = {"actor_compute_log_prob", "actor_update"}
PLANTED = "model.layers.1.mlp.down_proj"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainer_runs")
    made = {}

    def get(name: str) -> str:
        if name not in made:
            proc = release_venvs.run_step([sys.executable, str(BENCH), "--out", str(root / name), *RUNS[name]], 2400)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if not lines:
                pytest.fail(f"verl_trainer_run.py printed no result (exit {proc.returncode}):\n{proc.stdout[-4000:]}")
            result = json.loads(lines[-1])
            if result["returncode"] != 0:
                pytest.fail(f"main_ppo exited {result['returncode']}: {result['error']} (log {result['log']})")
            made[name] = result["save_path"]
        return made[name]
    return get


def compare(target: str, golden: str) -> tuple[int, dict]:
    code, out = run([target, golden, "--format", "json"])
    return code, json.loads(out)


def by_stage(doc: dict) -> dict:
    return {p["stage"]: p for p in doc["pairs"]}


def first_at_planted_layer(pair: dict) -> None:
    """The planted weight named: layer 1's down_proj call (Qwen2MLP.forward), its weight input."""
    f = pair["first_divergence"]
    assert pair["status"] == "diverged" and f["layer"] == 1, pair
    assert f["name"].startswith("Functional.linear.") and f["name"].endswith(".forward.input.1"), f
    assert "modeling_qwen2.py" in f["where"], f


def test_world_size_2_against_1_is_no_divergence(runs):
    code, doc = compare(runs("ws2"), runs("ws1"))
    # verl's two FSDP ranks put together as one data-parallel model, not read as tensor-parallel
    said = " ".join(d["message"] for d in doc["diagnostics"])
    assert "data-parallel size 2" in said and "tensor-parallel" not in said, said
    # the same rows in other calls (balance_batch, per-call padding): said, never a false divergence
    assert code == 3 and all((p["status"], p["reason"]) == ("mismatch", "compare-data") for p in doc["pairs"])
    for p in doc["pairs"]:  # statistics of other rows can never be compared: the hint says what to do
        (f,) = [f for f in p["findings"] if f["rule"] == "compare-data"]
        assert "+profiler=precision_debugger_tensor" in f["hint"], f


def tokens_said(pair: dict) -> str:
    (f,) = [f for f in pair["findings"] if f["rule"] == "compare-tokens"]
    counts = pair["coverage"]["tokens"]
    # each sequence's last token is left out (its next token is whatever follows it in its call)
    assert counts["sequences"] == 8 and counts["tokens"] > 100 and counts["target_sequences_alone"] == 0, counts
    assert counts["golden_sequences_alone"] == 0 and counts["points_not_readable"] == 0, counts
    assert f"compared token by token, {counts['tokens']} token(s) of 8 sequence(s)" in f["message"], f
    return f["message"]


def test_tensors_world_size_2_against_1_is_same_token_by_token(runs):
    code, doc = compare(runs("t_ws2"), runs("t_ws1"))
    assert code == 0 and {p["stage"] for p in doc["pairs"]} == STAGES, doc["pairs"]
    for p in doc["pairs"]:
        assert p["status"] == "same", p
        tokens_said(p)
    # the update's backward records are keyed by the forward's calls: per-token gradients compared too
    update = by_stage(doc)["actor_update"]["coverage"]["tokens"]
    compared = by_stage(doc)["actor_compute_log_prob"]["coverage"]["tokens"]["target_records_compared"]
    assert update["target_records_compared"] > 1.5 * compared, update


def test_tensors_remove_padding_against_padded_is_same_token_by_token(runs):
    code, doc = compare(runs("t_rmpad"), runs("t_ws1"))
    # the packed path's own ops (prepare_model_inputs' roll, the packed-sequence mask) have no counterpart and
    # are compared at the records after them; verl's log-probs over the real tokens pair with the padded path's
    assert code == 0 and {p["stage"] for p in doc["pairs"]} == STAGES, doc["pairs"]
    for p in doc["pairs"]:
        assert p["status"] == "same", p
        assert p["coverage"]["tokens"]["records_not_paired"], p["coverage"]
        tokens_said(p)


def test_tensors_a_planted_layer_is_named_token_by_token(runs):
    for planted in ("t_ws2plant", "t_rmpadplant"):
        code, doc = compare(runs(planted), runs("t_ws1"))
        assert code == 1 and {p["stage"] for p in doc["pairs"]} == STAGES, doc["pairs"]
        for p in doc["pairs"]:
            f = p["first_divergence"]
            # layer 1's down_proj call: its output, every token past the limit and nothing before it
            assert p["status"] == "diverged" and f["layer"] == 1 and f["kind"] == "output", p
            assert f["name"].startswith("Functional.linear.") and "modeling_qwen2.py:46" in f["where"], f
            assert 0.005 < f["value"] < 0.02, f
            tokens_said(p)
    # one layout: record by record the tensor pair blames an equal input of verl's mask builder (compare-data);
    # the token records show the same token ids per call, and the planted layer is named on each rank
    code, doc = compare(runs("t_ws2plant"), runs("t_ws2"))
    assert code == 1 and len(doc["pairs"]) == 4, doc["pairs"]
    for p in doc["pairs"]:
        f = p["first_divergence"]
        assert p["status"] == "diverged" and f["layer"] == 1 and "modeling_qwen2.py:46" in f["where"], p
        (said,) = [x["message"] for x in p["findings"] if x["rule"] == "compare-tokens"]
        assert "the same token ids" in said, said


def test_remove_padding_against_padded_is_no_divergence(runs):
    code, doc = compare(runs("rmpad"), runs("ws1"))
    assert code == 3 and {p["status"] for p in doc["pairs"]} <= {"partial", "mismatch"}, doc["pairs"]


def test_a_run_against_itself_is_same(runs):
    # through the API (the command refuses one folder twice): the merge of verl's ranks is deterministic
    for name in ("ws2", "rmpad"):
        cmp = compare_runs(runs(name), runs(name), jobs=1)
        assert cmp.exit_code == 0 and {p.status for p in cmp.pairs} == {"same"}


def test_a_planted_layer_is_named_at_that_layer(runs):
    for planted, golden in (("ws2plant", "ws2"), ("rmpadplant", "rmpad")):
        code, doc = compare(runs(planted), runs(golden))
        assert code == 1 and {p["stage"] for p in doc["pairs"]} == {"actor_compute_log_prob", "actor_update"}
        for p in doc["pairs"]:
            first_at_planted_layer(p)
    # across world sizes: the log-prob forward names it too
    code, doc = compare(runs("ws2plant"), runs("ws1"))
    assert code == 1
    first_at_planted_layer(by_stage(doc)["actor_compute_log_prob"])


def test_the_v1_trainer_against_the_legacy_one_is_other_rows(runs):
    code, doc = compare(runs("ws1v1"), runs("ws1"))
    assert code == 3 and all((p["status"], p["reason"]) == ("mismatch", "compare-data") for p in doc["pairs"])
    for p in doc["pairs"]:
        (f,) = [f for f in p["findings"] if f["rule"] == "compare-data"]
        assert "other rows" in f["message"] and "trainer.use_v1=False" in f["hint"]
