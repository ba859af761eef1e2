"""Routing replay (verl's R3) on real dumps: the rollout is real vLLM's (the Qwen3-MoE runs of
make_rollout_dumps.py), the actor's log-prob forward is made again by make_replay_dumps.py with transformers'
routers replaying the experts the engine chose (its own logits weigh them, as verl's replay does).

Without replay a nudged router routes some tokens otherwise; with replay no token is routed differently. The
replay attached one layer off (the router at layer k replays layer k-1's record) is caught as a replay bug that
names the layer each router's experts came from, not as near-ties, with or without --dtype-aware."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import release_venvs
from compare_cli import run
from test_compare_rollout import MOE_ARCHS, make_moe_dumps, rollout, rules  # noqa: F401 (the fixture's job)

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm")]
BACKGROUND_JOBS = {"rollout-moe-dumps": ("vllm", make_moe_dumps)}
REPLAYS = {"router-replay": ("router", 0), "same-replay": ("same", 0), "router-shifted": ("router", 1),
           "same-shifted": ("same", 1)}


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    root = release_venvs.job_root("rollout-moe-dumps", "vllm", make_moe_dumps) / "qwen3_moe"
    python = str(release_venvs.get("vllm") / "bin" / "python")
    out = tmp_path_factory.mktemp("replay")
    for name, (run_name, shift) in REPLAYS.items():
        done = subprocess.run([python, os.path.join(HERE, "make_replay_dumps.py"), str(root), run_name,
                               str(out / name), "--shift", str(shift)], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)), timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, out


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
    assert [l["follows"] for l in routing["replay"]["layers"]] == [l["layer"] for l in routing["layers"]]
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
