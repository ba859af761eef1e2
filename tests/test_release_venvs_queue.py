"""The suite's venvs are built in a queue (release_venvs.Turns): one at a time in the order asked (the data
jobs' venvs first), and a test waiting for one moves it next. Tested on queues of their own: the
session's real builds use the module's."""

from __future__ import annotations

import shutil
import threading
import time

import release_venvs
from release_venvs import Turns


def _run(turns: Turns, keys, work) -> list[threading.Thread]:
    threads = [threading.Thread(target=lambda k=k: _take(turns, k, work)) for k in keys]
    for t in threads:
        t.start()
    return threads


def _take(turns: Turns, key, work) -> None:
    try:
        with turns.turn(key):
            work(key)
    except RuntimeError:
        pass  # the failing turn's own error; the queue must move on


def test_one_at_a_time_in_the_order_queued():
    turns, order, running, most, lock = Turns(), [], [0], [0], threading.Lock()

    def work(key):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(key)
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    for key in "abcde":
        turns.add(key)
    for t in _run(turns, "edcba", work):  # the threads start in another order: the queue's decides
        t.join(10)
    assert order == list("abcde") and most[0] == 1 and turns.queue == []


def test_a_key_waited_for_goes_next_and_an_urgent_one_too():
    turns, order, gate = Turns(), [], threading.Event()

    def work(key):
        if key == "a":
            gate.wait(5)  # "a" runs while the others queue
        order.append(key)

    for key in "abcd":
        turns.add(key)
    threads = _run(turns, "abcd", work)
    turns.ahead("d")
    turns.add("u", urgent=True)
    threads += _run(turns, "u", work)
    assert turns.queue[:3] == ["a", "u", "d"]
    gate.set()
    for t in threads:
        t.join(10)
    assert order == ["a", "u", "d", "b", "c"] and turns.queue == []


def test_a_turn_that_raises_hands_on_to_the_next():
    turns, order = Turns(), []

    def work(key):
        order.append(key)
        if key == "a":
            raise RuntimeError("a build that failed")

    turns.add("a")
    turns.add("b")
    threads = _run(turns, "ab", work)
    for t in threads:
        t.join(10)
    assert order == ["a", "b"] and turns.queue == []


def test_a_job_reading_one_queued_after_it_fails_instead_of_waiting_forever(monkeypatch, tmp_path):
    """Jobs run one at a time: a job reads those queued before it (done by then); one queued after it would
    wait for its own turn to end. The session's queue is left alone: this one is the test's."""
    for attr, fresh in (("_JOBS", {}), ("_JOB_TURNS", Turns()), ("_TEMP", []), ("PHASES", {}), ("WAITS", {})):
        monkeypatch.setattr(release_venvs, attr, fresh)
    monkeypatch.setattr(release_venvs, "get", lambda name, version=None: tmp_path)  # no venv built

    def first(venv, root):
        return "first"

    def later(venv, root):
        return "later"

    def reads_first(venv, root):
        return release_venvs.job("first", "venv", first)

    def reads_later(venv, root):
        return release_venvs.job("later", "venv", later)

    try:
        for name, make in (("first", first), ("reads-first", reads_first), ("reads-later", reads_later)):
            release_venvs.start_job(name, "venv", make)
        assert release_venvs.job("reads-first", "venv", reads_first) == "first"
        err = release_venvs._JOBS["reads-later"].exception(timeout=30)  # a wait forever fails here
        assert isinstance(err, RuntimeError) and "reads-later reads job later, queued after it" in str(err), err
        assert release_venvs._JOBS["later"].result(timeout=30) == "later"  # the queue went on
        assert release_venvs._JOB_TURNS.queue == []
    finally:
        for d in release_venvs._TEMP:
            shutil.rmtree(d, ignore_errors=True)
