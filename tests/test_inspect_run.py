"""`--inspect SAVE_PATH conf.yaml` on real msprobe dumps written on CPU by this package's
runtime profiler (and by msprobe driven without reset_status, for the reset problem), and the
`msprobe compare` command for a pair of dumps."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.cli import main
from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.run.inspect_run import compare_commands, inspect_run
from verl_pdbg_conf.core.loaders import load_yaml
from verl_pdbg_conf.run.plan import build_plan

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
REPO = HERE.parent
CONFIG = HERE / "examples" / "scripts" / "configs" / "statistics_l1.json"
STAGES = ["actor_compute_log_prob", "ref_compute_log_prob", "actor_update"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, str(HERE / "make_run_dumps.py"), str(out), str(CONFIG)], cwd=out,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def conf(tmp_path: Path, save: Path, steps="[1, 2]", cfg: dict | None = None) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(cfg) if cfg else CONFIG.read_text())
    p = tmp_path / "conf.yaml"
    p.write_text("global_profiler:\n  tool: precision_debugger\n"
                 f"  steps: {steps}\n  save_path: {save}\n"
                 "  global_tool_config:\n    precision_debugger:\n"
                 f"      config_path: {config}\n      stages: [{', '.join(STAGES)}]\n"
                 "actor_rollout_ref:\n  actor:\n    use_kl_loss: True\n    profiler:\n      enable: True\n")
    return p


def inspect(save: Path, conf_path: Path | None):
    plan = None
    if conf_path is not None:
        plan = build_plan(load_yaml(str(conf_path)), Options(base_dir=str(conf_path.parent)))
    return inspect_run(str(save), plan)


def rules(ins, severity=None):
    return sorted(f.rule for f in ins.findings if severity is None or f.severity is severity)


def test_clean_run_matches_its_configuration(runs, tmp_path):
    ins = inspect(runs / "clean", conf(tmp_path, runs / "clean"))
    assert ins.findings == []
    assert [r["directory"] for r in ins.rows] == [f"step_{n}/{s}" for n in (1, 2) for s in STAGES]
    for row in ins.rows:
        assert row["status"] == "ok"
        (rank,) = row["ranks"].values()
        assert rank["records"] > 0 and rank["bytes"] > 0


def test_missing_steps_and_ranks(runs, tmp_path):
    ins = inspect(runs / "clean", conf(tmp_path, runs / "clean", steps="[1, 2, 3]",
                                       cfg={"task": "statistics", "level": "L1", "rank": [0, 1]}))
    missing = [f for f in ins.findings if f.rule == "dump-missing"]
    assert {os.path.relpath(f.file, runs / "clean") for f in missing if "was not written" in f.message} == \
        {f"step_3/{s}" for s in STAGES}
    assert sum("has no rank1" in f.message for f in missing) == 6
    assert all(f.severity is Severity.ERROR for f in missing)


def test_empty_and_absent_dump_json(runs, tmp_path):
    save = tmp_path / "copy"
    shutil.copytree(runs / "clean", save)
    (save / "step_2" / "actor_update" / "step0" / "rank0" / "dump.json").write_text("")
    shutil.rmtree(save / "step_1" / "ref_compute_log_prob" / "step0")
    os.remove(save / "step_1" / "actor_update" / "step0" / "rank0" / "dump.json")
    ins = inspect(save, conf(tmp_path, save))
    by = {(f.rule, os.path.relpath(f.file, save)) for f in ins.findings}
    assert ("dump-empty", "step_2/actor_update/step0/rank0/dump.json") in by
    assert ("dump-missing", "step_1/ref_compute_log_prob") in by
    assert ("dump-missing", "step_1/actor_update/step0/rank0") in by
    status = {r["directory"]: r["status"] for r in ins.rows}
    assert status["step_1/ref_compute_log_prob"] == "no dump.json"
    assert status["step_2/actor_update"] == "incomplete"


def test_reset_problem_is_found_and_clean_dumps_are_not_flagged(runs, tmp_path):
    ins = inspect(runs / "noreset", conf(tmp_path, runs / "noreset"))
    grown = [os.path.relpath(f.file, runs / "noreset") for f in ins.findings if f.rule == "dump-growth"]
    # every dump after the first holds the records of the one written before it
    assert sorted(grown) == sorted(f"step_{n}/{s}/step0/rank0/dump.json" for n in (1, 2) for s in STAGES
                                   if (n, s) != (1, STAGES[0]))
    sizes = {r["directory"]: r["ranks"]["rank0"]["records"] for r in ins.rows}
    assert sizes["step_2/actor_compute_log_prob"] > sizes["step_1/actor_compute_log_prob"]
    assert "dump-growth" not in rules(inspect(runs / "clean", None))
    assert "dump-growth" not in rules(inspect(runs / "rerun", None))


def test_directories_left_by_other_runs(runs, tmp_path):
    ins = inspect(runs / "rerun", conf(tmp_path, runs / "rerun"))
    stray = sorted(os.path.relpath(f.file, runs / "rerun") for f in ins.findings if f.rule == "dump-stray")
    assert stray == sorted([f"step_{n}/{s}.1" for n in (1, 2) for s in STAGES] + [f"step_3/{s}" for s in STAGES])
    assert rules(ins, Severity.ERROR) == []
    assert any("not a profiled step" in f.message for f in ins.findings)


def test_no_dump_directory(tmp_path):
    ins = inspect(tmp_path / "nowhere", conf(tmp_path, tmp_path / "nowhere"))
    (f,) = ins.findings
    assert f.rule == "dump-missing" and "global_profiler.steps" in f.hint and "msprobe" in f.hint


def test_one_fault_one_rule_name_as_in_compare(runs, tmp_path):
    """The faults test_compare_runs.py plants, with the rule compare gives each (tests/test_compare_runs.py
    test_faults_are_per_pair): --inspect names each the same way."""
    save = tmp_path / "copy"
    shutil.copytree(runs / "clean", save)
    faults = {"step_1/actor_compute_log_prob/step0/rank0/dump.json": ("", "dump-empty"),
              "step_1/actor_update/step0/rank0/dump.json": (None, "dump-corrupt"),  # truncated half-way
              "step_2/ref_compute_log_prob/step0/rank0/dump.json": ('{"task": "statistics", "data": {}}',
                                                                    "dump-empty"),
              "step_2/actor_update/step0/rank0/dump.json": ("[1, 2", "dump-corrupt")}
    for rel, (text, _) in faults.items():
        f = save / rel
        f.write_text(f.read_text()[: f.stat().st_size // 2] if text is None else text)
    ins = inspect(save, conf(tmp_path, save))
    got = {os.path.relpath(f.file, save): f for f in ins.findings}
    assert {rel: got[rel].rule for rel in faults} == {rel: rule for rel, (_, rule) in faults.items()}
    assert "is not valid JSON" in got["step_1/actor_update/step0/rank0/dump.json"].message
    assert "truncated or overwritten" in got["step_1/actor_update/step0/rank0/dump.json"].message


def test_a_file_is_said_to_be_a_file_not_missing(runs, tmp_path):
    dump = runs / "clean" / "step_1" / "actor_update" / "step0" / "rank0" / "dump.json"
    (f,) = inspect(dump, None).findings
    assert (f.rule, f.severity) == ("dump-layout", Severity.ERROR)
    assert "is an msprobe dump.json, not a save_path" in f.message and "does not exist" not in f.message
    assert "verl-pdbg-compare" in f.hint
    other = tmp_path / "notes.txt"
    other.write_text("x")
    (f,) = inspect(other, None).findings
    assert "is a file, not a save_path" in f.message and "global_profiler.save_path" in f.hint


def test_layout_only_without_a_configuration(runs):
    ins = inspect(runs / "rerun", None)
    assert ins.findings == [] and len(ins.rows) == 15


# ------------------------------------------------------------------ compare

def test_compare_two_steps_of_one_stage(runs):
    (cmd,), findings = compare_commands("step_2/actor_update", "step_1/actor_update", str(runs / "clean"))
    assert findings == []
    argv = shlex.split(cmd)
    assert argv[:3] == ["msprobe", "compare", "-tp"]
    assert argv[3] == str(runs / "clean" / "step_2" / "actor_update" / "step0" / "rank0" / "dump.json")
    assert argv[4:6] == ["-gp", str(runs / "clean" / "step_1" / "actor_update" / "step0" / "rank0" / "dump.json")]
    assert argv[6] == "-o" and argv[7].startswith(str(runs / "clean" / "compare"))


def test_compare_the_same_stage_in_two_runs(runs):
    cmds, findings = compare_commands(str(runs / "rerun" / "step_1" / "actor_update.1"),
                                      str(runs / "clean" / "step_1" / "actor_update"), None, out_dir="cmp")
    assert findings == [] and len(cmds) == 1 and cmds[0].endswith("-o cmp")
    _, f = compare_commands("step_9/actor_update", "step_1/actor_update", str(runs / "clean"))
    assert f and f[0].rule == "dump-missing"


def test_the_compare_command_runs(runs, tmp_path):
    out = tmp_path / "cmp"
    (cmd,), _ = compare_commands("step_2/actor_update", "step_1/actor_update", str(runs / "clean"), str(out))
    msprobe = shutil.which("msprobe")
    if msprobe is None:
        pytest.skip("msprobe's command is not on PATH")
    proc = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert list(out.glob("compare_result_*.csv"))


# ------------------------------------------------------------------ the command

def test_cli_inspect(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    c = conf(tmp_path, runs / "clean")
    monkeypatch.chdir(tmp_path)
    assert main(["--inspect", str(runs / "clean"), str(c), "--compare", "step_2/actor_update",
                 "step_1/actor_update"]) == 0
    out = capsys.readouterr().out
    assert "step_1/actor_update" in out and "msprobe compare -tp " in out and "0 error(s)" in out
    assert main(["--inspect", str(runs / "noreset"), str(conf(tmp_path, runs / "noreset")), "-f", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {d["rule"] for d in doc["diagnostics"]} == {"dump-growth"}
    assert len(doc["directories"]) == 6
    assert main(["--inspect", str(runs / "noreset"), "-f", "sarif"]) == 1
    sarif = json.loads(capsys.readouterr().out)
    assert sarif["runs"][0]["results"][0]["ruleId"] == "dump-growth"
