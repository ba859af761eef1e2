"""The suite's background work is queued: venvs build one at a time in the order asked (a test waiting
for one moves it next), and jobs run one at a time (side by side they starved each other)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

import release_venvs


@pytest.fixture
def fresh_queues(monkeypatch):
    for name, value in (("_BUILDS", {}), ("_QUEUE", []), ("_JOBS", {}), ("_JOB_QUEUE", []), ("_TEMP", []),
                        ("PHASES", {}), ("WAITS", {})):
        monkeypatch.setattr(release_venvs, name, value)
    yield
    release_venvs.remove_job_dirs()


def test_jobs_run_one_at_a_time_and_all_finish(fresh_queues, monkeypatch):
    ready: Future = Future()
    ready.set_result("venv-dir")
    release_venvs._BUILDS[("fake", None)] = ready
    running, most, lock = [0], [0], threading.Lock()

    def make(venv, work_dir):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return venv

    for n in range(4):
        release_venvs.start_job(f"j{n}", "fake", make)
    assert [release_venvs.job(f"j{n}", "fake", make) for n in range(4)] == ["venv-dir"] * 4
    assert most[0] == 1
    assert release_venvs._JOB_QUEUE == []
    assert all(release_venvs.PHASES[f"job j{n}"][2] == "ok" for n in range(4))


def test_builds_go_in_the_order_asked_and_a_waited_one_goes_next(fresh_queues, monkeypatch):
    order, gate = [], threading.Event()

    def fake_venv(name, lock, python=None, torch=True):
        if name == "a":
            gate.wait(5)  # "a" builds while the others queue
        order.append(name)
        return name

    monkeypatch.setattr(release_venvs, "venv", fake_venv)
    monkeypatch.setattr(release_venvs, "_spec", lambda name, pv: (None, None, True))
    for name in ("a", "b", "c", "d"):
        release_venvs.prebuild(name)
    deadline = time.monotonic() + 5
    while release_venvs._QUEUE != [("a", None), ("b", None), ("c", None), ("d", None)]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    threading.Timer(0.2, gate.set).start()
    assert release_venvs.get("d") == "d"  # the main thread waits for "d": it is built right after "a"
    assert order[:2] == ["a", "d"]
    assert release_venvs.get("c") == "c" and release_venvs.get("b") == "b"
    assert sorted(order) == ["a", "b", "c", "d"] and release_venvs._QUEUE == []


def test_a_build_that_fails_before_it_starts_does_not_hold_the_queue(fresh_queues, monkeypatch):
    def spec(name, pv):
        if name == "broken":
            raise release_venvs.NoInterpreter("no python9.9")
        return None, None, True

    monkeypatch.setattr(release_venvs, "_spec", spec)
    monkeypatch.setattr(release_venvs, "venv", lambda name, lock, python=None, torch=True: name)
    release_venvs.prebuild("broken")
    release_venvs.prebuild("fine")
    with pytest.raises(release_venvs.NoInterpreter):
        release_venvs.get("broken")
    assert release_venvs.get("fine") == "fine"
