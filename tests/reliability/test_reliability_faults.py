"""Faults injected into real msprobe and full disks, during a 4-step training of a tiny actor/ref pair.

Every case runs steps 1..4 of the three stages into its own save_path, which already holds an
earlier run's dump; the fault strikes at step 3 (steps 1-2 for the constructor, which can only fail
before the process's debugger exists). Promises checked per case:
- non-strict: losses, stage outputs, parameters and optimizer state equal an unprofiled run
  (a process that never imported msprobe) bit for bit; one warning per stage that names the cause;
  step 4 dumps again, exactly what a fault-free run dumps;
- strict: the run stops at the fault with msprobe's own exception (type and message checked), with a
  note naming the stage and what happened;
- both: every file under save_path before the fault is byte-identical afterwards, and no dump.json
  holds a record its stage does not produce (no records carried over from another stage)."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow

JOBS = ("reference", "faults-statistics", "faults-tensor")
RELOCATED = "already holds a dump of"

# kind -> (config, fault steps, non-strict warning phrases, strict: exception type, message, errno in its causes)
CASES = {
    ("statistics", "construct"): ((1, 2), ("msprobe failed to start for stage",), "RuntimeError",
                                  r"^injected msprobe failure in PrecisionDebugger\(\)$", None),
    ("statistics", "start"): ((3,), ("msprobe failed to start for stage",), "RuntimeError",
                              r"^injected msprobe failure in PrecisionDebugger\.start$", None),
    ("statistics", "stop"): ((3,), ("msprobe failed to stop for stage",), "RuntimeError",
                             r"^injected msprobe failure in PrecisionDebugger\.stop$", None),
    ("statistics", "reset"): ((3,), ("msprobe reset_status failed after stage",
                                     "msprobe could not be reset before stage"), "RuntimeError",
                              r"^injected msprobe failure in service\.reset_status$", None),
    ("statistics", "collect"): ((3,), ("msprobe failed while collecting stage",), "RuntimeError",
                                r"^injected msprobe failure in BaseDataProcessor\.analyze_forward_output", None),
    ("statistics", "fsize"): ((3,), ("msprobe failed to stop for stage",), "RuntimeError",
                              r"^Save json file /\S+/step_3/actor_compute_log_prob\.1/step0/rank0/dump\.json failed\.$",
                              27),
    ("tensor", "collect"): ((3,), ("msprobe failed while collecting stage",), "RuntimeError",
                            r"^injected msprobe failure in BaseDataProcessor\.analyze_forward_output", None),
    ("tensor", "fsize"): ((3,), ("msprobe failed while collecting stage",), "RuntimeError",
                          r"^save pt file /\S+/step_3/actor_compute_log_prob\.1/step0/rank0/dump_tensor_data/"
                          r"\S+\.pt failed$", None),
    ("tensor", "diskfull"): ((3,), ("msprobe failed to start for stage",), "RuntimeError",
                             r"^Save json file /\S+/dump\.json failed\.$", 28),
    ("tensor", "nearfull"): ((3,), ("msprobe failed while collecting stage", "msprobe failed to start for stage",
                                    "msprobe failed to stop for stage"), "RuntimeError",
                             r"^(save pt file \S+\.pt failed|Save json file \S+ failed\.)$", None),
}
IDS = [f"{cfg}-{kind}" for cfg, kind in CASES]


@pytest.fixture(scope="module")
def runs(campaign):
    return {"reference": campaign.get("reference"), "statistics": campaign.get("faults-statistics"),
            "tensor": campaign.get("faults-tensor")}


def _case(runs, cfg, kind, strict):
    cases = runs[cfg]["cases"]
    name = kind + ("-strict" if strict else "")
    if name not in cases:
        reason = runs[cfg].get("tmpfs_unavailable")
        pytest.skip(f"{cfg}/{name} not run" + (f": tmpfs not mountable ({reason})" if reason else ""))
    return cases[name]


def _step(rel: str) -> int:
    return int(rel.split("/")[0].split("_")[1])


def _same_training(case, ref):
    assert case["raised"] is None, case["raised"]
    assert case["steps_done"] == 4
    assert case["losses"] == ref["losses"]
    assert case["outputs"] == ref["outputs"]
    assert case["params"] == ref["params"]


def test_reference_never_imported_msprobe(runs):
    assert runs["reference"]["msprobe_imported"] is False
    assert runs["reference"]["steps_done"] == 4


@pytest.mark.parametrize("cfg", ["statistics", "tensor"])
def test_unprofiled_path_unchanged_by_msprobe(runs, cfg):
    """The same training without a profiler, in the process where msprobe has wrapped torch's APIs."""
    for key in ("plain_before_msprobe", "plain_after_msprobe"):
        _same_training(runs[cfg][key], runs["reference"])


@pytest.mark.parametrize("cfg", ["statistics", "tensor"])
def test_baseline_profiled_equals_unprofiled(runs, cfg):
    case = runs[cfg]["cases"]["baseline"]
    _same_training(case, runs["reference"])
    assert all(RELOCATED in w for w in case["warnings"]), case["warnings"]
    dumps = case["dumps"]
    assert all(v is not None for v in dumps.values()), "every dump.json parses"
    assert sum(1 for v in dumps.values() if v) == 12
    assert len(dumps) == 2 + 12  # the earlier run's two, then 4 steps x 3 stages


def test_constructor_case_ran_before_the_debugger_existed(runs):
    assert runs["statistics"]["debugger_built"] is True  # built by the constructor case's recovery


@pytest.mark.parametrize("cfg,kind", CASES, ids=IDS)
def test_non_strict_training_unchanged(runs, cfg, kind):
    _same_training(_case(runs, cfg, kind, False), runs["reference"])


@pytest.mark.parametrize("cfg,kind", CASES, ids=IDS)
def test_non_strict_warns_once_per_stage(runs, cfg, kind):
    case = _case(runs, cfg, kind, False)
    phrases = CASES[cfg, kind][1]
    warned = [w for w in case["fault_warnings"] if RELOCATED not in w]
    assert 1 <= len(warned) <= 3, warned
    for w in warned:
        assert any(p in w for p in phrases), w
    stages = [re.search(r"stage '(\w+)'", w).group(1) for w in warned]
    assert len(stages) == len(set(stages))
    # after the fault: quiet again (apart from the runtime telling where it moved a dump)
    assert all(RELOCATED in w for w in case["warnings"]), case["warnings"]
    assert case["session_left_open"] is False


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("cfg,kind", CASES, ids=IDS)
def test_earlier_dumps_intact(runs, cfg, kind, strict):
    case = _case(runs, cfg, kind, strict)
    before = case["before_fault"]
    assert any(k.startswith("step_1/actor_update/step0/rank0/") for k in before)  # the earlier run's dump
    changed = sorted(k for k, v in before.items() if case["after"].get(k) != v)
    assert changed == [], "changed or deleted: %s" % changed


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("cfg,kind", CASES, ids=IDS)
def test_no_dump_mixes_stages(runs, cfg, kind, strict):
    """Outside the fault: exactly the fault-free dumps. At the fault: a dump is missing, unreadable
    (msprobe's write failed half-way) or a subset of its stage's records, never more."""
    case = _case(runs, cfg, kind, strict)
    base = runs[cfg]["cases"]["baseline"]["dumps"]
    fault_steps = CASES[cfg, kind][0]
    last = case["steps_done"]
    for rel, keys in case["dumps"].items():
        assert rel in base, f"dump in an unexpected place: {rel}"
        if _step(rel) in fault_steps:
            assert keys is None or set(keys) <= set(base[rel]), (rel, sorted(set(keys) - set(base[rel])))
        else:
            assert keys == base[rel], rel
    # every fault-free step that ran (step 4 after a non-strict fault: recovery) dumped all it should
    ran = {rel for rel in base if _step(rel) not in fault_steps and _step(rel) <= last}
    assert ran <= set(case["dumps"]), sorted(ran - set(case["dumps"]))


@pytest.mark.parametrize("cfg,kind", CASES, ids=IDS)
def test_strict_stops_with_msprobe_error(runs, cfg, kind):
    case = _case(runs, cfg, kind, True)
    fault_steps, _, exc_type, pattern, err = CASES[cfg, kind]
    raised = case["raised"]
    assert raised is not None and raised["step"] == min(fault_steps)
    assert case["steps_done"] == min(fault_steps) - 1
    assert raised["type"] == exc_type
    assert re.match(pattern, raised["msg"]), raised["msg"]
    if err is not None:
        assert err in [c["errno"] for c in raised["chain"]], raised["chain"]
    assert len(raised["notes"]) == 1
    note = raised["notes"][0]
    assert note.startswith("precision_debugger (strict: True): msprobe ")
    assert "stage 'actor_compute_log_prob'" in note  # the first stage of the step
    assert case["session_left_open"] is False
