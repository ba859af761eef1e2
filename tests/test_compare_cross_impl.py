"""The engine on real cross-implementation pairs (make_cross_impl_dumps.py, fixture cross_impl_pairs: small
Qwen2/Llama models, eager fp32 golden against sdpa, F.rms_norm, a fused SwiGLU, bf16, a split forward, one
layer swapped; some with a change planted in a date-seeded layer K), at mix and L1: no divergence where
nothing was planted, layer K named where something was; structure differences said once, never a
divergence; the split said; the error per layer and, in the tensor task, where in the tensor it sits."""

from __future__ import annotations

import re

import pytest

from verl_pdbg_conf.compare.modes import as_dict, compare_runs
from verl_pdbg_conf.compare.verdict import ExitCode
from verl_pdbg_conf.compare.options import CompareOptions

pytestmark = pytest.mark.slow
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def named_layer(pair: dict, first: dict):
    """The layer a first divergence names: JSON `layer` at L1, the module path's layers.K at mix."""
    if pair["level"] == "L1":
        return first.get("layer")
    m = LAYER.search(first.get("module") or "")
    return int(m.group(1)) if m else None


def compared(pair: dict):
    cmp = compare_runs(pair["target"], pair["golden"], CompareOptions(jobs=1, dtype_aware=pair["dtype_aware"]))
    return cmp, as_dict(cmp)


def test_every_verdict_is_right(cross_impl_pairs):
    wrong = []
    for pair in cross_impl_pairs:
        cmp, doc = compared(pair)
        firsts = [p["first_divergence"] for p in doc["pairs"]]
        assert len(firsts) == 2, pair["name"]  # both stages compared
        if pair["expect_layer"] is None:
            if any(firsts) or cmp.exit_code != ExitCode.SAME:
                wrong.append((pair["name"], [f and f["name"] for f in firsts]))
        elif cmp.exit_code != ExitCode.DIVERGED or any(not f or named_layer(pair, f) != pair["expect_layer"]
                                                   for f in firsts):
            wrong.append((pair["name"], pair["expect_layer"], [f and (f["name"], f.get("layer"), f.get("module"))
                                                              for f in firsts]))
    assert not wrong, wrong


def by_name(pairs, name):
    (p,) = [p for p in pairs if p["name"] == name]
    return p


def test_sdpa_against_eager_is_a_structure_difference_said_once(cross_impl_pairs):
    cmp, doc = compared(by_name(cross_impl_pairs, "qwen2-mix-statistics/sdpa"))
    assert doc["pairs"] and all(p["status"] == "same" for p in doc["pairs"])
    for p in cmp.pairs:
        said = [f.message for f in p.findings if f.rule == "compare-structure"]
        attn = [m for m in said if m.split(": ", 1)[1].startswith("model.layers.*.self_attn: target runs "
                                                                  "scaled_dot_product_attention where golden runs ")]
        assert len(attn) == 1 and "matmul" in attn[0] and "softmax" in attn[0] and "6 layers" in attn[0], said


def test_planted_layer_is_where_the_error_is_introduced(cross_impl_pairs):
    """The first divergence received (almost) nothing from its inputs, and the error per layer shows the
    jump: layers before K agree forward, layer K is marked introduced; the text and the plot show it."""
    from verl_pdbg_conf.compare.report import runs_html as report_html
    from verl_pdbg_conf.compare.report.runs_text import render_text

    pair = by_name(cross_impl_pairs, "qwen2-mix-statistics/sdpa-weight")
    k = pair["expect_layer"]
    cmp, doc = compared(pair)
    text = render_text(doc)
    lines = [ln for ln in text.splitlines() if ln.startswith("error per layer, forward")]
    assert lines and all(re.search(rf"(: | \| ){k} [0-9.e+-]+% <- introduced", ln) for ln in lines), text
    if not report_html.matplotlib_missing():
        png = report_html.plot_layers(doc["pairs"][0], doc["metric"], doc["threshold"])
        assert png.startswith(b"\x89PNG")
    for p in doc["pairs"]:
        first = p["first_divergence"]
        assert first["received"] < 1e-5 < first["value"], first
        lays = {lay["layer"]: lay for lay in p["layer_errors"]}
        assert lays[k]["introduced"] and not any(lay["introduced"] for j, lay in lays.items() if j != k)
        assert all(lays[j]["worst"] < 1e-5 for j in range(k)), lays


def test_bf16_rounding_is_judged_and_said(cross_impl_pairs):
    pair = by_name(cross_impl_pairs, "qwen2-mix-statistics/bf16-weight")
    cmp, doc = compared(pair)
    for p in cmp.pairs:
        said = [f.message for f in p.findings if f.rule == "compare-dtype"]
        assert any("--dtype-aware: threshold 0.00781" in m and "more than 4x the error it received" in m
                   for m in said), said


def test_split_forward_is_combined_and_said(cross_impl_pairs):
    cmp, doc = compared(by_name(cross_impl_pairs, "qwen2-mix-statistics/split"))
    assert doc["pairs"] and all(p["first_divergence"] is None for p in doc["pairs"])
    (fwd,) = [p for p in cmp.pairs if p.stage == "actor_compute_log_prob"]
    (said,) = [f.message for f in fwd.findings if f.rule == "compare-split"]
    assert "the target ran 2 calls of batch 1, the golden 1 call of batch 2" in said and "combined" in said


def test_tensor_task_says_where_in_the_tensor(cross_impl_pairs):
    pair = by_name(cross_impl_pairs, "qwen2-mix-statistics/sdpa-weight".replace("statistics", "tensor"))
    cmp, doc = compared(pair)
    for p in doc["pairs"]:
        where = p["first_divergence"]["in_tensor"]
        assert 0 < where["beyond"] <= where["elements"] and 0 < where["share"] <= 1 and where["rows"]
    assert any(f.rule == "compare-tensor" and "elements" in f.message for p in cmp.pairs for f in p.findings)


@pytest.mark.parametrize("name", ["qwen2-L1-statistics/swap1-weight", "qwen2-L1-statistics/same-weight"])
def test_l1_layer_is_the_models_layer(cross_impl_pairs, name):
    pair = by_name(cross_impl_pairs, name)
    _cmp, doc = compared(pair)
    for p in doc["pairs"]:
        first = p["first_divergence"]
        assert first["layer"] == pair["expect_layer"] < pair["layers"] and f"layer {first['layer']}" in first["where"]
        assert [lay["layer"] for lay in p["layer_errors"]] == list(range(pair["layers"]))


def test_msprobe_csv_still_runs_beside(cross_impl_pairs, tmp_path):
    """msprobe's own compare (--msprobe-csv) on a cross-implementation pair: its CSV is written; the verdict
    stays the engine's (msprobe pairs by name and marks rows of the shifted counters as errors)."""
    pair = by_name(cross_impl_pairs, "qwen2-mix-statistics/sdpa-weight")
    cmp = compare_runs(pair["target"], pair["golden"], CompareOptions(out_dir=str(tmp_path), jobs=1, msprobe_csv="all"))
    assert all(p.result_file and p.status == "diverged" for p in cmp.pairs), [p.findings for p in cmp.pairs]
