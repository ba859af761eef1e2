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


def _start(version, tmp_path_factory):
    """The probe, then the validator's tests started in the background: both interpreters' runs go
    at once, one per core (each is one single-threaded pytest), instead of one after the other."""
    try:
        env_dir = release_venvs.get("validator", version)
    except release_venvs.NoInterpreter as e:
        return "skip", str(e)
    except release_venvs.BuildError as e:
        return "fail", str(e)
    py = str(env_dir / "bin" / "python")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # the interpreter is the one asked for, and the validator imports nothing heavy there
    probe = subprocess.run([py, "-c", "import sys, verl_pdbg_conf.validate, verl_pdbg_conf.cli; "
                                      "print('%d.%d' % sys.version_info[:2], "
                                      "sorted(m for m in ('torch', 'msprobe', 'verl') if m in sys.modules))"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if probe.returncode != 0 or probe.stdout.split() != [version, "[]"]:
        return "fail", f"probe: {probe.stdout} {probe.stderr[-3000:]}"
    out = tmp_path_factory.mktemp(f"py{version}")
    with open(out / "stdout", "w") as so, open(out / "stderr", "w") as se:
        run = subprocess.Popen([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                                f"--basetemp={out / 'basetemp'}", *VALIDATOR_TESTS],
                               cwd=ROOT, env=env, stdout=so, stderr=se)
    return "run", (run, out)


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """version -> ("skip" | "fail", why) or ("run", (Popen, its output directory)), for every
    interpreter this session selected."""
    wanted = [v for v in PYTHONS if any(f"[{v}]" in item.nodeid for item in request.session.items)]
    started = {v: _start(v, tmp_path_factory) for v in wanted}
    yield started
    for state, what in started.values():
        if state == "run" and what[0].poll() is None:
            what[0].kill()


@pytest.mark.slow
@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.venvs("validator", v)) for v in PYTHONS])
def test_validator_tests_pass_on(version, runs):
    state, what = runs[version]
    if state == "skip":
        pytest.skip(what)
    if state == "fail":
        pytest.fail(what)
    run, out = what
    rc = run.wait(timeout=1800)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
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
