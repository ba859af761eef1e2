"""The command: exit codes, formats, all files at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.cli import main

EX = Path(__file__).parent / "examples" / "verl"
GOOD = EX / "positive" / "guide_minimal.yaml"
BAD = EX / "negative" / "stage-unknown__typo.yaml"
WARN = EX / "negative" / "steps-duplicate__twice.yaml"


@pytest.fixture(autouse=True)
def _in_examples(monkeypatch):
    monkeypatch.chdir(EX)  # relative config_path resolves against the launch directory
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().out


def test_exit_codes(capsys):
    assert run(capsys, GOOD)[0] == 0
    assert run(capsys, BAD)[0] == 1
    assert run(capsys, WARN)[0] == 0
    assert run(capsys, "-W", WARN)[0] == 1
    assert run(capsys, "nope.yaml")[0] == 2
    assert run(capsys, "--format", "xml", GOOD)[0] == 2
    assert run(capsys)[0] == 2


def test_json_format_shape_and_sorting(capsys):
    code, out = run(capsys, "--format", "json", BAD, GOOD, WARN)
    doc = json.loads(out)
    assert code == 1
    assert doc["summary"] == {"errors": 1, "warnings": 1, "files": 4}
    d = doc["diagnostics"]
    assert set(d[0]) == {"rule", "severity", "message", "file", "line", "column", "path", "hint"}
    assert [x["file"] for x in d] == sorted(x["file"] for x in d)
    typo = next(x for x in d if x["rule"] == "stage-unknown")
    assert typo["path"] == "global_profiler.global_tool_config.precision_debugger.stages[1]"
    assert (typo["line"], typo["column"]) == (10, 11)
    assert "did you mean 'actor_compute_log_prob'" in typo["hint"]


def test_text_format_is_file_line_col(capsys):
    _, out = run(capsys, BAD)
    first = out.splitlines()[0]
    assert first.startswith(f"{BAD}:10:11: error stage-unknown ")
    assert "hint:" in out


def test_github_format_auto_under_actions(capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    _, out = run(capsys, BAD)
    assert out.startswith(f"::error file={BAD},line=10,col=11,title=stage-unknown::")


def test_sarif_has_results_and_rules(capsys):
    _, out = run(capsys, "--format", "sarif", BAD)
    sarif = json.loads(out)
    assert sarif["version"] == "2.1.0"
    res = sarif["runs"][0]["results"]
    assert res[0]["ruleId"] == "stage-unknown"
    assert res[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 10, "startColumn": 11}
    assert sarif["runs"][0]["tool"]["driver"]["rules"][res[0]["ruleIndex"]]["id"] == "stage-unknown"


def test_msprobe_json_given_directly(capsys):
    code, out = run(capsys, "--format", "json", EX / "configs" / "with_dump_path.json")
    assert code == 1
    assert any(d["rule"] == "msprobe-dump-path" for d in json.loads(out)["diagnostics"])


def test_console_entry_runs_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"global_profiler: [\x00\xff")
    p = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1 and "Traceback" not in p.stderr + p.stdout


@pytest.mark.parametrize("make,said", [
    (lambda d: d, "is a directory: give the files in it"),
    (lambda d: _write(d / "train.py", "print(1)\n"), "is none of the files the validator reads"),
    (lambda d: _write(d / "package.json", '{"name": "x", "version": "1"}'), "is not an msprobe config.json"),
])
def test_an_input_of_the_wrong_kind_is_a_usage_error(tmp_path, capsys, make, said):
    """One line and exit 2, as the help promises; not a finding against a file read as a config."""
    path = make(tmp_path)
    code = main([str(path)])
    err = capsys.readouterr().err
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert "2 the tool could not run" in _help(capsys) and "of a kind it does not read" in _help(capsys)


def test_inputs_of_the_kinds_read_are_not_refused(tmp_path, capsys):
    """An msprobe config.json with one known key, and JSON that does not parse (its finding is at line:col)."""
    ok = _write(tmp_path / "config.json", '{"task": "statistics", "level": "L1"}')
    broken = _write(tmp_path / "msprobe.json", '{"task": ')
    assert main([str(ok)]) in (0, 1) and main([str(broken)]) == 1
    assert "verl-pdbg-validate: error" not in capsys.readouterr().err


def test_a_fifo_named_json_is_not_read_to_tell_its_kind(tmp_path, capsys):
    """Telling a config.json from a package.json reads regular files only: a FIFO would block."""
    import os

    os.mkfifo(tmp_path / "fifo.json")
    assert main([str(tmp_path / "fifo.json")]) == 1
    assert "file-not-regular" in capsys.readouterr().out


def _write(path, text):
    path.write_text(text)
    return path


def _help(capsys) -> str:
    assert main(["--help"]) == 0
    return " ".join(capsys.readouterr().out.split())
