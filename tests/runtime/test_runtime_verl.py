"""verl 0.9.1's real DistProfiler / DistProfilerExtension dispatching to this profiler after
install(), on worker classes with verl's attribute layout; step tags from start_profile, the
critic's train_batch collected as critic_update, continuous windows driven by verl's own
trainer code."""

from __future__ import annotations

import pytest

from runtime_helpers import Scenario, config

pytestmark = pytest.mark.slow

ACTOR_STAGES = ["actor_compute_log_prob", "actor_update", "ref_compute_log_prob"]


@pytest.fixture(scope="module")
def run(module_tmp):
    return Scenario(module_tmp, "verl", config("l1_statistics"), module_tmp + "/out").result()


def _stage_dirs(run, step):
    return sorted({k.split("/")[1] for k in run["tree"]["records"] if k.split("/")[0] == f"step_{step}"})


def _records(run, step, stage):
    return run["tree"]["records"][f"step_{step}/{stage}/step0/rank0/dump.json"]


def test_distprofiler_builds_ours(run):
    assert run["ours"] is True
    assert run["impl"] == ["verl_pdbg_conf.runtime.profiler.PrecisionDebuggerProfiler"] * 2


def test_step_tags_from_start_profile(run):
    steps = sorted({k.split("/")[0] for k in run["tree"]["records"]})
    assert steps == ["step_1", "step_3", "step_40", "step_5", "step_6", "step_8"]  # no step_2: not profiled
    for step in (1, 3, 5, 6):
        assert _stage_dirs(run, step) == ACTOR_STAGES[:2] + ["critic_update", "ref_compute_log_prob"]


def test_stage_results_unchanged(run):
    plain = run["plain"]
    for result in run["results"]:
        assert result in ([plain] * 3 + ["generated"], [plain] * 3)
    assert run["warnings_main"] == []  # rollout_generate is skipped quietly


def test_critic_train_batch_is_one_critic_update_dump(run):
    # three mini-batches, one session: three times the records of one identical stage
    for step in (1, 3):
        assert _records(run, step, "critic_update") == 3 * _records(run, step, "actor_update")


def test_actor_train_batch_is_not_a_critic_update(run):
    assert run["inner"] == [run["plain"]] * 3
    assert len(run["warnings_inner"]) == 1 and "language_model" in run["warnings_inner"][0]


def test_batch_global_steps_wins(run):
    assert _stage_dirs(run, 40) == ["actor_update"]


def test_continuous_window_with_patched_trainer(run):
    # verl's own _start/_stop_profiling; the patch adds one start_profile per later step
    assert run["calls_patched"] == [["start", "ActorRolloutRefWorker", 5], ["start", "TrainingWorker", 5],
                                    ["start", "ActorRolloutRefWorker", 6], ["start", "TrainingWorker", 6],
                                    ["stop", "ActorRolloutRefWorker"], ["stop", "TrainingWorker"]]
    assert _records(run, 6, "critic_update") == _records(run, 5, "critic_update")
    assert run["unpatched_restored"] is True


def test_continuous_window_unpatched_loses_nothing(run):
    # verl alone tags step 9 as step 8; the second session writes beside the first
    assert run["calls_unpatched"] == [["start", "ActorRolloutRefWorker", 8], ["start", "TrainingWorker", 8],
                                      ["stop", "ActorRolloutRefWorker"], ["stop", "TrainingWorker"]]
    stages = ACTOR_STAGES[:2] + ["critic_update", "ref_compute_log_prob"]
    assert _stage_dirs(run, 8) == sorted(stages + [s + ".1" for s in stages])
    assert len(run["warnings_continuous"]) == 4
    assert all("writes to" in w and ".1" in w for w in run["warnings_continuous"])


def test_uninstall_restores_verl_backend(run):
    assert run["after_uninstall"] == "verl.utils.profiler.precision_debugger_profile"
    assert run["after_reinstall"] == "verl_pdbg_conf.runtime.profiler"
