"""Two processes profiling into one save_path at the same time (tensor mode, 3 steps x 3 stages each).

- same-rank: each is rank 0 of its own gloo group (two jobs, or a rerun started while the first run
  still writes): both would pick `step_N/<stage>/step0/rank0`.
- two-ranks: ranks 0 and 1 of one 2-process group, as verl profiles every rank of a role.

The processes start their steps together (file barrier) and dwell 0.15 s between choosing a directory
and letting msprobe write into it. Their batch sizes (4 and 6) and data differ, so a dump.json or
tensor file holding the other process's data shows. Promises: no collision (each session has a
directory of its own), nothing lost (18 whole dumps), nothing mixed (every record's tensor file is
in its own dump_tensor_data with the recorded shape and max, every dump's batch is its writer's)."""

from __future__ import annotations

import os

import pytest

from reliability_helpers import check_rank_dir, rank_dirs

pytestmark = pytest.mark.slow

JOBS = ("same-rank", "two-ranks")
MODES = ("same-rank", "two-ranks")
RELOCATED = "already holds a dump of"


@pytest.fixture(scope="module")
def runs(campaign):
    return {mode: campaign.get(mode) for mode in MODES}


def _sessions(writer):
    """(directory msprobe's rank dir is in, relative to save_path) of each of the writer's sessions."""
    return [os.path.join(d, "step0", f"rank{writer['rank']}") for _, _, d in writer["wrote"]]


@pytest.mark.parametrize("mode", MODES)
def test_writers_ran_clean(runs, mode):
    for w in runs[mode]["writers"]:
        assert w["raised"] is None and w["steps_done"] == 3
        assert len(w["wrote"]) == 9 and all(d is not None for _, _, d in w["wrote"])
        assert w["times"]["released"] < w["times"]["done"]


@pytest.mark.parametrize("mode", MODES)
def test_no_collision(runs, mode):
    a, b = (set(_sessions(w)) for w in runs[mode]["writers"])
    assert len(a) == len(b) == 9
    assert not a & b
    if mode == "two-ranks":  # same stage directories, one rank dir each: nobody pushed aside
        assert {os.path.dirname(os.path.dirname(p)) for p in a} == {os.path.dirname(os.path.dirname(p)) for p in b}
        assert all(RELOCATED not in m for w in runs[mode]["writers"] for m in w["warnings"])
    else:  # they did contend: one of them moved to `<stage>.1` and said so
        moved = [m for w in runs[mode]["writers"] for m in w["warnings"] if RELOCATED in m]
        assert moved


@pytest.mark.parametrize("mode", MODES)
def test_nothing_lost(runs, mode):
    rec = runs[mode]
    found = rank_dirs(rec["out"])
    expected = sorted(p for w in rec["writers"] for p in _sessions(w))
    assert found == expected
    assert all(keys for keys in rec["dumps"].values())  # 18 dump.json, all parse, none empty
    assert len(rec["dumps"]) == 18


@pytest.mark.parametrize("mode", MODES)
def test_nothing_mixed(runs, mode):
    rec = runs[mode]
    records = {}
    for w in rec["writers"]:
        for (step, stage, _), rank_dir in zip(w["wrote"], _sessions(w)):
            check = check_rank_dir(os.path.join(rec["out"], rank_dir))
            assert check["problems"] == [], (rank_dir, check["problems"])
            assert check["batch"] == w["batch"], rank_dir
            records.setdefault((step, stage), set()).add(check["records"])
    assert all(len(n) == 1 for n in records.values()), records  # both writers' dumps of a stage alike
