"""strict / non-strict with faults injected into real msprobe.

Strict: what the guide says raises, raises, at construction where it can be known then.
Non-strict: one warning per cause (not per call), the stage runs and returns its result
unchanged, no exception from msprobe reaches the caller. On each release in RELEASES."""

from __future__ import annotations

import os

import pytest

from runtime_helpers import LACK_DISABLE_DUMP_RUNTIME, Scenario, adaptation_notes, config, release_params

pytestmark = pytest.mark.slow

CALLS = 3
# Releases whose DataCollector catches an exception of its data processor itself (and logs it).
COLLECTOR_CATCHES = ("8.3.3",)


@pytest.fixture(scope="module", params=release_params())
def release(request):
    return request.param


@pytest.fixture(scope="module")
def run(module_tmp, release, release_python):
    """The whole matrix in one process on `release`; the runtime's notes on what that release lacks
    are taken out of the cases' warnings (they are checked on their own)."""
    base = os.path.join(module_tmp, release)
    os.makedirs(base)
    rec = Scenario(base, "matrix", config("l1_statistics"), base + "/out", python=release_python(release)).result()
    notes = []
    for case in rec["cases"].values():
        found, case["warnings"] = adaptation_notes(case["warnings"], release)
        notes += found
    return rec, notes


@pytest.fixture(scope="module")
def cases(run):
    rec, _ = run
    return rec["cases"], rec["plain"]


def test_runs_on_the_release_and_names_what_it_lacks_once(run, release):
    rec, notes = run
    assert rec["msprobe"] == release
    assert len(notes) == (release in LACK_DISABLE_DUMP_RUNTIME), notes
    assert all("_disable_dump_runtime()" in n and "Runtime.is_running" in n for n in notes)


def _dumps(case):
    return sorted(case["tree"]["records"])


def test_baseline(cases):
    c, plain = cases
    for name in ("baseline", "baseline-strict"):
        assert c[name]["construct"] is None and c[name]["call"] is None
        assert c[name]["results"] == [plain] * CALLS and c[name]["warnings"] == []
        assert _dumps(c[name]) == [f"step_{s}/actor_update/step0/rank0/dump.json" for s in (1, 2, 3)]


# cause -> (strict: where it raises and what, text of the single non-strict warning)
FAULTS = {
    "msprobe-missing": ("construct", "ImportError", "msprobe is not available"),
    "config-path-missing": ("construct", "ValueError", "config_path"),
    "config-path-nonexistent": ("construct", "ValueError", "nope.json"),
    "unknown-stage": ("construct", "ValueError", "actor_updte"),
    "model-not-resolved": ("call", "ValueError", "PrecisionDebugger model not resolved for stage 'actor_update'"),
    "start-raises": ("call", "RuntimeError", "msprobe failed to start for stage 'actor_update'"),
    "stop-raises": ("call", "RuntimeError", "msprobe failed to stop for stage 'actor_update'"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_strict_raises(cases, fault):
    c, _ = cases
    where, exc, _ = FAULTS[fault]
    case = c[fault + "-strict"]
    assert case[where] == exc
    if where == "construct":
        assert case["ran"] == 0 and case["call"] is None
    assert case["warnings"] == []


def test_strict_raises_before_or_after_the_stage(cases):
    c, _ = cases
    assert c["model-not-resolved-strict"]["ran"] == 0  # raised before running the stage
    assert c["start-raises-strict"]["ran"] == 0 and "injected" in c["start-raises-strict"]["call_msg"]
    assert c["stop-raises-strict"]["ran"] == 1  # the stage ran; msprobe's own error surfaced after it


@pytest.mark.parametrize("fault", FAULTS)
def test_non_strict_warns_once_and_runs(cases, fault):
    c, plain = cases
    case = c[fault]
    assert case["construct"] is None and case["call"] is None
    assert case["ran"] == CALLS
    expected = [["ran", i] for i in range(1, CALLS + 1)] if fault == "model-not-resolved" else [plain] * CALLS
    assert case["results"] == expected
    assert len(case["warnings"]) == 1, case["warnings"]
    assert FAULTS[fault][2] in case["warnings"][0]


def test_non_strict_what_is_collected(cases):
    c, _ = cases
    for fault in ("msprobe-missing", "config-path-missing", "config-path-nonexistent", "model-not-resolved",
                  "start-raises"):
        assert _dumps(c[fault]) == []
    # a misspelled stage drops only itself
    assert _dumps(c["unknown-stage"]) == [f"step_{s}/actor_update/step0/rank0/dump.json" for s in (1, 2, 3)]


@pytest.mark.parametrize("after", ["after-start-raises", "after-stop-raises", "after-stage-raises"])
def test_msprobe_recovers_without_growth(cases, after):
    c, plain = cases
    case = c[after]
    assert case["results"] == [plain] * CALLS and case["warnings"] == []
    assert set(case["tree"]["records"].values()) == set(c["baseline"]["tree"]["records"].values())


def test_stage_exception_passes_through(cases):
    c, _ = cases
    for name in ("stage-raises", "stage-raises-strict"):
        assert c[name] == {"call": "KeyError", "active": False, "warnings": []}


def test_earlier_dump_is_never_overwritten(cases):
    c, _ = cases
    case = c["earlier-run"]
    assert case["kept"] == '{"earlier": true}'
    assert sorted(case["tree"]["records"]) == sorted(f"step_1/actor_update{s}/step0/rank0/dump.json"
                                                      for s in ("", ".1", ".2"))
    assert case["tree"]["records"]["step_1/actor_update.1/step0/rank0/dump.json"] > 0
    assert len(case["warnings"]) == 2
    assert case["warnings"][0].endswith("writes to " + case["warnings"][0].split("writes to ")[1])
    assert "actor_update.1 instead" in case["warnings"][0] and "actor_update.2 instead" in case["warnings"][1]


def test_stage_api_for_other_loops(cases):
    c, plain = cases
    case = c["loop"]
    assert case["results"] == [plain] * 6 and case["warnings"] == []
    assert sorted(case["tree"]["records"]) == [f"step_{s}/{stage}/step0/rank0/dump.json" for s in (1, 3)
                                               for stage in ("actor_compute_log_prob", "ref_compute_log_prob")]



def test_msprobe_is_switched_off_after_its_stop_failed(cases):
    """msprobe started and its stop() raised: the runtime switches collection off itself, on every
    release (8.x has no service._disable_dump_runtime(): runtime/compat.py does its work). Without
    that switch-off msprobe would go on collecting after the stage."""
    c, _ = cases
    for name in ("stop-raises", "stop-raises-strict"):
        assert c[name]["running_after"] == [False, False]
    assert c["stop-raises-unstopped"]["running_after"] == [True, True]
    assert c["baseline"]["running_after"] == [False, False]


def test_hook_failure_in_msprobe(cases, release):
    """msprobe's data processor raising inside a hook (a full disk). The stage runs on and returns
    its result either way. 26.x lets the error out of its collector: one warning, and collection
    stops at once for the rest of the stage (fewer records than with collection left running).
    8.x catches it in its own collector and goes on: the runtime never sees it."""
    c, plain = cases
    case = c["collect-raises"]
    assert case["call"] is None and case["results"] == [plain] * CALLS
    stopped = set(case["tree"]["records"].values())
    unstopped = set(c["collect-raises-unstopped"]["tree"]["records"].values())
    strict = c["collect-raises-strict"]
    if release in COLLECTOR_CATCHES:
        assert case["warnings"] == [] and strict["call"] is None and strict["ran"] == CALLS
        assert stopped == unstopped
    else:
        assert len(case["warnings"]) == 1
        assert "msprobe failed while collecting stage 'actor_update'" in case["warnings"][0]
        assert len(stopped) == 1 and len(unstopped) == 1 and 0 < min(stopped) < min(unstopped)
        assert strict["ran"] == 1 and strict["call"] == "OSError" and "injected" in strict["call_msg"]
    # afterwards msprobe collects in full again, and its dump has not grown
    after = c["after-collect-raises"]
    assert after["warnings"] == [] and after["results"] == [plain] * CALLS
    assert set(after["tree"]["records"].values()) == set(c["baseline"]["tree"]["records"].values())
