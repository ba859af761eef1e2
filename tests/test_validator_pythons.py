"""The validator's tests on Python 3.10 and 3.12 (the whole suite runs on 3.11).

Each interpreter gets a venv holding the validator's dependencies and the test tools only
(requirements/venvs/validator.lock: no torch, verl or msprobe), built on first use and kept
between runs (tests/release_venvs.py); VALIDATOR_TESTS run there in a pytest subprocess. An
interpreter is looked for as `pythonX.Y` on PATH, then among pyenv's installed versions
(release_venvs.find_python); where there is none the test is skipped, naming what is missing."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import release_venvs

ROOT = release_venvs.ROOT
PYTHONS = ("3.10", "3.12")
# The validator's test files: none imports torch, verl or msprobe (test_msprobe_rules skips its
# msprobe cross-checks where msprobe is not installed). The fuzz corpus and property tests are left
# out: they assert per-case time bounds and exercise nothing version-specific. tests/hydra comes
# last: pytest imports every argument's conftest at start-up, and test_compose imports its own.
VALIDATOR_TESTS = (
    "tests/test_cli.py", "tests/test_ci_formats.py", "tests/test_disk_cache.py", "tests/test_fast_schema.py",
    "tests/test_filesystem_cases.py", "tests/test_interpolation.py", "tests/test_launch_script.py",
    "tests/test_loaders.py", "tests/test_msprobe_examples.py", "tests/test_msprobe_rules.py", "tests/test_plan.py",
    "tests/test_releases.py", "tests/test_tables.py", "tests/test_verl_examples.py",
    "tests/fuzz/test_fuzz_regressions.py", "tests/hydra/test_compose.py",
)


@pytest.mark.slow
@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.venvs("validator", v)) for v in PYTHONS])
def test_validator_tests_pass_on(version, tmp_path):
    try:
        env_dir = release_venvs.get("validator", version)
    except release_venvs.NoInterpreter as e:
        pytest.skip(str(e))
    except release_venvs.BuildError as e:
        pytest.fail(str(e))
    py = str(env_dir / "bin" / "python")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # the interpreter is the one asked for, and the validator imports nothing heavy there
    probe = subprocess.run([py, "-c", "import sys, verl_pdbg_conf.validate, verl_pdbg_conf.cli; "
                                      "print('%d.%d' % sys.version_info[:2], "
                                      "sorted(m for m in ('torch', 'msprobe', 'verl') if m in sys.modules))"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split() == [version, "[]"]
    run = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                          f"--basetemp={tmp_path / 'basetemp'}", *VALIDATOR_TESTS],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = run.stdout[-5000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    summary = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d{3,} passed\b", summary) and "failed" not in summary and "error" not in summary, tail
