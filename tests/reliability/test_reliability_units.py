"""The reliability fixes in the runtime, pinned in process with stand-ins for msprobe (no torch, no
msprobe imported here): directory claims under concurrency, release of empty claims only, the hook
guard, reset before a session after a failed reset, and msprobe's half-built singleton."""

from __future__ import annotations

import os
import sys
import threading
import types

import pytest

from verl_pdbg_conf.runtime import session

JOBS = ()


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    monkeypatch.setattr(session, "_state", session._State())
    monkeypatch.setattr(session, "rank_dir_name", lambda: "rank0")
    session.forget_warnings()
    yield
    session.forget_warnings()


def test_concurrent_claims_never_share_a_directory(tmp_path):
    base = str(tmp_path / "step_1" / "actor_update")
    got, barrier = [], threading.Barrier(16)

    def claim():
        barrier.wait()
        got.append(session.fresh_dir(base))

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted([base] + [f"{base}.{n}" for n in range(1, 16)])
    assert all(os.path.isdir(os.path.join(p, "step0", "rank0")) for p in got)


def test_a_claim_is_per_rank(tmp_path, monkeypatch):
    base = str(tmp_path / "s")
    assert session.fresh_dir(base) == base
    monkeypatch.setattr(session, "rank_dir_name", lambda: "rank1")
    assert session.fresh_dir(base) == base  # rank1 writes beside rank0, not in base.1
    assert sorted(os.listdir(os.path.join(base, "step0"))) == ["rank0", "rank1"]


def test_a_claim_survives_another_rank_releasing_the_parents_it_just_made(tmp_path, monkeypatch):
    """Rank 0 releasing its empty claim may remove `actor_update` between makedirs making it and
    making `step0` in it (seen in CI as a FileNotFoundError on step0): the claim tries again."""
    base = tmp_path / "step_1" / "actor_update"
    real_mkdir, removed = os.mkdir, []

    def mkdir(path, *a, **kw):
        if str(path) == str(base / "step0") and not removed:
            removed.append(path)
            os.rmdir(base)  # the other rank's release() runs here
        return real_mkdir(path, *a, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert session.fresh_dir(str(base)) == str(base)
    assert removed and os.path.isdir(base / "step0" / "rank0")


def test_release_removes_empty_claims_only(tmp_path):
    save = tmp_path / "save"
    empty = session.fresh_dir(str(save / "step_1" / "actor_update"))
    full = session.fresh_dir(str(save / "step_1" / "ref_compute_log_prob"))
    (save / "step_1" / "ref_compute_log_prob" / "step0" / "rank0" / "dump.json").write_text("{}")
    session.release(empty)
    session.release(full)
    assert sorted(os.listdir(save / "step_1")) == ["ref_compute_log_prob"]
    assert (save / "step_1" / "ref_compute_log_prob" / "step0" / "rank0" / "dump.json").read_text() == "{}"
    session.release(str(save / "step_1" / "ref_compute_log_prob"))
    alone = session.fresh_dir(str(save / "step_2" / "actor_update"))
    session.release(alone)
    assert sorted(os.listdir(save)) == ["step_1"]  # stops at step_N, never removes save_path


class FakeService:
    def __init__(self, log):
        self.log, self.config = log, types.SimpleNamespace(dump_path=None)
        self.data_collector = FakeCollector(log)
        self.loop = self.init_step = 0
        self.reset_fails = False

    def reset_status(self):
        self.log.append("reset")
        if self.reset_fails:
            raise RuntimeError("reset broke")

    def _disable_dump_runtime(self):
        self.log.append("disabled")


class FakeCollector:
    def __init__(self, log):
        self.log = log

    def forward_output_data_collect(self, name, *args):
        self.log.append(("collect", name))
        if name == "bad":
            raise OSError(28, "No space left on device")


class FakeDebugger:
    def __init__(self, log):
        self.log, self.service = log, FakeService(log)

    def start(self, model=None):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")


@pytest.fixture
def fake(monkeypatch):
    log: list = []
    dbg = FakeDebugger(log)
    def debugger(config_path, dump_path):
        session._state.debugger = dbg  # as the real one: the process's debugger, created on first use
        return dbg

    monkeypatch.setattr(session, "debugger", debugger)
    return dbg, log


def test_hook_failure_never_reaches_the_stage(tmp_path, fake):
    dbg, log = fake
    s = session.open_session("actor_update", str(tmp_path / "a"), None, "c.json", 1)
    assert dbg.service.data_collector.forward_output_data_collect("bad") is None  # what the hook sees
    assert dbg.service.data_collector.forward_output_data_collect("good") is None
    assert "disabled" in log
    with pytest.raises(session.MsprobeError) as info:
        session.close_session(s)
    assert info.value.phase == "collect" and info.value.cause.errno == 28
    assert info.value.dump_dir == s.dump_dir
    assert session._state.active is None and log[-2:] == ["stop", "reset"]


def test_failed_reset_is_retried_before_the_next_session(tmp_path, fake):
    dbg, log = fake
    s = session.open_session("actor_compute_log_prob", str(tmp_path / "a"), None, "c.json", 1)
    dbg.service.reset_fails = True
    with pytest.raises(session.MsprobeError) as info:
        session.close_session(s)
    assert info.value.phase == "cleanup" and session._state.dirty
    with pytest.raises(session.MsprobeError) as info:  # still failing: no session on old records
        session.open_session("ref_compute_log_prob", str(tmp_path / "b"), None, "c.json", 1)
    assert info.value.phase == "reset" and "start" not in log[log.index("stop"):]
    assert not (tmp_path / "b").exists()
    dbg.service.reset_fails = False
    s = session.open_session("actor_update", str(tmp_path / "c"), None, "c.json", 1)
    assert not session._state.dirty and log[-2:] == ["reset", "start"]
    session.close_session(s)


def test_failed_start_leaves_no_empty_directories(tmp_path, fake):
    dbg, log = fake

    def start(model=None):
        raise RuntimeError("start broke")

    dbg.start = start
    with pytest.raises(session.MsprobeError) as info:
        session.open_session("actor_update", str(tmp_path / "step_1" / "actor_update"), None, "c.json", 1)
    assert info.value.phase == "start" and session._state.active is None
    assert os.listdir(tmp_path) == []
    assert "disabled" in log and "reset" in log


def test_half_built_singleton_is_dropped(monkeypatch):
    """msprobe sets `initialized` before building its singleton: a constructor that raised leaves an
    instance without a service that every later PrecisionDebugger(...) returns unchanged."""

    class PrecisionDebugger:
        _instance = None
        fail = True

        def __new__(cls, *a, **k):
            if cls._instance is None:
                cls._instance = super().__new__(cls)
                cls._instance.initialized = False
            return cls._instance

        def __init__(self, config_path=None, dump_path=None):
            if self.initialized:
                return
            self.initialized = True
            self._overrides = {"config_path": config_path}
            if PrecisionDebugger.fail:
                raise RuntimeError("constructor broke")
            self.service = object()

    PrecisionDebugger.service = None
    pkg = types.ModuleType("msprobe")
    mod = types.ModuleType("msprobe.pytorch")
    mod.PrecisionDebugger = PrecisionDebugger
    monkeypatch.setitem(sys.modules, "msprobe", pkg)
    monkeypatch.setitem(sys.modules, "msprobe.pytorch", mod)
    with pytest.raises(RuntimeError, match="constructor broke"):
        session.debugger("c.json", "/tmp/x")
    assert PrecisionDebugger._instance is None
    PrecisionDebugger.fail = False
    dbg = session.debugger("c.json", "/tmp/x")
    assert dbg.service is not None and session._state.debugger is dbg


def test_a_file_in_the_way_is_an_error_not_a_loop(tmp_path):
    (tmp_path / "step_1").write_text("not a directory")
    with pytest.raises(OSError):
        session.fresh_dir(str(tmp_path / "step_1" / "actor_update"))
    assert (tmp_path / "step_1").read_text() == "not a directory"
