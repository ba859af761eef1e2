"""The CI share of mutation testing (issue 42; the whole run is bench/mutation.py): the rules a compare's
answer rests on, each broken on purpose in a copy of the package, and the tests that hold that rule run
against the copy. Each must fail: a rule no test notices when it breaks is a rule that can silently go."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# name -> (file, the code as it is, the code broken, the tests that must fail)
MUTANTS = {
    "exit-code priority: a divergence wins over a fault of the compare": (
        "verl_pdbg_conf/compare/verdict.py",
        "    if any(v.reason == Reason.FAILED for v in verdicts):\n        return ExitCode.ERROR\n"
        "    if any(v.status == Status.DIVERGED for v in verdicts):\n        return ExitCode.DIVERGED\n",
        "    if any(v.status == Status.DIVERGED for v in verdicts):\n        return ExitCode.DIVERGED\n"
        "    if any(v.reason == Reason.FAILED for v in verdicts):\n        return ExitCode.ERROR\n",
        ["test_verdict_core.py::test_exit_code_priority", "test_compare_faults.py::test_exit_code_of_each_status"]),
    "one-sided null: a statistic lost in one run is judged": (
        "verl_pdbg_conf/compare/pipeline/analysis.py",
        "            if (a is None) != (b is None):\n",
        "            if False:\n",
        ["test_compare_bad_values.py::test_a_statistic_one_run_lost_is_not_compared"]),
    "partial read as same: an unreadable record allows full coverage": (
        "verl_pdbg_conf/compare/pipeline/coverage.py",
        ' and not s["unreadable_records"]\n',
        "\n",
        ["test_verdict_core.py::test_an_unreadable_record_keeps_the_pair_from_full"]),
    "the NaN rule: NaN on one side only is no divergence": (
        "verl_pdbg_conf/compare/judge.py",
        "        if tc != gc:\n",
        "        if False:\n",
        ["test_verdict_core.py::test_one_sided_nan_or_inf_is_a_divergence_both_alike_is_not",
         "test_compare_bad_values.py::test_nan_as_msprobe_writes_it_is_read"]),
    "a NaN value passes its limit": (
        "verl_pdbg_conf/compare/judge.py",
        "    if value != value:\n        return Rule.NAN\n",
        "",
        ["test_verdict_core.py::test_against_the_limit"]),
    "unreadable rows judged (pipeline/analysis.py skips them)": (
        "verl_pdbg_conf/compare/pipeline/analysis.py",
        "            if row.bad or (grow is not None and grow.bad):\n                continue",
        "            if row.bad or (grow is not None and grow.bad):\n                pass",
        ["test_compare_bad_values.py::test_an_unreadable_row_is_never_judged"]),
}


def _pytest(package_root: Path, tests: list[str]) -> subprocess.CompletedProcess:
    """The tests run in a child whose `verl_pdbg_conf` is the one under package_root (its first sys.path entry
    is its working directory, package_root)."""
    env = dict(os.environ, PYTHONPATH=str(package_root), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--rootdir", str(ROOT), *[str(TESTS / t) for t in tests]],
                          cwd=package_root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """A copy of the package per mutant, and the check that a child imports the copy, not this tree."""
    root = tmp_path_factory.mktemp("mutants")
    probe = root / "probe"
    shutil.copytree(ROOT / "verl_pdbg_conf", probe / "verl_pdbg_conf", ignore=shutil.ignore_patterns("__pycache__"))
    where = subprocess.run([sys.executable, "-c", "import verl_pdbg_conf; print(verl_pdbg_conf.__file__)"],
                           cwd=probe, env=dict(os.environ, PYTHONPATH=str(probe)), capture_output=True, text=True)
    assert where.stdout.startswith(str(probe)), (where.stdout, where.stderr)
    return root


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_breaking_a_rule_fails_its_tests(copies, name):
    path, before, after, tests = MUTANTS[name]
    root = copies / str(sorted(MUTANTS).index(name))
    shutil.copytree(ROOT / "verl_pdbg_conf", root / "verl_pdbg_conf", ignore=shutil.ignore_patterns("__pycache__"))
    src = (root / path).read_text()
    assert src.count(before) == 1, f"the code this mutant breaks moved: update MUTANTS[{name!r}]"
    (root / path).write_text(src.replace(before, after))
    got = _pytest(root, tests)
    # 1: tests failed (not 2-4: a collection error or a crash of pytest says nothing of the tests)
    assert got.returncode == 1 and " failed" in got.stdout, (name, got.returncode, got.stdout[-2000:], got.stderr[-2000:])
