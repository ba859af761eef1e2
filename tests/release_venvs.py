"""Virtual environments the tests build on demand and keep between runs: one per pinned requirement
set (another mindstudio-probe release beside a verl it installs with), or per Python interpreter.

A venv lives under $VERL_PDBG_CONF_VENVS, else $XDG_CACHE_HOME/verl-pdbg-conf/venvs (~/.cache/...),
in a directory named for a hash of what went into it, so a changed lock builds a new one. It is
marked complete only once every install step succeeded; a half-built one is removed and built
again. A file lock keeps two test processes from building the same venv at once."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements"
# Installed first, alone: pip then takes the machine's CPU wheel (or the CPU index given in PIP_*),
# and the lock's torch pin is already satisfied, so no CUDA build is ever pulled in.
TORCH = "torch==2.13.0"
_DONE = ".complete"


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


def _run(cmd: list[str], log, timeout: float) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                          env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} exited {proc.returncode}")


def venv(name: str, lock: Path, python: str | None = None, torch: bool = True, timeout: float = 1800) -> Path:
    """The venv `name` holding exactly the pins of `lock` (torch first when `torch`), built with
    `python` (this interpreter by default). Returns its directory; raises BuildError with the
    build log's tail when an install step fails."""
    python = python or sys.executable
    version = interpreter_version(python)
    pins = [ln.strip() for ln in lock.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    key = hashlib.sha256("\n".join([version, TORCH if torch else "", *pins]).encode()).hexdigest()[:12]
    target = cache_root() / f"{name}-py{version}-{key}"
    if (target / _DONE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # another process may be building it: wait, then reuse
        if (target / _DONE).exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        started = time.monotonic()
        log_path = target.parent / f"{target.name}.log"
        with open(log_path, "w") as log:
            try:
                _run([python, "-m", "venv", str(target)], log, 300)
                py = str(target / "bin" / "python")
                _run([py, "-m", "pip", "install", "-q", "-U", "pip"], log, timeout)
                if torch:
                    _run([py, "-m", "pip", "install", "-q", TORCH], log, timeout)
                _run([py, "-m", "pip", "install", "-q", "-r", str(lock)], log, timeout)
                _run([py, "-m", "pip", "check"], log, 300)
            except (BuildError, subprocess.TimeoutExpired) as e:
                log.close()
                tail = log_path.read_text()[-4000:]
                raise BuildError(f"building venv {name} failed: {e}\n{tail}") from e
        (target / _DONE).write_text(f"built in {time.monotonic() - started:.0f} s from {lock.name}\n")
    return target
