"""Run scenarios.py in subprocesses (msprobe patches torch for the life of a process)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIGS = os.path.join(HERE, "configs")
SCRIPT = os.path.join(HERE, "scenarios.py")


# mindstudio-probe releases the runtime's msprobe tests run on: the suite's own (None: this
# interpreter) and others, each in a venv of its own built from requirements/venvs/<name>.lock.
RELEASES = {"26.2.0": None, "26.1.0.post1": "msprobe-26.1.0.post1", "8.3.3": "msprobe-8.3.3"}
# Releases without service._disable_dump_runtime(): the runtime says once what it does instead.
LACK_DISABLE_DUMP_RUNTIME = ("8.3.3",)


def release_params() -> list:
    """RELEASES as parameters; those needing a venv of their own are marked `venvs`."""
    return [pytest.param(r, marks=() if RELEASES[r] is None else pytest.mark.venvs(RELEASES[r])) for r in RELEASES]


def adaptation_notes(warnings: list[str], release: str) -> tuple[list[str], list[str]]:
    """(the runtime's notes on what `release` lacks, every other warning)."""
    prefix = f"precision_debugger: msprobe {release} has no "
    notes = [w for w in warnings if w.startswith(prefix)]
    return notes, [w for w in warnings if not w.startswith(prefix)]


def config(name: str) -> str:
    return os.path.join(CONFIGS, name + ".json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BENCH = os.path.join(REPO, "bench", "real_workers.py")


def start_bench(cwd: str, out: str, *args: str) -> subprocess.Popen:
    """bench/real_workers.py as a user runs it, writing its dump tree to `out`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
               OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, BENCH, "--out", out, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def bench_summary(name: str, proc: subprocess.Popen, expected: int = 0, timeout: float = 300) -> dict:
    """The bench's one JSON line, once it exited with `expected` (1: a step raised)."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    lines = stdout.strip().splitlines()
    assert proc.returncode == expected and len(lines) == 1, \
        f"{name}: exit {proc.returncode}\n{stdout[-3000:]}{stderr[-3000:]}"
    return json.loads(lines[0])


class Scenario:
    """One scenario process; `result()` waits for it and returns what it wrote."""

    def __init__(self, tmp: str, name: str, *args: str, tag: str = "", python: str | None = None):
        self.result_path = os.path.join(tmp, f"{name}{tag}.result.json")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
                   PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([python or sys.executable, SCRIPT, name, self.result_path, *args], cwd=tmp, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def result(self, timeout: float = 240) -> dict:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            pytest.fail(f"scenario timed out; output tail:\n{out[-4000:]}")
        if self.proc.returncode != 0 or not os.path.exists(self.result_path):
            pytest.fail(f"scenario failed (exit {self.proc.returncode}); output tail:\n{out[-6000:]}")
        with open(self.result_path) as f:
            return json.load(f)
