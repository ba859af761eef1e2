"""Two training runs of one Qwen3-MoE checkpoint on two transformers releases (issue 35): 5.x fuses the experts
into one module of 3-D weights (`mlp.experts`, an expert is an index) and calls its `act_fn` once on every
routed row; 4.57 builds one module per expert (`mlp.experts.J.gate_proj/up_proj/down_proj/act_fn`, a
ModuleList never called itself) and calls each on its own tokens. Both run make_wrapper_dumps.py (plain, a
one-rank gloo group, this package's runtime, msprobe 26.2): 5.x in the dev venv, 4.57 in its own
(requirements/venvs/transformers4.lock), in the background while the suite runs.

The compare pairs them by its module trees (pipeline/trees.py, indexed families): the per-expert act_fns' rows
put together against the fused act_fn, everything else of the experts compared at their block's boundary.
Same weights are `same`; expert 3's down projection x1.05 in layer 1 on the per-expert side parts at layer 1's
MoE block, which says the experts are compared only there. Which expert cannot be said, and the verdict says
why: 5.x's fused experts (grouped_mm) run every expert's rows in one call.

With experts_implementation="eager" (`v5loop`), 5.x's fused experts run one expert at a time, each iteration's
first call taking the expert's index: each expert's calls pair with 4.57's module of that expert
(pipeline/indices.py), same weights are `same`, and the changed expert is named by its index."""

from __future__ import annotations

import subprocess

import pytest

import compare_cli
import make_wrapper_dumps
import release_venvs

pytestmark = [pytest.mark.slow, pytest.mark.venvs("transformers4")]
LAYER = 1
STAGE = "step_1/actor_compute_log_prob"


def make_dumps(venv, root):
    """The 5.x runs in the dev venv, then the 4.57 runs in `venv`: made in the background (conftest.py)."""
    ckpt = str(root / "checkpoint")
    common = ["--arch", "qwen3_moe", "--layer", str(LAYER), "--checkpoint", ckpt]
    try:
        make_wrapper_dumps.make_all(root, {"v5-mix": [*common, "--level", "mix", "--runs", "plain",
                                                      "--save-checkpoint", ckpt]})
        make_wrapper_dumps.make_all(root, {"v5-L0": [*common, "--level", "L0", "--runs", "plain"],
                                           "v5loop-mix": [*common, "--level", "mix", "--runs", "plain,plain-weight",
                                                          "--experts-loop"]})
        make_wrapper_dumps.make_all(root, {f"v4-{level}": [*common, "--level", level, "--runs", "plain,plain-weight"]
                                           for level in ("mix", "L0")}, python=str(venv / "bin" / "python"))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:  # the waiting test reports it (job_root)
        return e
    return root


BACKGROUND_JOBS = {"moe-releases": ("transformers4", make_dumps)}


@pytest.fixture(scope="module")
def dumps():
    return release_venvs.job_root("moe-releases", "transformers4", make_dumps)


def _family_said(pair) -> bool:
    return any(f["rule"] == "compare-modules" and "model.layers.*.mlp.experts: one module per index" in f["message"]
               for f in pair["findings"])


@pytest.mark.parametrize("level", ["mix", "L0"])
def test_per_expert_modules_against_fused_experts_are_same(dumps, level):
    v5 = dumps / f"v5-{level}" / "plain"
    code, doc = compare_cli.run_json(dumps / f"v4-{level}" / "plain" / STAGE, v5 / STAGE)
    (pair,) = doc["pairs"]
    assert code == 0 and pair["status"] == "same", (pair["status"], pair["first_divergence"], pair["coverage"])
    assert pair["coverage"]["full"] and _family_said(pair)
    code, doc = compare_cli.run_json(dumps / f"v4-{level}" / "plain", v5)  # the whole run: the update too
    update = {p["stage"]: p for p in doc["pairs"]}["actor_update"]
    if level == "L0":  # its forward, backward and SGD step
        assert code == 0 and {p["status"] for p in doc["pairs"]} == {"same"}, doc["pairs"]
    else:  # the SGD step's calls name no parameter, and the parameters are laid out otherwise: not compared
        assert code == 3 and update["status"] == "partial" and update["first_divergence"] is None, update
        said = [f["message"] for f in update["findings"] if f["rule"] == "compare-coverage"]
        assert len(said) == 1 and "(outside any module)" in said[0] and "experts" not in said[0], said


@pytest.mark.parametrize("level", ["mix", "L0"])
@pytest.mark.parametrize("per_expert_is_target", [True, False])
def test_changed_expert_parts_at_its_layers_experts(dumps, level, per_expert_is_target):
    v4 = dumps / f"v4-{level}" / "plain-weight" / STAGE
    v5 = dumps / f"v5-{level}" / "plain" / STAGE
    code, doc = compare_cli.run_json(*((v4, v5) if per_expert_is_target else (v5, v4)))
    (pair,) = doc["pairs"]
    first = pair["first_divergence"]
    assert code == 1 and pair["status"] == "diverged"
    assert first["module"] == f"model.layers.{LAYER}.mlp" and first["kind"] == "output", first
    assert f"inside model.layers.{LAYER}.mlp.experts" in first["note"], first
    assert "which index cannot be said: the one module runs every index's rows in one call" in first["note"], first
    assert "expert" not in first
    # the router's logits and the experts' act_fn rows before it agree: nothing in an earlier layer parts
    assert first["layer"] == LAYER


@pytest.mark.parametrize("per_expert_is_target", [True, False])
def test_experts_run_one_at_a_time_pair_expert_by_expert(dumps, per_expert_is_target):
    """Same weights: `same` at full coverage, each expert's calls paired with its own (the family said)."""
    v4, v5 = dumps / "v4-mix" / "plain" / STAGE, dumps / "v5loop-mix" / "plain" / STAGE
    code, doc = compare_cli.run_json(*((v4, v5) if per_expert_is_target else (v5, v4)))
    (pair,) = doc["pairs"]
    assert code == 0 and pair["status"] == "same", (pair["status"], pair["first_divergence"], pair["coverage"])
    assert pair["coverage"]["full"] and _family_said(pair)


@pytest.mark.parametrize("planted", ["v4", "v5loop"])
@pytest.mark.parametrize("per_expert_is_target", [True, False])
def test_changed_expert_named_by_its_index(dumps, planted, per_expert_is_target):
    """Expert 3's down projection x1.05 in layer 1, on either side: named by its index, where its weight enters
    (the down projection's weight, a module's Linear in 4.57, the slice the fused experts pass in 5.x)."""
    v4 = dumps / "v4-mix" / ("plain-weight" if planted == "v4" else "plain") / STAGE
    v5 = dumps / "v5loop-mix" / ("plain-weight" if planted == "v5loop" else "plain") / STAGE
    code, doc = compare_cli.run_json(*((v4, v5) if per_expert_is_target else (v5, v4)))
    (pair,) = doc["pairs"]
    first = pair["first_divergence"]
    assert code == 1 and pair["status"] == "diverged", pair
    assert first["expert"] == 3 and first["layer"] == LAYER and first["kind"] == "input", first
    # the golden's module of that expert: 4.57's own, or 5.x's fused experts
    assert first["module"] == f"model.layers.{LAYER}.mlp.experts" + (".3" if per_expert_is_target is False else ""), \
        first
    code, text = compare_cli.run([v4, v5] if per_expert_is_target else [v5, v4])
    assert code == 1 and "expert 3" in text
