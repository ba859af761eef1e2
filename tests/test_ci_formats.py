"""CI output: `--format sarif` validates against the SARIF 2.1.0 schema (vendored, see
tests/schemas/SOURCE.md: never downloaded at test time), and under GitHub Actions
(GITHUB_ACTIONS=true) the default format is workflow-command annotations."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from verl_pdbg_conf.cli import main

REPO = Path(__file__).resolve().parent.parent
EX = REPO / "tests" / "examples"
SARIF_SCHEMA = REPO / "tests" / "schemas" / "sarif-schema-2.1.0.json"
SARIF_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"
NEGATIVE = sorted((EX / "verl" / "negative").glob("*.yaml"))
ANNOTATION = re.compile(r"^::(error|warning|notice) file=([^,]+),line=(\d+),col=(\d+),title=([^:]+)::(.*)$")


@pytest.fixture(scope="module")
def sarif_validator():
    raw = SARIF_SCHEMA.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SARIF_SHA256, "the vendored SARIF schema changed"
    schema = json.loads(raw)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture
def in_examples(monkeypatch):
    monkeypatch.chdir(EX / "verl")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().out


def test_sarif_of_every_negative_example_is_valid(sarif_validator, capsys, in_examples):
    code, out = run(capsys, "--format", "sarif", *[p.relative_to(EX / "verl") for p in NEGATIVE])
    assert code == 1
    doc = json.loads(out)
    errors = sorted(sarif_validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    (sarif_run,) = doc["runs"]
    _, js = run(capsys, "--format", "json", *[p.relative_to(EX / "verl") for p in NEGATIVE])
    diags = json.loads(js)["diagnostics"]
    results = sarif_run["results"]
    assert len(results) == len(diags) > len(NEGATIVE)
    rules = [r["id"] for r in sarif_run["tool"]["driver"]["rules"]]
    for res, d in zip(results, diags):
        assert res["ruleId"] == d["rule"] and rules[res["ruleIndex"]] == d["rule"]
        region = res["locations"][0]["physicalLocation"]["region"]
        assert (region["startLine"], region["startColumn"]) == (d["line"], d["column"])
        assert res["level"] == {"error": "error", "warning": "warning", "info": "note"}[d["severity"]]


def test_sarif_without_findings_is_valid(sarif_validator, capsys, in_examples):
    code, out = run(capsys, "--format", "sarif", "positive/guide_minimal.yaml")
    doc = json.loads(out)
    assert not list(sarif_validator.iter_errors(doc))
    assert code == 0 and all(r["level"] != "error" for r in doc["runs"][0]["results"])


def test_sarif_of_launch_scripts_and_inspect_findings(sarif_validator, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(EX / "scripts")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    code, out = run(capsys, "--format", "sarif", "negative/stage_typo.sh", "negative/brace_expansion.sh")
    assert code == 1
    doc = json.loads(out)
    assert not list(sarif_validator.iter_errors(doc))
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]}
    assert "negative/stage_typo.sh" in uris
    code, out = run(capsys, "--format", "sarif", "--inspect", str(tmp_path / "no run here"))
    assert code == 1 and not list(sarif_validator.iter_errors(json.loads(out)))


def test_github_annotations_are_the_default_under_actions(capsys, monkeypatch, in_examples):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    files = [p.relative_to(EX / "verl") for p in NEGATIVE]
    code, out = run(capsys, *files)
    assert code == 1
    lines = out.splitlines()
    monkeypatch.delenv("GITHUB_ACTIONS")
    _, js = run(capsys, "--format", "json", *files)
    diags = json.loads(js)["diagnostics"]
    assert len(lines) == len(diags)
    for line, d in zip(lines, diags):
        m = ANNOTATION.match(line)
        assert m, line
        level, file, ln, col, title, msg = m.groups()
        assert level == {"error": "error", "warning": "warning", "info": "notice"}[d["severity"]]
        assert (file, int(ln), int(col), title) == (d["file"], d["line"], d["column"], d["rule"])
        assert "\n" not in msg and ("%0Ahint: " in msg) == bool(d["hint"])
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out = run(capsys, "--format", "text", files[0])
    assert not out.startswith("::")  # an explicit --format wins


def test_github_annotations_from_the_installed_command(tmp_path):
    """As a workflow step runs it: a fresh process that sees GITHUB_ACTIONS=true."""
    env = dict(os.environ, GITHUB_ACTIONS="true",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", "negative/stage-unknown__typo.yaml"],
                          cwd=EX / "verl", env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    first = proc.stdout.splitlines()[0]
    assert first.startswith("::error file=negative/stage-unknown__typo.yaml,line=10,col=11,title=stage-unknown::")
