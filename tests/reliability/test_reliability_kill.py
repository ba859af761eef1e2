"""A process SIGKILLed in the middle of a dump, then the run again into the same save_path.

Two victims write one save_path (tensor mode): one is killed once msprobe has started writing
step 2's actor_update tensors (the stage hangs after its forward pass), the other while msprobe's
final dump.json of step 3's actor_update is half written. The rerun trains steps 1-3 again. Promises:
nothing that was on disk before the rerun is changed or deleted; the rerun's dumps land beside the
partial ones, are whole, and the runtime names each directory it moved to; training is unaffected."""

from __future__ import annotations

import os

import pytest

from reliability_helpers import check_rank_dir

pytestmark = pytest.mark.slow

JOBS = ("reference", "kill-rerun")


@pytest.fixture(scope="module")
def run(campaign):
    return campaign.get("kill-rerun"), campaign.get("reference")


def test_victims_were_killed_mid_dump(run):
    rec, _ = run
    assert rec["stage_killed_mid_dump"] and rec["json_killed_mid_write"]
    assert rec["victim_exit"] == [-9, -9]
    before = rec["dumps_before"]
    assert before["step_3/actor_update/step0/rank0/dump.json"] is None  # half-written: does not parse
    partial = "step_2/actor_update/step0/rank0/"
    assert before[partial + "dump.json"] == []  # msprobe writes records only at stop()
    assert any(k.startswith(partial + "dump_tensor_data/") for k in rec["before"])
    # the complete dumps of the victims' earlier stages
    assert len(before["step_1/actor_update/step0/rank0/dump.json"]) > 0


def test_nothing_earlier_changed_or_deleted(run):
    rec, _ = run
    changed = sorted(k for k, v in rec["before"].items() if rec["after"].get(k) != v)
    assert changed == []


def test_rerun_lands_beside_partial_dumps(run):
    rec, _ = run
    wrote = rec["rerun"]["wrote"]
    assert len(wrote) == 9 and all(d is not None for _, _, d in wrote)
    assert len({d for _, _, d in wrote}) == 9
    old_stage_dirs = {"/".join(k.split("/")[:2]) for k in rec["before"]}
    assert not {d for _, _, d in wrote} & old_stage_dirs
    new_files = set(rec["after"]) - set(rec["before"])
    assert new_files and all("/".join(f.split("/")[:2]) in {d for _, _, d in wrote} for f in new_files)


def test_rerun_dumps_are_whole(run):
    rec, _ = run
    for _, _, d in rec["rerun"]["wrote"]:
        check = check_rank_dir(os.path.join(rec["out"], d, "step0", "rank0"))
        assert check["problems"] == [] and check["records"] > 0 and check["batch"] == 4, (d, check)


def test_rerun_says_where_it_wrote(run):
    rec, _ = run
    warnings = rec["rerun"]["warnings"]
    for _, _, d in rec["rerun"]["wrote"]:
        path = os.path.join(rec["out"], d)
        base = path.rsplit(".", 1)[0]
        assert any(w.endswith(f"{base} already holds a dump of rank0; this session writes to {path} instead")
                   for w in warnings), d


def test_rerun_training_unchanged(run):
    rec, ref = run
    rerun = rec["rerun"]
    assert rerun["raised"] is None and rerun["steps_done"] == 3
    assert rerun["losses"] == ref["losses"][:3] and rerun["outputs"] == ref["outputs"][:3]
