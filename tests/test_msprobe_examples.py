"""Every msprobe config.json under tests/examples/msprobe: a positive one gets no error,
a negative one `<rule>__<name>.json` gets a finding of that rule, and every finding its
sidecar `<rule>__<name>.expect.json` lists (rule, dotted path, line, optional severity)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_pdbg_conf.checks.msprobe import check_msprobe
from verl_pdbg_conf.context import MsprobeContext
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.core.loaders import load_json
from verl_pdbg_conf.core.rules import RULES

ROOT = Path(__file__).parent / "examples" / "msprobe"
POSITIVE = sorted((ROOT / "positive").glob("*.json"))
NEGATIVE = sorted(p for p in (ROOT / "negative").glob("*.json") if not p.name.endswith(".expect.json"))


def run(path: Path):
    return check_msprobe(load_json(str(path)), MsprobeContext())


def show(findings) -> str:
    return "\n".join(f"  {f.severity.value} {f.rule} [{f.path}] {f.line}:{f.column} {f.message}" for f in findings)


def test_there_are_examples():
    assert len(POSITIVE) >= 10 and len(NEGATIVE) >= 40


@pytest.mark.parametrize("path", POSITIVE, ids=lambda p: p.name)
def test_positive_has_no_error(path):
    findings = run(path)
    errors = [f for f in findings if f.severity is Severity.ERROR]
    assert errors == [], show(errors)


@pytest.mark.parametrize("path", NEGATIVE, ids=lambda p: p.name)
def test_negative_gets_its_findings(path):
    rule = path.name.split("__")[0]
    assert rule in RULES, f"{path.name}: file name must start with a rule id"
    findings = run(path)
    assert any(f.rule == rule for f in findings), f"no {rule} in\n{show(findings)}"
    sidecar = path.with_name(path.stem + ".expect.json")
    expects = json.loads(sidecar.read_text())
    assert expects and rule in {e["rule"] for e in expects}
    for e in expects:
        match = [f for f in findings if f.rule == e["rule"] and f.path == e["path"] and f.line == e["line"]
                 and ("severity" not in e or f.severity.value == e["severity"])]
        assert match, f"expected {e} in\n{show(findings)}"


@pytest.mark.parametrize("path", POSITIVE + NEGATIVE, ids=lambda p: p.name)
def test_findings_name_file_position_and_fix(path):
    for f in run(path):
        assert f.rule in RULES
        assert f.file == str(path)
        assert f.line >= 1 and f.column >= 1
        assert f.hint, f"{f.rule} at {f.path} has no hint"
