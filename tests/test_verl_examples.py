"""Every verl conf under tests/examples/verl: positive ones have no error, each negative
one gets the finding its `# expect: RULE PATH LINE [FILE]` header names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.core.rules import RULES
from verl_pdbg_conf.validate import validate_files

ROOT = Path(__file__).parent / "examples" / "verl"
POSITIVE = sorted((ROOT / "positive").glob("*.yaml"))
NEGATIVE = sorted((ROOT / "negative").glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (\S+) (\S+) (\d+)(?: (\S+))?$", re.M)


def run(path: Path):
    return validate_files([str(path)], Options(base_dir=str(ROOT))).sorted()


@pytest.mark.parametrize("path", POSITIVE, ids=lambda p: p.name)
def test_positive_has_no_error(path):
    errors = [f for f in run(path) if f.severity is Severity.ERROR]
    assert errors == []


@pytest.mark.parametrize("path", NEGATIVE, ids=lambda p: p.name)
def test_negative_gets_its_finding(path):
    expects = EXPECT.findall(path.read_text())
    assert expects, f"{path.name} has no `# expect:` line"
    assert path.name.split("__")[0] in {e[0] for e in expects}, "file name must start with the rule it shows"
    findings = run(path)
    for rule, dotted, line, file in expects:
        assert rule in RULES
        match = [f for f in findings if f.rule == rule and (dotted == "-" or f.path == dotted)
                 and f.line == int(line) and Path(f.file).name == (file or path.name)]
        assert match, f"no {rule} at {dotted}:{line} in\n" + "\n".join(
            f"  {f.rule} {f.path} {Path(f.file).name}:{f.line}:{f.column}" for f in findings)


def test_findings_are_one_based_and_carry_hints():
    for path in NEGATIVE:
        for f in run(path):
            assert f.line >= 1 and f.column >= 1
            assert f.rule in RULES
            if f.severity is Severity.ERROR and f.rule not in ("parse-error",):
                assert f.hint, f"{path.name}: {f.rule} has no hint"
