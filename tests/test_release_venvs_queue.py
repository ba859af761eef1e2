"""The suite's venvs are built in a queue (release_venvs.Turns): one at a time in the order asked (the data
jobs' venvs first), and a test waiting for one moves it next. Tested on queues of their own: the
session's real builds use the module's."""

from __future__ import annotations

import threading
import time

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
