"""The rollout compare's steps as pair jobs of the run compare's executor (compare/execute.py), on the
example rollout (examples/rollout: real vLLM against its actor, layer 0's down_proj 1% off in the engine)
given a second step: the worker pool gives the document the one process gives, -o keeps a summary per step
and one for the whole, and a step's fault is that step's error. Ray: tests/test_compare_ray.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compare_cli import run_json
from verl_pdbg_conf.compare.rollout import steps as rollout_steps
from verl_pdbg_conf.compare.verdict import ExitCode

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rollout"


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    """The example's step 1, and the same dumps again as step 2."""
    root = tmp_path_factory.mktemp("rollout2")
    for step in ("step_1", "step_2"):
        shutil.copytree(EXAMPLE / "step_1", root / step)
    return root


def _verdicts(doc: dict) -> list:
    return [(p["step"], p["status"], p["first_divergence"]["module"], p["coverage"]["tokens_compared"])
            for p in doc["pairs"]]


def test_the_pool_gives_what_one_process_gives(two_steps):
    one = run_json("--rollout", two_steps, "-j", "1")
    pool = run_json("--rollout", two_steps, "-j", "2")
    assert one == pool and one[0] == ExitCode.DIVERGED
    assert _verdicts(one[1]) == [(1, "diverged", "model.layers.0.mlp.down_proj", 11),
                                 (2, "diverged", "model.layers.0.mlp.down_proj", 11)]


def test_o_keeps_a_summary_per_step(two_steps, tmp_path):
    code, doc = run_json("--rollout", two_steps, "-o", tmp_path / "o")
    assert code == ExitCode.DIVERGED and doc["output_dir"] == str(tmp_path / "o")
    whole = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert whole["pairs"] == doc["pairs"] and whole["mode"] == "rollout"
    for p in doc["pairs"]:
        step = json.loads((tmp_path / "o" / f"step_{p['step']}" / "summary.json").read_text())
        assert step.pop("written_by") == "verl-pdbg-compare" and step == p
    assert sorted(x.name for x in (tmp_path / "o").iterdir()) == ["step_1", "step_2", "summary.json"]


def crashes_on_step_2(job):
    """Fault injection in a pool worker (sent by reference: spawn's workers import this module)."""
    if "step_2" in job.target:
        raise KeyError("injected")
    return rollout_steps.compare_job(job)


def test_a_fault_in_a_pool_worker_is_its_step_alone(two_steps):
    from verl_pdbg_conf.compare.options import CompareOptions
    from verl_pdbg_conf.compare.report.document import as_dict

    cmp = rollout_steps.compare_rollout(str(two_steps), options=CompareOptions(jobs=2), job_fn=crashes_on_step_2)
    one, two = as_dict(cmp)["pairs"]
    assert (one["status"], two["status"], two["reason"]) == ("diverged", "error", "compare-failed")
    (said,) = two["findings"]
    assert said["message"] == "step_2: the compare failed: KeyError: 'injected'" and said["severity"] == "error"
    assert cmp.exit_code == ExitCode.ERROR  # the step lost may hold a divergence


def test_an_unreadable_token_record_is_its_step_alone(two_steps, tmp_path, capsys):
    """step 2's engine tokens.json made a directory: that step cannot be aligned, the other is compared."""
    root = tmp_path / "r"
    shutil.copytree(two_steps, root)
    tokens = next((root / "step_2" / "rollout_generate").glob("step*/rank0/tokens.json"))
    tokens.unlink()
    tokens.mkdir()
    code, doc = run_json("--rollout", root, "-j", "2")
    one, two = doc["pairs"]
    assert (one["status"], two["status"], two["reason"]) == ("diverged", "mismatch", "compare-mismatch")
    assert "compare-tokens" in {f["rule"] for f in two["findings"]}
    assert code == doc["exit_code"] == ExitCode.DIVERGED and "Traceback" not in capsys.readouterr().err


def test_coverage_says_its_minimum_and_whether_full(two_steps):
    code, doc = run_json("--rollout", two_steps, "--min-coverage", "1", "-j", "1")
    assert {(p["coverage"]["minimum"], p["coverage"]["full"]) for p in doc["pairs"]} == {(1.0, True)}


def test_the_job_is_a_module_function(two_steps):
    """What the pool and Ray send: a top-level function of a PairJob (pickled by reference)."""
    import pickle

    assert pickle.loads(pickle.dumps(rollout_steps.compare_job)) is rollout_steps.compare_job


def test_counts_add_up_in_tokens(two_steps):
    """Each rollout row and each actor token counted once: the example's 11 rows all compared; the actor's 13
    tokens, 11 compared and the last of each of its 2 sequences not (nothing samples after it)."""
    code, doc = run_json("--rollout", two_steps / "step_1", "-j", "1")
    (p,) = doc["pairs"]
    assert p["coverage"]["counts"] == {
        "target": {"unit": "tokens", "total": 11, "compared": 11, "not_compared": 0, "unreadable": 0},
        "golden": {"unit": "tokens", "total": 13, "compared": 11, "not_compared": 2, "unreadable": 0}}
    assert doc["statuses"] == {"same": 0, "diverged": 1, "partial": 0, "mismatch": 0, "error": 0, "failed": 0}


def test_a_steps_requests_tokens_and_modules_as_the_document_has_them():
    """The typed per-request, per-token and per-module entries (nodes.RequestSummary, TokenSummary,
    ModuleCount) become the document's plain data with these keys, and their counts agree with the step's."""
    code, doc = run_json("--rollout", EXAMPLE)
    (p,) = doc["pairs"]
    assert code == ExitCode.DIVERGED and p["requests"] and p["tokens"] and p["top"]
    assert all(list(r) == ["request", "tokens", "compared", "diverged_tokens", "max_logprob_gap", "first_divergence"]
               for r in p["requests"])
    assert all(list(t) == ["request", "position", "token_id", "logprob_engine", "logprob_trainer", "logprob_gap",
                           "worst", "first_divergence"] for t in p["tokens"])
    assert all(list(m) == ["module", "tokens"] for m in p["top"])
    assert sum(r["compared"] for r in p["requests"]) == p["coverage"]["tokens_compared"] == 11
    assert sum(r["diverged_tokens"] for r in p["requests"]) == p["diverged_tokens"] == sum(m["tokens"] for m in p["top"])
    gaps = [abs(t["logprob_gap"]) for t in p["tokens"]]
    assert gaps == sorted(gaps, reverse=True) and max(r["max_logprob_gap"] for r in p["requests"]) == gaps[0]
    first = min((r["first_divergence"] for r in p["requests"] if r["first_divergence"]), key=lambda f: f["request"])
    assert first["module"] == p["first_divergence"]["module"] and first["metric"] == p["first_divergence"]["metric"]
