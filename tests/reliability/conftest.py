"""The reliability campaign: its scenario processes start once per session, in parallel lanes, as soon
as the selected test modules are known; each module lists the jobs it reads in JOBS."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reliability_helpers as rh  # noqa: E402

# Jobs in one lane run one after another; lanes run side by side (at most 5 processes at once).
LANES = (("faults-statistics", "faults-tensor"), ("kill-rerun",), ("reference", "same-rank", "two-ranks"))


def _run_job(name: str, workdir: str) -> dict:
    if name == "faults-tensor":
        with rh.tmpfs(os.path.join(workdir, "tmpfs")) as (mounted, reason):
            rec = rh.faults(workdir, "l1_tensor", mounted)
        rec["tmpfs_unavailable"] = None if mounted else reason or "mount failed"
        return rec
    return rh.JOBS[name](workdir)


class Campaign:
    def __init__(self, root: str, wanted: set[str]):
        self.root, self.results, self.errors, self.seconds = root, {}, {}, {}
        self.done = {name: threading.Event() for lane in LANES for name in lane}
        self.threads = []
        for lane in LANES:
            jobs = [j for j in lane if j in wanted]
            if jobs:
                t = threading.Thread(target=self._lane, args=(jobs,), daemon=True)
                t.start()
                self.threads.append(t)

    def _lane(self, jobs):
        for name in jobs:
            t0 = time.monotonic()
            try:
                self.results[name] = _run_job(name, os.path.join(self.root, name))
            except BaseException as e:  # reported by get()
                self.errors[name] = e
            finally:
                self.seconds[name] = round(time.monotonic() - t0, 1)
                self.done[name].set()

    def get(self, name: str) -> dict:
        if not self.done[name].wait(600):
            pytest.fail(f"reliability job {name} did not finish in 600 s")
        if name in self.errors:
            pytest.fail(f"reliability job {name} failed: {self.errors[name]}")
        return self.results[name]


def pytest_collection_modifyitems(session, config, items):
    wanted = set()
    for item in items:
        if os.path.dirname(str(item.fspath)) == HERE:
            wanted.update(getattr(item.module, "JOBS", ()))
    config._reliability_jobs = wanted


@pytest.fixture(scope="session")
def campaign(request, tmp_path_factory):
    for module in ("torch", "msprobe"):
        if importlib.util.find_spec(module) is None:  # find_spec: importing msprobe would patch torch here
            pytest.skip(f"{module} is not installed")
    c = Campaign(str(tmp_path_factory.mktemp("reliability")), getattr(request.config, "_reliability_jobs", set()))
    yield c
    if c.seconds:
        print("\nreliability jobs (s):", dict(sorted(c.seconds.items())))
