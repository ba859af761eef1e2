"""Output that scales: a pair summarised per layer (nodes.layers_of), its plot and the HTML page with
the run overview, on synthetic analyses as large as a real 7B stage (500k nodes) and runs of many ranks.
The page renders the document only (report/document.py as_dict). The real-dump path of the same code is in
test_compare_runs.py and test_compare_ray.py."""

from __future__ import annotations

import json
import math
import re
import struct

import pytest

from verl_pdbg_conf.compare.nodes import MAX_LAYERS, SPAN, Analysis, Node, layer_label, layers_of
from verl_pdbg_conf.compare.report import document
from verl_pdbg_conf.compare.report.document import as_dict, layer_dict, pair_dict
from verl_pdbg_conf.compare.pairs import Comparison, Pair, RankDump
from verl_pdbg_conf.compare.options import CompareOptions

matplotlib = pytest.importorskip("matplotlib")

from verl_pdbg_conf.compare.report import runs_html as report_html  # noqa: E402

THRESHOLD = 1e-4


def node(order, module, value, direction="forward", name=None):
    name = name or f"Module.{module}.Linear.{direction}.0.output.0"
    return Node(order, order, name, direction, "output", name.rsplit(".output", 1)[0], module, value)


def big_analysis(n_layers=125, per_module=1000, first_layer=37, nan_layer=60) -> Analysis:
    """forward then backward over n_layers x 2 modules: n_layers * 4 * per_module nodes (500k by default).
    Noise ~1e-7 everywhere; from first_layer's mlp on (forward) and all of backward, 1 %; a NaN in
    nan_layer's backward self_attn. 500 runs of one module: merged two by two into MAX_LAYERS or fewer."""
    nodes = []
    for direction in ("forward", "backward"):
        order_layers = range(n_layers) if direction == "forward" else range(n_layers - 1, -1, -1)
        for i in order_layers:
            for part in ("self_attn", "mlp"):
                module = f"model.layers.{i}.{part}.proj"
                bad = direction == "backward" or i > first_layer or (i == first_layer and part == "mlp")
                for k in range(per_module):
                    v = 0.01 * (1 + k % 7) if bad else 1e-7 * (k % 5)
                    if direction == "backward" and i == nan_layer and part == "self_attn" and k == 3:
                        v = math.nan
                    nodes.append(node(len(nodes), module, v, direction))
    first = next(n for n in nodes if n.value and n.value > THRESHOLD)
    first.reason = "threshold"
    an = Analysis("statistics", first=first, top=[first])
    an.n_nodes = len(nodes)
    an.layers = layers_of(nodes, first)
    return an


def pair_of(an: Analysis, status="diverged") -> dict:
    """The analysis as the document holds a pair with its layers (what the page plots)."""
    key = ("step_1", "actor_update", "step0")
    p = Pair(RankDump(key, "rank0", "/t/x/dump.json"), RankDump(key, "rank0", "/g/x/dump.json"), 1, "actor_update", 0,
             status=status, analysis=an)
    return pair_dict(p, "NormRelativeErr", THRESHOLD, layers=True)


def test_layer_labels():
    assert layer_label("model.layers.3.mlp.down_proj") == "model.layers.3.mlp"
    assert layer_label("blocks.3.fc") == "blocks.3.fc"
    assert layer_label("lm_head") == "lm_head" and layer_label("") == "" and layer_label(None) is None


def test_layers_of_groups_runs_in_execution_order():
    nodes = [node(0, "embed", 0.0), node(1, "layers.0.mlp.up", 0.0), node(2, "layers.0.mlp.down", 2e-4),
             node(3, "layers.1.mlp.up", math.inf), node(4, "layers.0.mlp.up", 0.5, "backward")]
    first = nodes[2]
    layers = layers_of(nodes, first)
    assert [(lay.label, lay.first_order, lay.n_nodes) for lay in layers] == \
        [("embed", 0, 1), ("layers.0.mlp", 1, 2), ("layers.1.mlp", 3, 1), ("layers.0.mlp", 4, 1)]
    assert [lay.diverged for lay in layers] == [False, True, False, False]
    assert layers[1].worst == 2e-4 and layers[2].inf and layers[2].worst is None and layers[3].worst == 0.5
    # no module at all (L1): spans of SPAN consecutive nodes
    flat = [node(i, None, 0.0, name=f"Functional.linear.{i}.forward.output.0") for i in range(3 * SPAN)]
    assert [lay.label for lay in layers_of(flat, None)] == [f"nodes {k * SPAN}-{k * SPAN + SPAN - 1}" for k in range(3)]


def test_500k_nodes_stay_bounded_and_keep_their_marks(tmp_path):
    an = big_analysis()
    assert an.n_nodes == 500_000 and MAX_LAYERS // 2 <= len(an.layers) <= MAX_LAYERS
    assert sum(lay.n_nodes for lay in an.layers) == 500_000
    (div,) = [lay for lay in an.layers if lay.diverged]
    assert "model.layers.37.mlp" in div.label and div.first_order <= an.first.order < div.first_order + div.n_nodes
    nan = [lay for lay in an.layers if lay.nan]
    assert len(nan) == 1 and "model.layers.60" in nan[0].label
    # all the layers before the first divergence are below the threshold, the ones after it above
    before = [lay for lay in an.layers if lay.first_order + lay.n_nodes <= an.first.order]
    assert before and all(lay.worst < THRESHOLD for lay in before)
    summary = [layer_dict(lay) for lay in an.layers]
    assert len(repr(summary)) < 100_000  # a pair's summary.json is tens of kB, whatever the dump

    png = report_html.plot_layers(pair_of(an), "NormRelativeErr", THRESHOLD, "500k-node pair")
    (tmp_path / "plot500k.png").write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1100, 360) and len(png) < 300_000


def synthetic_run(steps=3, stages=("actor_compute_log_prob", "actor_update"), ranks=64, diverged_from=2):
    """A comparison of steps x stages x ranks pairs: step >= diverged_from diverges (1000-node pairs),
    one pair is an error, one a mismatch, one rank directory is in the golden run only."""
    cmp = Comparison("/t", "/g", "/o", CompareOptions(threshold=THRESHOLD))
    for step in range(1, steps + 1):
        for stage in stages:
            for r in range(ranks):
                key = (f"step_{step}", stage, "step0")
                side = RankDump(key, f"rank{r}", f"/t/{'/'.join(key)}/rank{r}/dump.json")
                p = Pair(side, RankDump(key, f"rank{r}", side.path.replace("/t/", "/g/")), step, stage, r)
                if step == steps and stage == stages[0] and r in (5, 6):
                    from verl_pdbg_conf.core.findings import Finding, Severity

                    p.status, rule, msg = (("error", "dump-empty", "dump.json is empty") if r == 5 else
                                           ("mismatch", "compare-mismatch", "collected differently (level L0 against L1)"))
                    p.findings = [Finding(rule, Severity.ERROR, msg, side.path, 1, 1, "")]
                else:
                    an = big_analysis(n_layers=10, per_module=25, first_layer=3 + r % 4, nan_layer=8) if step >= diverged_from \
                        else Analysis("statistics", n_nodes=500)
                    if an.first is None:
                        an.layers = []
                    p.analysis, p.status = an, ("diverged" if an.first else "same")
                cmp.pairs.append(p)
    key = (f"step_{steps}", stages[-1], "step0")
    cmp.only_in_golden.append(RankDump(key, f"rank{ranks}", f"/g/step_{steps}/{stages[-1]}/step0/rank{ranks}/dump.json"))
    return cmp


def test_html_overview_one_line_per_same_pair_and_bounded_plots(monkeypatch):
    monkeypatch.setattr(document, "MAX_PLOTS", 3)  # the bound, smaller: each plot costs a second
    cmp = synthetic_run()
    doc = as_dict(cmp)
    # the document holds the layers of the first MAX_PLOTS diverged pairs only, each bounded
    held = [p for p in doc["pairs"] if "layers" in p]
    assert [p["status"] for p in held] == ["diverged"] * 3 and all(0 < len(p["layers"]) <= MAX_LAYERS for p in held)
    assert held == [p for p in doc["pairs"] if p["status"] == "diverged"][:3]
    page = report_html.render(doc)
    n_same = sum(p.status == "same" for p in cmp.pairs)
    n_div = sum(p.status == "diverged" for p in cmp.pairs)
    assert n_same == 128 and n_div == 254
    # one overview row per (step, stage), a coloured cell per pair (and one for the rank in one run only)
    overview = page.split("<h2>Pairs</h2>")[0]
    assert overview.count("<tr><td>") == 6
    assert overview.count("class='cell'") == len(cmp.pairs) + 1 + 6  # + the legend's six (partial too)
    assert overview.count(report_html.COLOURS["diverged"]) == n_div + 1
    assert overview.count(report_html.COLOURS["mismatch"]) == 1 + 1
    assert "step_3/actor_update/step0/rank64: only in the golden run" in overview
    # 64 ranks: compact cells, details on hover: where the pair first diverged and its place in order
    assert re.search(r"title='step_2/actor_compute_log_prob/step0/rank0: first divergence Module\.model\.layers\.3\.mlp", overview)
    # "same" pairs: one line each, no plot; diverged: MAX_PLOTS plots, the rest one line
    assert page.count("<img ") == document.MAX_PLOTS
    assert page.count("none diverges") == n_same
    assert page.count("(plotted: the first 3 diverged pairs)") == n_div - document.MAX_PLOTS
    assert "dump-empty: dump.json is empty" in page and "compare-mismatch: collected differently" in page
    assert "<script" not in page
    assert len(page) < 8_000_000


def test_html_small_run_names_the_layer_in_each_cell():
    cmp = synthetic_run(steps=2, ranks=2)
    doc = as_dict(cmp)
    page = report_html.render(doc)
    overview = page.split("<h2>Pairs</h2>")[0]
    assert ">model.layers.3.mlp @" in overview and "<th>rank0</th><th>rank1</th><th>rank2</th>" in overview
    assert page.count("<img ") == 4  # step 2: 2 stages x 2 ranks
    # the document alone makes the page: the same page from it once written as JSON and read back
    assert report_html.render(json.loads(json.dumps(doc))) == page


def test_pair_summary_is_bounded_whatever_the_layers():
    """The engine may hand back thousands of layers (one per module); a pair's summary.json folds them."""
    import json

    from verl_pdbg_conf.compare.nodes import LayerStat

    layers = [LayerStat(f"model.layers.{i // 8}.part{i % 8}", i * 100, 100, 1e-7 * (i % 3)) for i in range(4096)]
    layers[2500].diverged, layers[3000].nan = True, True
    an = Analysis("statistics", first=node(250_000, "model.layers.312.part4", 0.01), layers=layers, n_nodes=409_600)
    key = ("step_1", "actor_update", "step0")
    p = Pair(RankDump(key, "rank0", "/t/x/dump.json"), RankDump(key, "rank0", "/g/x/dump.json"), 1, "actor_update", 0,
             status="diverged", analysis=an)
    d = pair_dict(p, "NormRelativeErr", THRESHOLD, layers=True)
    assert len(d["layers"]) <= MAX_LAYERS and sum(lay["nodes"] for lay in d["layers"]) == 409_600
    assert sum(lay["diverged"] for lay in d["layers"]) == 1 and sum(lay["nan"] for lay in d["layers"]) == 1
    assert "model.layers.312" in next(lay["label"] for lay in d["layers"] if lay["diverged"])
    assert len(json.dumps(d)) < 100_000


def test_a_layer_whose_worst_is_inf_is_plotted():
    """A relative error of inf (golden norm 0: the engine keeps it as a layer's worst, as two ranks of one
    FSDP2 run gave) is a full-height bar marked Inf, not a matplotlib error on the log axis."""
    nodes = [node(i, f"model.layers.{i // 4}.mlp", 1e-7) for i in range(16)]
    nodes[9].value = math.inf
    nodes[9].reason = "threshold"
    an = Analysis("statistics", first=nodes[9], top=[nodes[9]])
    an.n_nodes = len(nodes)
    an.layers = layers_of(nodes, nodes[9])
    for lay in an.layers:  # as the engine's LayerStat has it: the value itself, no inf flag
        lay.inf = False
        if "layers.2" in lay.label:
            lay.worst = math.inf
    p = pair_of(an)
    assert [lay["worst"] for lay in p["layers"] if "layers.2" in lay["label"]] == ["inf"]  # as the JSON has it
    png = report_html.plot_layers(p, "NormRelativeErr", THRESHOLD)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_labels_are_apart_and_name_the_first_divergences_layer():
    """The run chart's x labels: layers close in execution order get one label, not overlapping ones."""
    from verl_pdbg_conf.compare.nodes import LayerStat
    from verl_pdbg_conf.compare.report.runs_html import _ticks

    layers = [LayerStat(f"layers.{i}", order) for i, order in enumerate([0, 3, 5, 8, 40, 41, 42, 90, 200, 230])]
    layers[5].diverged = True
    layers = [layer_dict(lay) for lay in layers]
    ticks = _ticks(layers, 233, 8)
    orders = [t["first_order"] for t in ticks]
    assert layers[5] in ticks and len(ticks) >= 4
    assert all(b - a >= 233 / 8 for a, b in zip(orders, orders[1:]))


def test_the_document_says_why_bars_left_of_the_first_divergence_are_not_its_cause():
    """Layers before the first divergence that pass the threshold, in the document (the page says them): one
    whose worst node ran after it (a layer spans its backward nodes too), one whose worst ran before it."""
    from verl_pdbg_conf.compare.nodes import LayerStat

    first = node(2, "layers.2.mlp", 1e-2)
    an = Analysis("statistics", first=first, top=[first], n_nodes=4,
                  layers=[LayerStat("layers.0.mlp", 0, 1, 2e-4, 0), LayerStat("layers.1.mlp", 1, 2, 5e-2, 3),
                          LayerStat("layers.2.mlp", 2, 1, 1e-2, 2, diverged=True), LayerStat("lm_head", 3, 1, 1e-7, 3)])
    p = pair_of(an)
    assert p["left_of_first"] == {"after": ["layers.1.mlp"], "before": ["layers.0.mlp"]}
    said = report_html.left_of_first(p)
    assert "layers.1.mlp: the worst node ran after the first divergence (node 2)" in said
    assert "layers.0.mlp: ran before it with its inputs already as far off" in said
    an.layers[0].worst = an.layers[1].worst = 1e-5  # under the threshold: nothing to say
    p = pair_of(an)
    assert p["left_of_first"] is None and report_html.left_of_first(p) == ""
