"""The validator's tests on Python 3.10 and 3.12 (the whole suite runs on 3.11).

Each interpreter gets a venv holding the validator's dependencies and the test tools only
(requirements/venvs/validator.lock: no torch, verl or msprobe), built on first use and kept
between runs (tests/release_venvs.py); VALIDATOR_TESTS run there in a pytest subprocess. An
interpreter is looked for as `pythonX.Y` on PATH, then among pyenv's installed versions
(release_venvs.find_python); where there is none the test is skipped, naming what is missing. Each
interpreter's run is a background job of the suite (conftest.py), made while the tests before it run."""

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


def make_run(version):
    """The job of one interpreter: the probe, then the validator's tests, in `venv`; (exit code, stdout,
    stderr)."""

    def make(venv, root):
        py = str(venv / "bin" / "python")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        # the interpreter is the one asked for, and the validator imports nothing heavy there
        probe = release_venvs.run_step([py, "-c", "import sys, verl_pdbg_conf.validate, verl_pdbg_conf.cli; "
                                                  "print('%d.%d' % sys.version_info[:2], sorted(m for m in "
                                                  "('torch', 'msprobe', 'verl') if m in sys.modules))"],
                                       300, stderr=subprocess.PIPE, cwd=ROOT, env=env)
        if probe.returncode != 0 or probe.stdout.split() != [version, "[]"]:
            return probe.returncode or 1, f"probe: {probe.stdout}", probe.stderr[-3000:]
        run = release_venvs.run_step([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                                      f"--basetemp={root / 'basetemp'}", *VALIDATOR_TESTS], 1800,
                                     stderr=subprocess.PIPE, cwd=ROOT, env=env)
        return run.returncode, run.stdout, run.stderr

    return make


# Each interpreter's run in the background once its venv is built, among the suite's other jobs
# (release_venvs.start_job): it overlaps the tests before it instead of holding the suite's last minutes.
BACKGROUND_JOBS = {f"validator-{v}": (("validator", v), make_run(v)) for v in PYTHONS}


@pytest.mark.slow
@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.venvs("validator", v)) for v in PYTHONS])
def test_validator_tests_pass_on(version):
    try:
        rc, stdout, stderr = release_venvs.job(f"validator-{version}", ("validator", version), make_run(version))
    except release_venvs.NoInterpreter as e:
        pytest.skip(str(e))
    except release_venvs.BuildError as e:
        pytest.fail(str(e))
    tail = stdout[-5000:] + stderr[-2000:]
    assert rc == 0, tail
    summary = stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d{3,} passed\b", summary) and "failed" not in summary and "error" not in summary, tail


@pytest.mark.slow
@pytest.mark.venvs("validator", "3.12")
def test_rollout_compare_without_torch_is_refused_saying_so():
    """Where torch is not installed (the validator's venv holds none), --rollout cannot read a tensor: it
    refuses before reading anything, naming what to install, instead of a partial verdict with every point
    skipped and no word why (what it gave before)."""
    try:
        env_dir = release_venvs.get("validator", "3.12")
    except release_venvs.NoInterpreter as e:
        pytest.skip(str(e))
    done = subprocess.run([str(env_dir / "bin" / "python"), "-m", "verl_pdbg_conf.compare.cli", "--rollout",
                           str(ROOT / "examples" / "rollout")], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "torch is not installed" in done.stderr and "pip install torch --index-url https://download.pytorch.org/whl/cpu" in done.stderr
    assert "Traceback" not in done.stderr
