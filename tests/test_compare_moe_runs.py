"""Two training runs of a mixture-of-experts model (issue 35): transformers' Qwen3-MoE (8 experts, top 2,
fused experts: 3-D weights, an expert is an index) on a one-rank gloo group, plain, under FSDP1 and under
FSDP2 (tests/make_wrapper_dumps.py --arch qwen3_moe), at mix and L1, through this package's runtime.

Two identical runs differ in one record only: the fused experts invert their token permutation into a
buffer fresh from torch.empty_like (transformers/integrations/moe.py, grouped_mm_experts_forward) and msprobe
records it as `__setitem__`'s input. That record is a default ignore (compare/ignores.py); with it, the
wrappers are `same`, and one expert's weight changed is named in its layer's experts."""

from __future__ import annotations

import re

import pytest

import compare_cli
import make_cross_impl_dumps as X  # tests/ is on the path (conftest imports it the same way)
import make_wrapper_dumps
from verl_pdbg_conf.compare.ignores import TRANSFORMERS_MOE_INV_PERM

LAYER = 1  # the planted layer: expert X.MOE_EXPERT's down projection x1.05 on the FSDP2 side
RUNS = "plain,fsdp1,fsdp2,fsdp2-weight"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe-runs")
    make_wrapper_dumps.make_all(root, {out: ["--arch", "qwen3_moe", "--level", level, "--runs", runs, "--layer",
                                             str(LAYER)]
                                       for out, level, runs in (("mix", "mix", RUNS), ("L1", "L1", RUNS),
                                                                ("mix-again", "mix", "plain"))})
    return root


@pytest.mark.slow
def test_two_identical_runs_differ_only_in_the_fresh_buffer(dumps):
    """The evidence for the default ignore: without it, the only records that differ are that buffer's."""
    code, doc = compare_cli.run_json(dumps / "mix-again" / "plain", dumps / "mix" / "plain", "--no-default-ignores",
                                     "--top", "50")
    assert code == 1
    for p in doc["pairs"]:
        assert p["top"] and all(re.fullmatch(r"Tensor\.__setitem__\.\d+\.forward\.input\.0", n["name"]) and
                                n["module"].endswith("mlp.experts") for n in p["top"]), p["top"]
    code, doc = compare_cli.run_json(dumps / "mix-again" / "plain", dumps / "mix" / "plain")
    assert code == 0 and {p["status"] for p in doc["pairs"]} == {"same"}
    ignored = {i["pattern"]: i for i in doc["ignored"]}[TRANSFORMERS_MOE_INV_PERM]
    assert ignored["records"] >= X.LAYERS and ignored["default"]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["mix", "L1"])
@pytest.mark.parametrize("pair", [("fsdp2", "plain"), ("fsdp2", "fsdp1"), ("fsdp1", "plain")])
def test_moe_under_fsdp1_and_fsdp2_is_same(dumps, level, pair):
    code, doc = compare_cli.run_json(dumps / level / pair[0], dumps / level / pair[1])
    assert code == 0, [(p["stage"], p["status"], p["first_divergence"], p["coverage"]) for p in doc["pairs"]]
    assert {p["stage"] for p in doc["pairs"]} == set(X.STAGES)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["mix", "L1"])
def test_one_expert_changed_is_named_in_its_layer(dumps, level):
    code, doc = compare_cli.run_json(dumps / level / "fsdp2-weight", dumps / level / "fsdp1")
    assert code == 1
    for first in X.firsts_in_layer(doc, level, LAYER):
        if level == "mix":
            assert first["module"].endswith(f"model.layers.{LAYER}._fsdp_wrapped_module.mlp.experts") or \
                first["module"] == f"model.layers.{LAYER}.mlp.experts", first
