"""The cross-implementation pairs (make_cross_impl_dumps.py, fixture cross_impl_pairs) hold what they claim:
each target runs other ops than the golden, yet module outputs agree where nothing was planted and first
differ in the planted layer where something was. So a compare that gets them wrong is the compare's fault."""

from __future__ import annotations

import glob
import json
import os
import re

import pytest

pytestmark = pytest.mark.slow


def records(run: str, stage: str) -> dict:
    (path,) = glob.glob(os.path.join(run, "step_1", stage, "step0", "*", "dump.json"))
    with open(path) as f:
        return json.load(f)["data"]


def api_names(data: dict) -> set[str]:
    return {n.rsplit(".", 2)[0] if n.endswith(("forward", "backward")) else n for n in data}


def first_module_difference(target: dict, golden: dict, tol: float) -> str | None:
    """The first Module.*.forward record (golden's order) whose first output's Norm differs by > tol."""
    for name, rec in golden.items():
        if not (name.startswith("Module.") and ".forward." in name) or name not in target:
            continue
        a, b = rec.get("output") or [None], target[name].get("output") or [None]
        a, b = a[0], b[0]
        if isinstance(a, dict) and isinstance(b, dict) and a.get("Norm"):
            if abs(a["Norm"] - b["Norm"]) / abs(a["Norm"]) > tol:
                return name
    return None


def combine_split(target: dict, golden: dict) -> dict:
    """A run whose forward was 2 calls of batch 1: each module's 2 records as golden's one of batch 2 (Norm
    as the root of the summed squares); a tensor of golden's own shape (the rotary cos/sin, batch 1 on both
    sides) is not split, so the first call's stands."""
    out = {}
    for name, rec in target.items():
        m = re.fullmatch(r"(Module\..*\.forward\.)(\d+)", name)
        if not m or not rec.get("output") or not isinstance(rec["output"][0], dict):
            continue
        key = f"{m.group(1)}{int(m.group(2)) // 2}"
        part, whole = rec["output"][0], ((golden.get(key) or {}).get("output") or [{}])[0]
        if key in out and isinstance(whole, dict) and part.get("shape") != whole.get("shape"):
            prev = out[key]["output"][0]["Norm"]
            out[key] = {"output": [{"Norm": (prev ** 2 + (part.get("Norm") or 0.0) ** 2) ** 0.5}]}
        elif key not in out:
            out[key] = {"output": [{"Norm": part.get("Norm") or 0.0}]}
    return out


def by_run(pairs: list[dict], name: str) -> dict:
    (p,) = [p for p in pairs if p["name"] == name]
    return p


def test_every_pair_has_both_stages(cross_impl_pairs):
    assert len(cross_impl_pairs) >= 10
    for p in cross_impl_pairs:
        for stage in ("actor_compute_log_prob", "actor_update"):
            assert records(p["target"], stage) and records(p["golden"], stage), p["name"]
        assert (p["expect_layer"] is None) == (p["plant"] is None)


def test_module_outputs_agree_until_the_planted_layer(cross_impl_pairs):
    checked = 0
    for p in cross_impl_pairs:
        if p["level"] != "mix" or p["impl"] == "bf16":
            continue
        target, golden = (records(p[k], "actor_compute_log_prob") for k in ("target", "golden"))
        if p["impl"] == "split":
            target = combine_split(target, golden)
        first = first_module_difference(target, golden, 1e-5)
        if p["expect_layer"] is None:
            assert first is None, (p["name"], first)
        else:
            assert first is not None and f"layers.{p['expect_layer']}." in first, (p["name"], first)
        checked += 1
    assert checked >= 4


def test_targets_run_other_ops_than_golden(cross_impl_pairs):
    sdpa = by_run(cross_impl_pairs, "qwen2-mix-statistics/sdpa")
    t, g = (api_names(records(sdpa[k], "actor_compute_log_prob")) for k in ("target", "golden"))
    assert "Functional.scaled_dot_product_attention" in t and "Functional.softmax" in g
    assert "Functional.scaled_dot_product_attention" not in g and "Functional.softmax" not in t
    # the fused swiglu: one custom op msprobe records, forward and backward, where golden runs silu and mul
    fused = records(by_run(cross_impl_pairs, "qwen2-L1-statistics/swiglu")["target"], "actor_update")
    assert sum(bool(re.fullmatch(r"pdbg_cpu\.swiglu\.\d+\.forward", n)) for n in fused) == 6
    assert any(n.startswith("pdbg_cpu.swiglu.") and n.endswith(".backward") for n in fused)
    assert not any(n.startswith("Functional.silu.") for n in fused)
    swap = by_run(cross_impl_pairs, "qwen2-L1-statistics/swap1-weight")
    swapped = [n for n in records(swap["target"], "actor_compute_log_prob") if n.startswith("pdbg_cpu.swiglu.")]
    assert len(swapped) == 1 and swap["swap_layer"] != swap["expect_layer"]


def test_split_forward_is_two_calls_of_batch_one(cross_impl_pairs):
    p = by_run(cross_impl_pairs, "qwen2-mix-statistics/split")
    emb = {k: [r for n, r in records(p[k], "actor_compute_log_prob").items()
               if n.startswith("Functional.embedding.")] for k in ("target", "golden")}
    assert [r["output"][0]["shape"][0] for r in emb["target"]] == [1, 1]
    assert [r["output"][0]["shape"][0] for r in emb["golden"]] == [2]
    # actor_update is not split: the same calls on both sides
    t, g = (records(p[k], "actor_update") for k in ("target", "golden"))
    assert list(t) == list(g)


def test_bf16_and_tensor_runs(cross_impl_pairs):
    bf = by_run(cross_impl_pairs, "qwen2-mix-statistics/bf16-weight")
    out = records(bf["target"], "actor_compute_log_prob")["Module.model.layers.0.mlp.down_proj.Linear.forward.0"]
    assert out["output"][0]["dtype"] == "torch.bfloat16" and bf["dtype_aware"]
    tensor = by_run(cross_impl_pairs, "qwen2-mix-tensor/sdpa-weight")
    assert glob.glob(os.path.join(tensor["target"], "step_1", "actor_update", "step0", "*", "dump_tensor_data", "*.pt"))
