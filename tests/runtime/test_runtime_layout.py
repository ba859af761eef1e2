"""The guide's "Output layout" for two steps x three stages, at L0 and L1, statistics and tensor,
on real msprobe (each release in RELEASES); and dump.json not growing from stage to stage."""

from __future__ import annotations

import os

import pytest

from runtime_helpers import LACK_DISABLE_DUMP_RUNTIME, Scenario, adaptation_notes, config, release_params

pytestmark = pytest.mark.slow

STAGES = ("actor_compute_log_prob", "actor_update", "ref_compute_log_prob")
CONFIGS = ("l0_statistics", "l1_statistics", "l0_tensor", "l1_tensor")


@pytest.fixture(scope="module", params=release_params())
def release(request):
    return request.param


@pytest.fixture(scope="module")
def runs(module_tmp, release, release_python):
    """All four configurations at once: one process each (msprobe's debugger is a singleton)."""
    python = release_python(release)
    base = os.path.join(module_tmp, release)
    os.makedirs(base)
    started = {c: (Scenario(base, "layout", config(c), os.path.join(base, c), tag=c, python=python),
                   os.path.join(base, c)) for c in CONFIGS}
    return {c: (s.result(), out) for c, (s, out) in started.items()}


def _entries(path):
    return sorted(os.listdir(path))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_exact_tree(runs, cfg):
    result, out = runs[cfg]
    assert _entries(out) == ["step_1", "step_2"]
    tensor = cfg.endswith("tensor")
    tensor_files = set()
    for step in ("step_1", "step_2"):
        assert _entries(os.path.join(out, step)) == list(STAGES)
        for stage in STAGES:
            assert _entries(os.path.join(out, step, stage)) == ["step0"]
            assert _entries(os.path.join(out, step, stage, "step0")) == ["rank0"]
            rank_dir = os.path.join(out, step, stage, "step0", "rank0")
            expected = ["construct.json", "dump.json", "stack.json"] + (["dump_tensor_data"] if tensor else [])
            if tensor and (stage.endswith("_log_prob") or stage == "actor_update"):  # its forwards' token ids
                expected.append("tokens.json")
            assert _entries(rank_dir) == sorted(expected)
            if tensor:
                names = frozenset(_entries(os.path.join(rank_dir, "dump_tensor_data")))
                assert names and all(n.endswith(".pt") for n in names)
                tensor_files.add(names)
    assert len(tensor_files) <= 1  # every stage ran the same computation: the same tensors


@pytest.mark.parametrize("cfg", CONFIGS)
def test_dump_json_does_not_grow(runs, cfg):
    result, _ = runs[cfg]
    dumps = {k: v for k, v in result["tree"]["files"].items() if k.endswith("/dump.json")}
    records = result["tree"]["records"]
    assert len(dumps) == 6
    assert len(set(records.values())) == 1 and min(records.values()) > 0
    # identical stages give identical dump.json sizes; in tensor mode dump.json also names its
    # dump_tensor_data dir once, so sizes differ exactly by the length of the stage's name
    stage_of = {k: k.split("/")[1] for k in dumps}
    tensor = cfg.endswith("tensor")
    normalized = {size - (len(stage_of[k]) if tensor else 0) for k, size in dumps.items()}
    assert len(normalized) == 1, dumps


@pytest.mark.parametrize("cfg", CONFIGS)
def test_stage_results_unchanged_and_quiet(runs, cfg, release):
    result, _ = runs[cfg]
    assert result["msprobe"] == release
    assert result["results"] == result["plain"]
    notes, others = adaptation_notes(result["warnings"], release)
    assert others == []
    # a release without service._disable_dump_runtime() is named once, with what is done instead
    assert len(notes) == (release in LACK_DISABLE_DUMP_RUNTIME)
    assert all("Runtime.is_running" in n for n in notes)
