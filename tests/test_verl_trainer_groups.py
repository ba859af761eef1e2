"""Every config group, and strict and non-strict faults, in verl 0.9.1's own trainer on CPU
(bench/verl_trainer_run.py). Each run takes 2 to 4 minutes and 8 to 10 GB, one at a time: they run with
VERL_PDBG_TRAINER_MATRIX=1 (docs/verl-trainer-on-cpu.md says what they showed). The suite's default run is
tests/test_verl_trainer.py's."""

from __future__ import annotations

import os

import pytest

from test_verl_trainer import trainer_run

pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm"),
              pytest.mark.skipif(os.environ.get("VERL_PDBG_TRAINER_MATRIX") != "1",
                                 reason="a trainer run per case: VERL_PDBG_TRAINER_MATRIX=1")]

ACTOR = {"actor_compute_log_prob", "actor_update"}
CRITIC = ACTOR | {"compute_values", "critic_update"}
GROUPS = {
    "precision_debugger_l1": ACTOR, "precision_debugger_l0": ACTOR, "precision_debugger_tensor": ACTOR,
    "precision_debugger_l1_critic": CRITIC, "precision_debugger_l0_critic": CRITIC,
    "precision_debugger_tensor_critic": CRITIC,
    "precision_debugger_rollout": {"rollout_generate", "actor_compute_log_prob"},
}


def ran(tmp_path_factory, name: str, args: list[str]) -> dict:
    got = trainer_run(tmp_path_factory.mktemp(name), args)
    if isinstance(got, Exception):
        pytest.fail(str(got))
    return got


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_each_group_collects_on_every_profiled_step_what_the_plan_promised(tmp_path_factory, group):
    got = ran(tmp_path_factory, group, ["--group", group])
    assert got["returncode"] == 0, got["error"]
    promised = set(got["plan"]["stages"])
    assert promised == GROUPS[group]
    assert got["plan"]["steps"] == [1, 2]
    assert {s: set(v) for s, v in got["stages"].items()} == {"1": promised, "2": promised}
    assert all(v == {"missing": [], "unexpected": []} for v in got["plan_vs_run"].values())
    # verl's defaults build no reference model: the validator said so beforehand
    assert any("ref_compute_log_prob" in f for f in got["plan"]["findings"])
    assert all(d["records"] > 0 for d in got["dumps"])


FAULTS = {  # name: (flags, a group, what strict says)
    "no_msprobe": (["--no-msprobe"], "precision_debugger_l1", "msprobe is not available"),
    "unresolved": (["--unresolved-stage", "critic_update"], "precision_debugger_l1_critic", "model not resolved"),
    "broken_config": (["--broken-config"], "precision_debugger_l1", "config rejected"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_strict_stops_the_run_at_the_first_profiled_step(tmp_path_factory, fault):
    flags, group, said = FAULTS[fault]
    got = ran(tmp_path_factory, f"strict_{fault}", ["--group", group, "--strict", *flags])
    assert got["returncode"] != 0
    assert said in (got["error"] or ""), got["error"]
    # stopped at step 1 at the latest (a config or msprobe that cannot work: as the workers start)
    assert "2" not in got["stages"] and "2" not in got["step_times"]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_non_strict_warns_and_trains_on_keeping_the_other_stages(tmp_path_factory, fault):
    flags, group, _ = FAULTS[fault]
    got = ran(tmp_path_factory, f"nonstrict_{fault}", ["--group", group, "--non-strict", *flags])
    assert got["returncode"] == 0, got["error"]
    assert set(got["step_times"]) == {"1", "2"}  # both steps trained
    assert got["warnings"], "non-strict said nothing"
    written = {s: set(v) for s, v in got["stages"].items()}
    if fault == "unresolved":  # only that stage is lost
        assert written == {"1": CRITIC - {"critic_update"}, "2": CRITIC - {"critic_update"}}
    else:
        assert not any(written.values())
    # once per stage and process, not once per call
    assert all(n <= 4 for n in got["warnings"].values()), got["warnings"]
