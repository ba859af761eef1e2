"""Routing replay (verl's R3) on real dumps: the rollout is real vLLM's (the Qwen3-MoE runs of
make_rollout_dumps.py), the actor's log-prob forward is made again by make_replay_dumps.py with transformers'
routers replaying the experts the engine chose (its own logits weigh them, as verl's replay does).

Without replay a nudged router routes some tokens otherwise; with replay no token is routed differently. The
replay attached one layer off (the router at layer k replays layer k-1's record) is caught as a replay bug that
names the layer each router's experts came from, not as near-ties, with or without --dtype-aware."""

from __future__ import annotations

import json
import os

import pytest

import release_venvs
from compare_cli import run
from test_compare_rollout import make_moe_dumps, rollout, rules

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm")]
REPLAYS = {"router-replay": ("router", 0), "same-replay": ("same", 0), "router-shifted": ("router", 1),
           "same-shifted": ("same", 1)}


def make_replays(venv, root):
    """REPLAYS of the Qwen3-MoE rollouts (make_replay_dumps.py, one process), once rollout-moe-dumps, queued
    before it, is done: in the background (conftest.py). (the rollouts' root, the replays' root)"""
    moe = release_venvs.job("rollout-moe-dumps", "vllm", make_moe_dumps)
    if isinstance(moe, Exception):
        return moe
    specs = [f"{name}={run_name}:{shift}" for name, (run_name, shift) in REPLAYS.items()]
    done = release_venvs.run_step([str(venv / "bin" / "python"), os.path.join(HERE, "make_replay_dumps.py"),
                                   str(moe / "qwen3_moe"), str(root), *specs], 900,
                                  env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))
    if done.returncode != 0:
        return RuntimeError(f"make_replay_dumps.py failed:\n{done.stdout[-4000:]}")
    return moe / "qwen3_moe", root


# the rollouts first: the replays' job waits for them, and a job runs only after those queued before it
BACKGROUND_JOBS = {"rollout-moe-dumps": ("vllm", make_moe_dumps), "rollout-replay": ("vllm", make_replays)}


@pytest.fixture(scope="module")
def replays():
    return release_venvs.job_root("rollout-replay", "vllm", make_replays)


def test_replay_routes_every_token_as_the_engine(replays):
    root, out = replays
    # without replay, layer 1's nudged router routes some tokens otherwise than the engine
    _, doc = rollout(root / "router")
    (plain,) = doc["pairs"]
    assert plain["routing"]["routed_differently"] > 0 and plain["routing"]["replay"] is None
    # with it, none: the actor's layer-1 router keeps the engine's experts against its own logits
    code, doc = rollout(out / "router-replay")
    (pair,) = doc["pairs"]
    routing = pair["routing"]
    assert routing["routed_differently"] == 0 and routing["tokens"] == plain["routing"]["tokens"]
    assert routing["replay"]["imposed"] == plain["routing"]["routed_differently"] and not routing["replay"]["bug"]
    assert [l["follows"] for l in routing["replay"]["layers"]] == [None, None]
    assert routing["replay"]["misattached"] == []
    # the router's logits still differ (replay does not undo a changed weight): the honest verdict
    fd = pair["first_divergence"]
    assert pair["status"] == "diverged" and fd["module"] == "model.layers.1.mlp.gate" and fd["kind"] == "output"
    assert "compare-routing-replay" not in rules(pair)
    # on the same weights the replay is invisible: same, nothing routed differently
    code, doc = rollout(out / "same-replay")
    (pair,) = doc["pairs"]
    assert code == 0 and pair["status"] == "same" and pair["routing"]["routed_differently"] == 0


@pytest.mark.parametrize("name", ["same-shifted", "router-shifted"])
@pytest.mark.parametrize("options", [[], ["--dtype-aware"]])
def test_replay_one_layer_off_is_caught(replays, name, options):
    _, out = replays
    code, doc = rollout(out / name, options=options)
    (pair,) = doc["pairs"]
    fd = pair["first_divergence"]
    assert code == 1 and pair["status"] == "diverged", pair
    assert fd["module"] == "model.layers.0.mlp" and fd["kind"] == "routing" and fd["routing"]["replayed"], fd
    routing = pair["routing"]
    for layer in routing["layers"]:  # nearly every token in every layer
        assert layer["share"] >= 0.9, layer
    rep = routing["replay"]
    assert rep["bug"] and rep["misattached"] == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert [(l["layer"], l["follows"]) for l in rep["layers"]] == [("model.layers.0.mlp", "model.layers.1.mlp"),
                                                                   ("model.layers.1.mlp", "model.layers.0.mlp")]
    (said,) = rules(pair)["compare-routing-replay"]
    assert "attached to the wrong layer" in said and "model.layers.1.mlp gets the engine's model.layers.0.mlp" in said
    code, text = run(["--rollout", str(out / name), *options])
    assert "a routing-replay bug, not a near-tie" in text
    assert "model.layers.1.mlp replays the engine's model.layers.0.mlp" in text


# ------------------------------------------------------------------ the engine's captured routed_experts


@pytest.fixture(scope="module")
def moe_same():
    return release_venvs.job_root("rollout-moe-dumps", "vllm", make_moe_dumps) / "qwen3_moe" / "same"


def _capture(run_dir, spoil=None):
    """Each engine step's token record given the routed_experts vLLM captures with enable_return_routed_experts
    (per request, per position [layers][top_k] by decoder layer), taken from its own dumped router logits (the
    CPU build cannot capture them); `spoil` the first request of the first step: an expert number past the
    last, a row of another top-k, or its layer 1 left out."""
    import glob

    import torch

    for n, rank in enumerate(sorted(glob.glob(str(run_dir / "step_1" / "rollout_generate" / "step*" / "rank0")))):
        doc = json.loads(open(os.path.join(rank, "tokens.json")).read())
        data = json.loads(open(os.path.join(rank, "dump.json")).read())["data"]
        logits = [torch.load(os.path.join(rank, "dump_tensor_data", data[key]["output"][0]["data_name"]))
                  for key in sorted(k for k in data if ".mlp.gate." in k)]
        for i, req in enumerate(doc["requests"]):
            first = req["rows"][0]
            req["routed_experts"] = [[lg[first + j].topk(2).indices.tolist() for lg in logits]
                                     for j in range(len(req["positions"]))]
            if n == 0 and i == 0 and spoil == "index-out-of-range":
                req["routed_experts"][0][1][0] = 99
            elif n == 0 and i == 0 and spoil == "shape":
                req["routed_experts"][0][1].append(3)
            elif n == 0 and i == 0 and spoil == "layer-missing":
                req["routed_experts"] = [row[:1] for row in req["routed_experts"]]
        open(os.path.join(rank, "tokens.json"), "w").write(json.dumps(doc))


def test_captured_routed_experts_are_read_as_the_engines_choice(moe_same, tmp_path):
    import shutil

    run_dir = tmp_path / "captured"
    shutil.copytree(moe_same, run_dir)
    _capture(run_dir)
    code, doc = rollout(run_dir)
    (pair,) = doc["pairs"]
    routing = pair["routing"]
    assert code == 0 and pair["status"] == "same", pair
    assert routing["captured"] == 2 * routing["tokens"] and routing["engine_choice"] == "the routed_experts it captured"
    assert routing["routed_differently"] == 0
    # the record is what is read: one token's layer-1 experts changed in it is one token routed differently
    rank = run_dir / "step_1" / "rollout_generate" / "step0" / "rank0"
    tokens = json.loads((rank / "tokens.json").read_text())
    row = tokens["requests"][0]["routed_experts"][2][1]
    tokens["requests"][0]["routed_experts"][2][1] = [e for e in range(8) if e not in row][:2]
    (rank / "tokens.json").write_text(json.dumps(tokens))
    _, doc = rollout(run_dir)
    layers = {l["layer"]: l for l in doc["pairs"][0]["routing"]["layers"]}
    assert layers["model.layers.1.mlp"]["routed_differently"] == 1
    assert layers["model.layers.0.mlp"]["routed_differently"] == 0
    (t,) = layers["model.layers.1.mlp"]["differing"]
    assert t["engine_margin"] < 0  # the record kept experts the engine's own logits rank lower


@pytest.mark.parametrize("spoil", ["index-out-of-range", "shape", "layer-missing"])
def test_bad_routed_experts_are_said_and_the_logits_read(moe_same, tmp_path, spoil):
    """Bad input in the captured record: a finding naming it, that request's routing read from the router
    logits instead, every token's routing still compared; never a traceback, never `same`."""
    import shutil

    run_dir = tmp_path / spoil
    shutil.copytree(moe_same, run_dir)
    _capture(run_dir, spoil)
    code, doc = rollout(run_dir)
    (pair,) = doc["pairs"]
    assert code in (1, 3) and pair["status"] != "same", pair
    said = [m for m in rules(pair).get("compare-tokens", []) if "routed_experts" in m]
    assert len(said) == 1, rules(pair)
    assert {"index-out-of-range": "below the model's 8", "shape": "not [2 layers][2]",
            "layer-missing": "routing records for some layers only"}[spoil] in said[0], said
    routing = pair["routing"]
    assert routing["tokens"] == pair["coverage"]["tokens_compared"] and routing["routed_differently"] == 0
    assert 0 < routing["captured"] < 2 * routing["tokens"]
