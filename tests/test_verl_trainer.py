"""verl 0.9.1's own trainer on CPU (`python -m verl.trainer.main_ppo ... +profiler=GROUP`, bench/verl_trainer_run.py):
its real Ray, agent loop, vLLM server and FSDP2 workers, with a config group as a user types it, then the dump
tree read directly, the validator's plan for the same command line, and the rollout compare of the run.

One run is made in the background while the suite runs (the trainer venv, requirements/venvs/vllm.lock):
the rollout group on steps 1 and 2 as one continuous window, fp32 on both sides, the engine's layer 1
mlp.down_proj scaled by 1.01 in what it receives at the weight sync before step 2. The right answers: both steps
hold both stages, in the guide's layout, as the plan said; step 1 is `same`; step 2 diverges at that layer.

The other runs (every group, strict and non-strict faults, world size 2 against 1, remove-padding, MoE, bf16)
take 2 to 4 minutes each: they run with VERL_PDBG_TRAINER_MATRIX=1 (docs/verl-trainer-on-cpu.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import release_venvs
from compare_cli import run

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "bench" / "verl_trainer_run.py"
pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm")]
CI_RUN = ["--group", "precision_debugger_rollout", "--steps", "2", "--profile-steps", "1,2",
          "--plant-rollout-layer", "1", "--plant-from-step", "2", "--", "global_profiler.profile_continuous_steps=True"]


def trainer_run(out: Path, args: list[str]) -> dict | Exception:
    """bench/verl_trainer_run.py's JSON line (a background job's step: killed if the session ends first)."""
    proc = release_venvs.run_step([sys.executable, str(BENCH), "--out", str(out), *args], 2400)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return RuntimeError(f"verl_trainer_run.py printed no result (exit {proc.returncode}):\n{proc.stdout[-4000:]}")
    return json.loads(lines[-1])


def make_ci_run(venv, root):
    return trainer_run(root / "rollout", CI_RUN)


BACKGROUND_JOBS = {"trainer-rollout": ("vllm", make_ci_run)}


@pytest.fixture(scope="module")
def result() -> dict:
    got = release_venvs.job("trainer-rollout", "vllm", make_ci_run)
    if isinstance(got, Exception):
        pytest.fail(str(got))
    if got["returncode"] != 0:
        pytest.fail(f"main_ppo exited {got['returncode']}: {got['error']} (log {got['log']})")
    return got


def rollout_compare(save_path: str) -> tuple[int, dict]:
    code, out = run(["--rollout", save_path, "--format", "json"])
    return code, json.loads(out)


def test_every_promised_stage_is_collected_on_every_profiled_step(result):
    assert result["plan"]["steps"] == [1, 2]
    promised = set(result["plan"]["stages"])
    assert promised == {"rollout_generate", "actor_compute_log_prob"}
    assert {step: set(stages) for step, stages in result["stages"].items()} == {"1": promised, "2": promised}
    assert result["plan_vs_run"] == {"1": {"missing": [], "unexpected": []}, "2": {"missing": [], "unexpected": []}}
    # the runtime in the workers said nothing went wrong
    assert not [w for w in result["warnings"] if "verl_pdbg_conf" in w or "not collected" in w], result["warnings"]


def test_the_dumps_are_in_the_guides_layout(result):
    save = Path(result["save_path"])
    for step in (1, 2):
        actor = save / f"step_{step}" / "actor_compute_log_prob" / "step0" / "rank0"
        assert (actor / "dump.json").is_file() and (actor / "tokens.json").is_file()
        # the rollout: one msprobe step per engine step (the prefill, then one per decoded token)
        engine_steps = sorted(int(p.name[4:]) for p in (save / f"step_{step}" / "rollout_generate").glob("step*"))
        assert engine_steps == list(range(len(engine_steps))) and len(engine_steps) >= 2
    by_path = {d["path"]: d["records"] for d in result["dumps"]}
    assert all(isinstance(n, int) and n > 0 for n in by_path.values()), by_path
    assert by_path["step_2/actor_compute_log_prob/step0/rank0/dump.json"] > 10


def test_the_step_times_are_read(result):
    times = result["step_times"]
    assert set(times) == {"1", "2"} and all(t["profiled"] for t in times.values())
    assert all(t["step"] > 0 and t["rollout_generate"] > 0 for t in times.values())


def test_the_rollout_compare_of_the_run(result):
    code, doc = rollout_compare(result["save_path"])
    pairs = {p["step"]: p for p in doc["pairs"]}
    assert set(pairs) == {1, 2}
    same, planted = pairs[1], pairs[2]
    assert same["status"] == "same", same
    assert same["coverage"]["tokens_compared"] == same["coverage"]["rollout_tokens"] > 0
    assert planted["status"] == "diverged"
    assert planted["first_divergence"]["module"] == "model.layers.1.mlp.down_proj"
    assert code == 1
