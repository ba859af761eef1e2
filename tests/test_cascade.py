"""One root cause, one finding: a profiler group misspelled or given without `+` is one error with its
did-you-mean, the findings that follow from it folded into its message (core/cascade.py)."""

from __future__ import annotations

import json

import pytest

from verl_pdbg_conf.cli import main
from verl_pdbg_conf.core.cascade import fold
from verl_pdbg_conf.core.findings import Finding, Severity

SCRIPT = """#!/bin/bash
python3 -m verl.trainer.main_ppo \\
    data.train_files=x.parquet \\
    {group} \\
    global_profiler.tool=precision_debugger \\
    global_profiler.steps='[1]'
"""


def _errors(capsys, argv) -> list[dict]:
    code = main([*argv[:1], "--format", "json", *argv[1:]]) if argv[0] != "--verl" else \
        main(["--format", "json", *argv])
    doc = json.loads(capsys.readouterr().out)
    errors = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    assert code == 1
    return errors


@pytest.mark.parametrize("group,hint", [
    ("+profiler=precision_debuger_l1", "did you mean `+profiler=precision_debugger_l1`?"),
    ("profiler=precision_debugger_l1", "append the option with `+profiler=precision_debugger_l1`"),
])
def test_a_misspelled_or_misplaced_group_in_a_launch_script_is_one_error(tmp_path, capsys, group, hint):
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.format(group=group))
    (err,) = _errors(capsys, [str(script)])
    assert err["rule"] == "override" and err["line"] == 4 and hint in err["hint"]
    for follower in ("config-path-missing", "role-disabled"):  # what the group would have set
        assert follower + ":" in err["message"]


def test_the_same_in_overrides(capsys):
    (err,) = _errors(capsys, ["--verl", "--", "+profiler=precision_debuger_l1", "global_profiler.tool=precision_debugger"])
    assert err["rule"] == "override" and "3 finding(s) that follow from it" in err["message"]
    assert all(r + ":" in err["message"] for r in ("steps-none", "config-path-missing", "role-disabled"))


def _f(rule, path, message="m"):
    return Finding(rule, Severity.ERROR, message, "run.sh", 3, 5, path)


def test_only_what_a_root_covers_is_folded():
    """A group that sets no profiler folds nothing; a dotted key folds only what is said of that key."""
    model = [_f("override", "model"), _f("config-path-missing", "global_profiler.x.config_path")]
    assert fold(model) == model
    key = _f("override", "+global_profiler.global_tool_config.precision_debugger.config_path")
    missing = _f("config-path-missing", "global_profiler.global_tool_config.precision_debugger.config_path")
    beside = _f("role-disabled", "global_profiler.global_tool_config.precision_debugger.stages[1]")
    out = fold([key, missing, beside])
    assert len(out) == 2 and out[1] == beside and "config-path-missing: m" in out[0].message
    assert fold([missing, beside]) == [missing, beside]  # no root, nothing folded
    stage = _f("stage-not-run", "global_profiler.global_tool_config.precision_debugger.stages[1]")
    group = _f("override", "+profiler")
    assert fold([group, stage]) == [group, stage]  # said of the user's own stages: not the group's doing


def test_a_misspelled_section_takes_what_it_left_unset_and_its_severity(capsys):
    """`precision_debuger` (a dropped key, a warning) leaves `precision_debugger.config_path` unset (an
    error): one finding, an error still, so the exit status stays 1."""
    argv = ["--verl", "--", "global_profiler.tool=precision_debugger", "global_profiler.steps=[1]",
            "+global_profiler.global_tool_config.precision_debuger.config_path=x.json",
            "actor_rollout_ref.actor.profiler.enable=True"]
    (err,) = _errors(capsys, argv)
    assert err["rule"] == "key-dropped" and "config-path-missing:" in err["message"]
    assert "did you mean 'precision_debugger'" in err["hint"]
