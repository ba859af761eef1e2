"""verl 0.9.1's real workers (ActorRolloutRefWorker as actor and as ref, the critic's TrainingWorker)
on verl's FSDP2 engine on CPU, two profiled PPO steps, through bench/real_workers.py as a user runs
it. The dump tree and every dump.json are read here, not taken from the bench's summary."""

from __future__ import annotations

import json
import os
import re

import pytest

from runtime_helpers import bench_summary, start_bench

from verl_pdbg_conf.verl_facts.stages import VERL_TARGETS

pytestmark = pytest.mark.slow

STAGES = ("actor_compute_log_prob", "actor_update", "critic_update", "ref_compute_log_prob")
VERL_STAGES = ("actor_compute_log_prob", "actor_update", "ref_compute_log_prob")
STEPS = (1, 2)
# msprobe's L1 API record names: Functional.linear.0.forward, Tensor.__mul__.3.backward, ...
L1_NAME = re.compile(r"^(Functional|Torch|Tensor|Distributed|Aten|VF|NPU)\.[\w.]+\.\d+\.(forward|backward)$")
RUNS = {"l1": ("L1", "pdbg", False), "l0": ("L0", "pdbg", False), "verl": ("L1", "verl", False),
        "verl_strict": ("L1", "verl", True)}


@pytest.fixture(scope="module")
def runs(module_tmp):
    """The three runs at once (one bench process each, each with its own worker child)."""
    procs = {}
    for name, (level, runtime, strict) in RUNS.items():
        out = os.path.join(module_tmp, name)
        args = ["--level", level, "--runtime", runtime] + ["--strict"] * strict
        procs[name] = (out, start_bench(module_tmp, out, *args))
    results = {}
    for name, (out, proc) in procs.items():
        expected = 1 if name == "verl_strict" else 0  # the bench exits 1 when a step raised
        results[name] = (out, bench_summary(name, proc, expected))
    return results


def _dumps(out: str) -> dict:
    """{"step_N/stage": dump.json} for every dump.json under out, however deep."""
    found = {}
    for root, _, names in os.walk(out):
        if "dump.json" in names:
            rel = os.path.relpath(root, out).split(os.sep)
            assert rel[2:] == ["step0", "rank0"], rel  # the guide's layout, nothing else
            with open(os.path.join(root, "dump.json")) as f:
                found["/".join(rel[:2])] = json.load(f)
    return found


def _expected(stages):
    return sorted(f"step_{n}/{s}" for n in STEPS for s in stages)


@pytest.mark.parametrize("name", ["l1", "l0"])
def test_every_stage_dumped_in_both_steps(runs, name):
    out, result = runs[name]
    dumps = _dumps(out)
    assert sorted(dumps) == _expected(STAGES)  # no train_batch dir, no step_unknown, no stage.1
    for key, dump in dumps.items():
        assert dump["level"] == RUNS[name][0] and dump["task"] == "statistics", key
        assert dump["data"], key
        backward = [k for k in dump["data"] if ".backward" in k]
        assert bool(backward) == key.endswith("_update"), key  # updates run backward, log-probs do not
    assert result["errors"] == [] and result["warnings"] == []
    assert result["model_not_resolved"] == 0


def test_l1_records_are_apis(runs):
    for key, dump in _dumps(runs["l1"][0]).items():
        names = list(dump["data"])
        assert all(L1_NAME.match(n) for n in names), [n for n in names if not L1_NAME.match(n)][:5]
        assert "Functional.linear.0.forward" in names, key


def test_l0_records_are_the_stage_models_own_modules(runs):
    for key, dump in _dumps(runs["l0"][0]).items():
        names = list(dump["data"])
        assert all(n.startswith("Module.") for n in names), key
        assert "Module.model.layers.0.self_attn.q_proj.Linear.forward.0" in names, key
        # Each stage is bound to its own model: only the critic's value model (Qwen2ForTokenClassification)
        # has a dropout before its head. msprobe itself skips a model's last module when verl is
        # imported (module_processor.py: "first or last layer in verl scenario"): no lm_head, no score.
        critic = key.endswith("critic_update")
        assert ("Module.dropout.Dropout.forward.0" in names) == critic, key
        assert not any(n.startswith(("Module.lm_head.", "Module.score.")) for n in names), key


def test_models_found_where_stages_py_records(runs):
    """stages.py's model_at is checked on the real workers: the resolver finds the engine's own module
    there, and the runtime bound each collected stage's model at exactly that attribute."""
    model_at = VERL_TARGETS["0.9.1"].model_at
    assert sorted(model_at) == sorted(STAGES)
    for name in ("l1", "l0"):
        result = runs[name][1]
        for stage, (worker, path) in model_at.items():
            found = result["model_found_at"][stage]
            assert (found["worker"], found["path"], found["is_engine_module"]) == (worker, path, True)
            assert result["runtime_resolved"][stage] == [f"{worker}.{path}"]


def test_verl_backend_baseline(runs):
    out, result = runs["verl"]
    dumps = _dumps(out)
    assert sorted(dumps) == _expected(VERL_STAGES)  # no critic_update: verl rejects train_batch
    assert result["warnings"] == ["verl.utils.profiler.precision_debugger_profile: "
                                  "Unknown precision_debugger stage: train_batch"]
    assert result["warning_count"] == 2 * len(STEPS)  # once per critic mini-batch
    # verl's candidates would not find the critic's model even under a known stage name
    assert result["model_found_at"]["critic_update"]["verl_backend_binds"] is None
    assert result["model_found_at"]["actor_update"]["verl_backend_binds"] == "FSDPQwen2ForCausalLM"
    # where both collect, both dump the same records
    ours = _dumps(runs["l1"][0])
    for key, dump in dumps.items():
        assert list(dump["data"]) == list(ours[key]["data"]), key


def test_verl_backend_strict_stops_the_step_at_the_critic_update(runs):
    """strict: True with verl's backend: train_batch raises out of the critic's train_mini_batch, so
    the step never reaches update_actor (the trainer calls the critic's update first)."""
    out, result = runs["verl_strict"]
    assert sorted(_dumps(out)) == _expected(("actor_compute_log_prob", "ref_compute_log_prob"))
    assert len(result["errors"]) == len(STEPS)
    for error in result["errors"]:
        assert "train_mini_batch" in error and "ValueError: Unknown precision_debugger stage: train_batch" in error
