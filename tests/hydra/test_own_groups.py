"""The tool never reports on its own settings: every config group this package ships, composed with
verl's defaults, draws no finding about a key the group itself set, nor about the msprobe config it
ships. Where a stage it lists will not run under the user's config, one warning per stage says so.
Real composition against verl 0.9.1's tree, nothing mocked."""

from __future__ import annotations

import os

import pytest

import verl_pdbg_conf
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.validate import validate_composed

from conftest import OPTIONS

pytestmark = pytest.mark.usefixtures("verl_config_dir")

CONF = os.path.join(os.path.dirname(os.path.abspath(verl_pdbg_conf.__file__)), "conf")
SHIPPED = sorted(n[:-len(".yaml")] for n in os.listdir(os.path.join(CONF, "profiler")) if n.endswith(".yaml"))
# Each stage a group lists that verl's defaults do not run, and why: PPO with GAE (a critic), no KL term.
NOT_RUN_ON_DEFAULTS = {"ref_compute_log_prob"}


def findings(*overrides):
    return validate_composed([], list(overrides)).sorted()


def test_every_shipped_group_is_covered():
    assert set(SHIPPED) == set(OPTIONS)


@pytest.mark.parametrize("group", SHIPPED)
def test_shipped_group_on_verl_defaults_says_only_which_listed_stage_does_not_run(group):
    found = findings(f"+profiler={group}")
    assert not [f for f in found if os.path.realpath(f.file).startswith(os.path.realpath(CONF))], found
    assert not [f for f in found if f.rule != "stage-not-run"], found
    assert all(f.severity is Severity.WARNING for f in found)
    assert {f.message.split("'")[1] for f in found} <= NOT_RUN_ON_DEFAULTS


@pytest.mark.parametrize("group", SHIPPED)
def test_shipped_group_with_every_listed_stage_running_draws_nothing(group):
    assert findings(f"+profiler={group}", "actor_rollout_ref.actor.use_kl_loss=True") == []


@pytest.mark.parametrize("group", [g for g in SHIPPED if g.endswith("_critic")])
def test_no_critic_one_warning_for_the_stage_not_a_second_for_the_groups_critic_profiler(group):
    found = findings(f"+profiler={group}", "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True")
    assert [(f.rule, f.severity, f.path) for f in found] == [
        ("stage-not-run", Severity.WARNING, "global_profiler.global_tool_config.precision_debugger.stages[2]")]
    assert "critic_update" in found[0].message


def test_separate_ref_group_without_kl_one_warning_for_the_ref_stage():
    found = findings("+profiler=precision_debugger_l1", "actor_rollout_ref.hybrid_engine=False")
    assert [(f.rule, f.severity) for f in found] == [("stage-not-run", Severity.WARNING)]
    assert "ref_compute_log_prob" in found[0].message


def test_the_same_key_set_by_the_user_still_draws_the_remark():
    found = findings("+profiler=precision_debugger_l1", "actor_rollout_ref.actor.use_kl_loss=True",
                     "actor_rollout_ref.ref.profiler.enable=True")
    assert [(f.rule, f.severity, f.file, f.line) for f in found] == [("role-unused", Severity.INFO, "<cli>", 3)]


def test_a_users_own_l0_config_still_gets_the_level_note(tmp_path):
    cfg = tmp_path / "my_l0.json"
    with open(os.path.join(CONF, "msprobe", "statistics_l0.json"), encoding="utf-8") as fh:
        cfg.write_text(fh.read())
    found = findings("+profiler=precision_debugger_l0", "actor_rollout_ref.actor.use_kl_loss=True",
                     f"global_profiler.global_tool_config.precision_debugger.config_path={cfg}")
    assert [(f.rule, f.file) for f in found] == [("msprobe-level", str(cfg))]
