"""compose_verl against verl 0.9.1's installed ppo_trainer: resolved values, positions and the
findings for overrides that do not compose. Real composition, nothing mocked."""

from __future__ import annotations

import os

import pytest

from verl_pdbg_conf.verl_facts.compose import ComposeResult, Override, compose_verl, verl_config_dir
from verl_pdbg_conf.core.findings import Severity

from conftest import OPTIONS, PD, ROLES, sel

pytestmark = pytest.mark.usefixtures("verl_config_dir")


@pytest.fixture(scope="module")
def l1() -> ComposeResult:
    return compose_verl([], ["+profiler=precision_debugger_l1"])


def test_config_dir_found_without_importing_verl():
    import subprocess
    import sys

    code = ("import sys; from verl_pdbg_conf.verl_facts.compose import verl_config_dir; d = verl_config_dir(); "
            "assert d and d.endswith('trainer/config'), d; "
            "assert 'verl' not in sys.modules and 'torch' not in sys.modules and 'hydra' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert os.path.isfile(os.path.join(verl_config_dir(), "ppo_trainer.yaml"))


def test_l1_global_profiler(l1):
    assert l1.findings == []
    gp = l1.document.data["global_profiler"]
    assert gp["tool"] == "precision_debugger"
    assert gp["steps"] == [1, 2]
    assert gp["save_path"] == "outputs/precision_debugger"
    pd = gp["global_tool_config"]["precision_debugger"]
    assert pd["_target_"] == "verl.utils.profiler.config.PrecisionDebuggerToolConfig"
    assert pd["stages"] == ["actor_compute_log_prob", "ref_compute_log_prob", "actor_update"]
    assert pd["strict"] is False
    assert pd["steps"] is None
    assert os.path.isabs(pd["config_path"]) and os.path.isfile(pd["config_path"])
    assert pd["config_path"].endswith(os.path.join("verl_pdbg_conf", "conf", "msprobe", "statistics_l1.json"))


def test_l1_role_profilers(l1):
    data = l1.document.data
    pd = sel(data, PD)
    enabled = {r: sel(data, r)["enable"] for r in ROLES}
    # the rollout section follows the actor's enable
    assert enabled == {ROLES[0]: True, ROLES[1]: True, ROLES[2]: True, ROLES[3]: False}
    for role in ROLES:
        prof = sel(data, role)
        assert prof["tool"] == "precision_debugger", role
        assert prof["save_path"] == "outputs/precision_debugger", role
        rpd = prof["tool_config"]["precision_debugger"]
        assert rpd["config_path"] == pd["config_path"], role
        assert rpd["stages"] == pd["stages"], role
        assert rpd["strict"] is False, role
        assert rpd["steps"] is None, role


def test_every_option_composes_with_its_own_config_json():
    jsons = {"l0": "statistics_l0.json", "l1": "statistics_l1.json", "tensor": "tensor_l1.json",
             "rollout": "tensor_rollout.json"}
    for opt in OPTIONS:
        r = compose_verl([], [f"+profiler={opt}"])
        assert r.findings == [], (opt, r.findings)
        data = r.document.data
        pd = sel(data, PD)
        level = opt.split("_")[2]
        assert os.path.basename(pd["config_path"]) == jsons[level]
        assert os.path.isfile(pd["config_path"])
        critic = opt.endswith("_critic")
        rollout = opt.endswith("_rollout")
        assert sel(data, "critic.profiler.enable") is critic
        hook = data["ray_kwargs"]["ray_init"]["runtime_env"].get("worker_process_setup_hook")
        assert hook == "verl_pdbg_conf.runtime.install"  # every option: its runtime in the workers
        env = data["ray_kwargs"]["ray_init"]["runtime_env"].get("env_vars") or {}
        assert ("VERL_PDBG_CONF_ROLLOUT" in env) is rollout
        if rollout:
            assert pd["stages"] == ["rollout_generate", "actor_compute_log_prob"]
        elif critic:
            assert "critic_update" in pd["stages"] and "compute_values" not in pd["stages"]
        else:
            assert not {"critic_update", "compute_values"} & set(pd["stages"])


def test_every_option_validates_clean():
    validate = pytest.importorskip("verl_pdbg_conf.validate")
    for opt in OPTIONS:
        # a reference policy runs only with KL (loss or in-reward); the critic runs with gae (the default)
        report = validate.validate_composed([], [f"+profiler={opt}", "actor_rollout_ref.actor.use_kl_loss=True"])
        bad = [f for f in report.sorted() if f.severity is not Severity.INFO]
        assert bad == [], (opt, bad)


def test_cli_overrides_win_over_the_group():
    r = compose_verl([], ["+profiler=precision_debugger_l1", "global_profiler.steps=[3,4]",
                          "global_profiler.save_path=/tmp/pd",
                          f"{PD}.strict=True", f"{PD}.config_path=/data/my.json",
                          "actor_rollout_ref.ref.profiler.enable=False"])
    assert r.findings == []
    data = r.document.data
    assert data["global_profiler"]["steps"] == [3, 4]
    assert sel(data, PD)["strict"] is True
    assert sel(data, PD)["config_path"] == "/data/my.json"
    assert sel(data, "actor_rollout_ref.ref.profiler.enable") is False
    for role in ROLES:
        assert sel(data, role)["save_path"] == "/tmp/pd"
        assert sel(data, role)["tool_config"]["precision_debugger"]["config_path"] == "/data/my.json"
        assert sel(data, role)["tool_config"]["precision_debugger"]["strict"] is True


def test_positions_point_at_the_override_that_set_the_value():
    r = compose_verl([], ["+profiler=precision_debugger_l1", "global_profiler.steps=[3]"])
    doc = r.document
    assert doc.origin(("global_profiler", "steps")) == ("<cli>", 2, 1)
    assert doc.origin(("global_profiler", "steps", 0)) == ("<cli>", 2, 1)
    assert doc.origin(("global_profiler", "tool")) == ("<cli>", 1, 1)
    assert doc.origin(tuple(PD.split(".")) + ("config_path",)) == ("<cli>", 1, 1)
    # a role value interpolated from global_profiler points where the global value was set
    assert doc.origin(("actor_rollout_ref", "actor", "profiler", "save_path")) == ("<cli>", 1, 1)
    assert doc.origin(("actor_rollout_ref", "actor", "profiler", "enable")) == ("<cli>", 1, 1)
    assert doc.origin(("critic", "profiler", "enable")) == ("<verl:ppo_trainer>", 1, 1)
    assert doc.origin(("trainer", "total_epochs")) == ("<verl:ppo_trainer>", 1, 1)


def test_override_objects_keep_their_own_position():
    r = compose_verl([], [Override("global_profiler.tool=precision_debugger", "run.sh", 7, 5)])
    assert r.document.origin(("global_profiler", "tool")) == ("run.sh", 7, 5)


def test_file_values_point_at_the_file_line(tmp_path):
    f = tmp_path / "conf.yaml"
    f.write_text("global_profiler:\n"
                 "  tool: precision_debugger\n"
                 "  steps: [2]\n"
                 "  global_tool_config:\n"
                 "    precision_debugger:\n"
                 "      config_path: /x/config.json\n"
                 "critic:\n"
                 "  profiler:\n"
                 "    enable: true\n")
    r = compose_verl([str(f)], ["global_profiler.steps=[5]"])
    assert r.findings == []
    doc = r.document
    assert doc.data["global_profiler"]["tool"] == "precision_debugger"
    assert doc.data["global_profiler"]["steps"] == [5]  # the override wins over the file
    assert doc.origin(("global_profiler", "tool")) == (str(f), 2, 9)
    assert doc.origin(("global_profiler", "steps")) == ("<cli>", 1, 1)
    assert doc.origin(tuple(PD.split(".")) + ("config_path",)) == (str(f), 6, 20)
    assert doc.origin(("critic", "profiler", "enable")) == (str(f), 9, 13)
    # the role's interpolated config_path points at the file line that set the global one
    assert doc.data["critic"]["profiler"]["tool_config"]["precision_debugger"]["config_path"] == "/x/config.json"
    assert doc.origin(("critic", "profiler", "tool_config", "precision_debugger", "config_path")) == (str(f), 6, 20)


def test_a_group_option_wins_over_the_files_as_in_hydra(tmp_path):
    f = tmp_path / "conf.yaml"
    f.write_text("defaults:\n  - ppo_trainer\n  - _self_\nglobal_profiler:\n  steps: [7]\n  save_path: /keep\n")
    r = compose_verl([str(f)], ["+profiler=precision_debugger_l1"])
    assert r.findings == []
    gp = r.document.data["global_profiler"]
    assert gp["steps"] == [1, 2]  # appended after the file's _self_, like `+profiler=` on verl's command line
    assert gp["tool"] == "precision_debugger"


def _only(r: ComposeResult, rule="override"):
    found = [f for f in r.findings if f.rule == rule]
    assert len(found) == 1, r.findings
    return found[0]


def test_append_to_an_existing_key_reports_the_form_that_works():
    ov = f"+{PD}.strict=True"
    r = compose_verl([], ["+profiler=precision_debugger_l1", ov])
    f = _only(r)
    assert f.severity is Severity.ERROR
    assert (f.file, f.line, f.column) == ("<cli>", 2, 1)
    assert "An item is already at" in f.message
    assert f"`{PD}.strict=True`" in f.hint and f"`++{PD}.strict=True`" in f.hint
    # the rest still composes
    assert r.document.data["global_profiler"]["tool"] == "precision_debugger"
    assert [o.text for o in r.applied] == ["+profiler=precision_debugger_l1"]


def test_misspelled_key_gets_did_you_mean():
    r = compose_verl([], [f"{PD}.stagse=[actor_update]"])
    f = _only(r)
    assert (f.file, f.line) == ("<cli>", 1)
    assert "stagse" in f.message
    assert f"did you mean `{PD}.stages=[actor_update]`" in f.hint


def test_misspelled_top_level_key_gets_did_you_mean():
    f = _only(compose_verl([], ["global_profilr.tool=precision_debugger"]))
    assert "did you mean `global_profiler.tool=precision_debugger`" in f.hint


def test_key_verl_does_not_have():
    f = _only(compose_verl([], ["reward_model.profiler.enable=True"]))
    assert "'profiler' is not a key of reward_model" in f.hint


def test_group_without_plus():
    f = _only(compose_verl([], ["profiler=precision_debugger_l1"]))
    assert "No match in the defaults list" in f.message
    assert "`+profiler=precision_debugger_l1`" in f.hint


def test_misspelled_option():
    f = _only(compose_verl([], ["+profiler=precision_debuger_l1"]))
    assert "did you mean `+profiler=precision_debugger_l1`" in f.hint


def test_group_selected_twice():
    r = compose_verl([], ["+profiler=precision_debugger_l1", "+profiler=precision_debugger_l0"])
    f = _only(r)
    assert f.line == 2 and "already selected by override 1" in f.hint


def test_override_syntax_error():
    f = _only(compose_verl([], ["global_profiler.steps=[1"]))
    assert f.line == 1 and "key='[1,2]'" in f.hint


def test_several_mistakes_in_one_pass():
    r = compose_verl([], ["+profiler=precision_debugger_l1", f"+{PD}.strict=True", "global_profiler.stpes=[1]",
                          "global_profiler.steps=[4]"])
    lines = sorted(f.line for f in r.findings if f.rule == "override")
    assert lines == [2, 3]
    assert r.document.data["global_profiler"]["steps"] == [4]


def test_unresolvable_interpolation_is_a_warning_and_keeps_the_raw_string(monkeypatch):
    monkeypatch.delenv("PDBG_TEST_UNSET", raising=False)
    raw = "${oc.env:PDBG_TEST_UNSET}/config.json"
    r = compose_verl([], ["+profiler=precision_debugger_l1", f"{PD}.config_path='{raw}'"])
    found = [f for f in r.findings if f.rule == "interpolation"]
    assert len(found) == 1, r.findings  # the roles' ${oc.select:...} of it are not reported again
    assert found[0].severity is Severity.WARNING
    assert (found[0].file, found[0].line) == ("<cli>", 2)
    assert sel(r.document.data, PD)["config_path"] == raw
    # everything else is resolved
    assert sel(r.document.data, "actor_rollout_ref.actor.profiler")["save_path"] == "outputs/precision_debugger"


def test_interpolation_resolves_when_the_variable_is_set(monkeypatch):
    monkeypatch.setenv("PDBG_TEST_SET", "/data")
    r = compose_verl([], [f"{PD}.config_path='${{oc.env:PDBG_TEST_SET}}/c.json'"])
    assert r.findings == []
    assert sel(r.document.data, PD)["config_path"] == "/data/c.json"
    assert sel(r.document.data, "critic.profiler.tool_config.precision_debugger.config_path") == "/data/c.json"


def test_composing_inside_a_running_hydra_app_leaves_it_alone(verl_config_dir):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(verl_config_dir, version_base=None):
        gh = GlobalHydra.instance().hydra
        r = compose_verl([], ["+profiler=precision_debugger_l1"])
        assert r.findings == []
        assert GlobalHydra.instance().hydra is gh
        assert compose("ppo_trainer").global_profiler.tool is None
