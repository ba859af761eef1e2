"""The test session composes afresh: the on-disk composition cache (verl_facts/disk_cache.py) is
off unless a test turns it on with its own directory (tests/test_disk_cache.py). Session fixtures:
older verl releases' trees from the registry; two identical 2-rank FSDP2 runs of verl's real workers.
Tests that need a venv of their own run last, their venvs built in the background meanwhile."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("VERL_PDBG_CONF_CACHE", "off")
# Ray nices its workers 15 above what starts them: the suite's own Ray tests ran behind the venv builds
# (niced 10), and verl's trainer in its job ran its workers at 15. Set here, the jobs inherit it too.
os.environ.setdefault("RAY_worker_niceness", "0")


# ---------------------------------------------------------------- real verl trees from the registry

import zipfile  # noqa: E402

from real_verls import VERL_WHEELS  # noqa: E402


@pytest.fixture(scope="session")
def verl_wheels(request) -> dict:
    """{version: wheel} from `pip download --no-deps verl==X`, kept in the pytest cache dir so a
    rerun downloads nothing; a release pip cannot fetch here is left out (its tests skip)."""
    d = Path(request.config.cache.mkdir("verl-wheels"))
    out = {}
    for v in VERL_WHEELS:
        found = sorted(d.glob(f"verl-{v}-*.whl"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"verl=={v}", "-d", str(d)],
                           capture_output=True, timeout=600)
            found = sorted(d.glob(f"verl-{v}-*.whl"))
        if found:
            out[v] = found[0]
    return out


@pytest.fixture(scope="session")
def verl_trees(verl_wheels, tmp_path_factory) -> dict:
    """{version: directory holding that release's `verl/` package}, unpacked once per session."""
    base = tmp_path_factory.mktemp("verl-trees")
    out = {}
    for v, wheel in verl_wheels.items():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(base / v, [n for n in z.namelist() if n.startswith("verl/")])
        out[v] = base / v
    return out


@pytest.fixture(scope="session")
def verl_tree(verl_trees):
    """verl_tree(version) -> the directory holding that release's verl/ (skips when not fetched)."""
    def get(version: str) -> Path:
        if version not in verl_trees:
            pytest.skip(f"verl {version}'s wheel could not be downloaded")
        return verl_trees[version]
    return get


# ---------------------------------------------------------------- venvs of their own, built in the background

import release_venvs  # noqa: E402


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Tests that need a venv of their own (marked `venvs`) run last: the venvs build meanwhile."""
    later = [item for item in items if item.get_closest_marker("venvs")]
    if later:
        items[:] = [item for item in items if not item.get_closest_marker("venvs")] + later


def pytest_collection_finish(session):
    """Start building, in the background, every venv the selected tests ask for, and then the data their
    modules make in it (a module's BACKGROUND_JOBS: name -> (venv, make), venv "name" or (name, python
    version); see release_venvs.start_job), in the order the tests run."""
    if session.config.option.collectonly:
        return
    jobs, venvs = {}, {}
    for item in session.items:
        mark = item.get_closest_marker("venvs")
        if mark is not None and mark.args:
            venvs.setdefault(tuple(mark.args), None)
            for name, (venv, make) in getattr(item.module, "BACKGROUND_JOBS", {}).items():
                if release_venvs.venv_spec(venv) == tuple(mark.args):  # a job in a venv a selected test asks for
                    jobs.setdefault(name, (venv, make))
    # The venvs the jobs run in first: a job's minutes start only once its venv is built.
    for venv in dict.fromkeys(release_venvs.venv_spec(venv) for venv, _ in jobs.values()):
        release_venvs.prebuild(*venv)
    for args in venvs:
        release_venvs.prebuild(*args)
    for name, (venv_name, make) in jobs.items():
        release_venvs.start_job(name, venv_name, make)


_STARTED = time.monotonic()


def pytest_terminal_summary(terminalreporter):
    """The background builds and jobs with their times (bench/ci_phases.py reads these lines)."""
    lines = release_venvs.phase_lines(_STARTED)
    if lines:
        terminalreporter.section("background phases (from the session's start)")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    release_venvs.stop_builds()
    release_venvs.remove_job_dirs()


# ---------------------------------------------------------------- two identical 2-rank FSDP2 runs

_REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fsdp2_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two identical runs of verl's real workers on 2 gloo ranks (FSDP2), L1 statistics, global step 1,
    made once per session by bench/real_workers.py, both at once (4 processes). Their save_paths."""
    out = tmp_path_factory.mktemp("fsdp2_runs")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(_REPO / "bench" / "real_workers.py"), "--out", str(out / name),
                               "--nproc", "2", "--steps", "1", "--level", "L1"], cwd=out, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in "ab"]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{stdout[-3000:]}{stderr[-3000:]}"
        result = json.loads(stdout.strip().splitlines()[-1])
        assert result["nproc"] == 2 and not result["errors"], result["errors"]
    sys.stderr.write(f"\nfsdp2_runs: two 2-rank runs in {time.perf_counter() - t0:.0f} s\n")
    return out / "a", out / "b"


# ---------------------------------------------------------------- cross-implementation pairs (issue 21)

import make_cross_impl_dumps as _xdumps  # noqa: E402

# The CI share of make_cross_impl_dumps.py's matrix: (arch, level, task, targets against golden).
CROSS_IMPL_CI = (
    ("qwen2", "mix", "statistics", ("sdpa", "sdpa-weight", "rmsnorm-eps", "split", "bf16-weight")),
    ("qwen2", "L1", "statistics", ("same-weight", "swiglu", "swap1-weight")),
    ("llama", "mix", "statistics", ("swiglu-op",)),
    ("qwen2", "mix", "tensor", ("sdpa-weight",)),
)


@pytest.fixture(scope="session")
def cross_impl_pairs(tmp_path_factory) -> list[dict]:
    """Real dumps of small Qwen2/Llama models whose code paths differ from the eager fp32 golden
    (make_cross_impl_dumps.py), made once per session: a list of pairs, each a dict with target, golden,
    arch, level, task, impl, plant, expect_layer (None: nothing planted), dtype_aware. The planted layer is
    seeded from PDBG_TEST_SEED when set, else from today's date, and printed."""
    out = tmp_path_factory.mktemp("cross_impl")
    seed = os.environ.get("PDBG_TEST_SEED") or None
    layer = _xdumps.default_layer(seed)
    t0 = time.perf_counter()
    _xdumps.make([_xdumps.job(str(out), arch, level, task, runs, layer)
                  for arch, level, task, runs in CROSS_IMPL_CI], parallel=2)
    found = _xdumps.pairs(str(out))
    sys.stderr.write(f"\ncross_impl_pairs: {len(found)} pairs, planted layer {layer} (seed {seed or 'date'}), "
                     f"made in {time.perf_counter() - t0:.0f} s\n")
    return found
