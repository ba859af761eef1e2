"""A comparison as data: per pair (its first divergence, top nodes, counts, per-layer summary and error per
model layer; the rollout compare's, per request and token) and for the whole; summary.json files written
under the output directory. Every report renders this document only, the HTML page included: what a plot
needs is built here, bounded (MAX_LAYERS bars per pair, for at most MAX_PLOTS pairs in the whole)."""

from __future__ import annotations

import json
import os

from verl_pdbg_conf.compare.ignores import DEFAULT_IGNORES
from verl_pdbg_conf.compare.output_paths import SUMMARY, marked_json
from verl_pdbg_conf.compare.nodes import (MAX_LAYERS, Analysis, LayerStat, RequestSummary, TokenPoint, TokenSections,
                                          TokenSummary, fold_layers, json_number, layer_label, layers_of)
from verl_pdbg_conf.compare.options import ROLLOUT, ROLLOUT_METRIC
from verl_pdbg_conf.compare.pairs import Comparison, Pair, RankDump, layout_of, pair_dir, rank_number
from verl_pdbg_conf.compare.verdict import Status

# The whole document holds the layers of its first MAX_PLOTS diverged pairs (the page plots them); every
# pair's own summary.json (-o) holds its layers, whatever its status.
MAX_PLOTS = 50


def side_dict(s: RankDump) -> dict:
    step, stage = layout_of(s.path)
    return {"step": step, "stage": stage, "rank": rank_number(s.rank_dir), "rank_dir": s.rank_dir,
            "path": s.path, "key": "/".join(s.key), "label": s.label}


def layer_dict(layer: LayerStat) -> dict:
    return {"label": layer.label, "first_order": layer.first_order, "nodes": layer.n_nodes,
            "worst": json_number(layer.worst), "worst_order": layer.worst_order, "nan": layer.nan, "inf": layer.inf,
            "diverged": layer.diverged}


def pair_layers(an: Analysis) -> list[LayerStat]:
    """The analysis' layers (the engine's), or made from its nodes (a small pair's), at most MAX_LAYERS."""
    return fold_layers(an.layers or (layers_of(an.nodes, an.first) if an.nodes else []), MAX_LAYERS)


def first_layer(an: Analysis | None) -> str | None:
    """Where the first divergence is, short: its layer's label, else its module's layer, else its call site
    ("" when none is known); None without a first divergence."""
    if an is None or an.first is None:
        return None
    f = an.first
    lay = next((lay for lay in an.layers if lay.diverged), None)
    return (lay.label if lay else "") or layer_label(f.module) or f.where or ""


def left_of_first(layers: list[LayerStat], first, threshold: float) -> dict | None:
    """The layers before the first divergence whose worst passes the threshold, by why they are not its cause:
    "after", their worst node ran after the first divergence (a layer spans its nodes in every mini-batch,
    backward too, which carry it); "before", it ran before with its inputs already as far off (rounding
    carried in). None where there is none."""
    if first is None:
        return None
    left = [lay for lay in layers if lay.first_order < first.order and not lay.diverged and lay.worst is not None
            and lay.worst > threshold]
    if not left:
        return None
    after = [lay.label for lay in left if lay.worst_order is not None and lay.worst_order > first.order]
    return {"after": after, "before": [lay.label for lay in left if lay.label not in after]}


def pair_dict(p: Pair, metric: str, threshold: float, layers: bool = False) -> dict:
    """One pair as data, bounded whatever the dump's size: its first divergence, top nodes and counts;
    with `layers`, its per-layer summary (at most MAX_LAYERS entries) and the layers before the first
    divergence that pass `threshold` (left_of_first)."""
    an = p.analysis
    d = {
        "step": p.step, "stage": p.stage, "rank": p.rank,
        "rank_dir": {"target": p.target.rank_dir, "golden": p.golden.rank_dir},
        "key": "/".join(p.target.key), "rank_label": p.rank_label,
        "status": str(p.status),
        "reason": str(p.reason) if p.reason else None,
        "first_divergence": an.first.as_dict(metric) if an and an.first else None,
        "first_layer": first_layer(an),
        "top": [n.as_dict(metric) for n in an.top] if an else [],
        "result_file": p.result_file,
        "task": an.task if an else None,
        "nodes": an.n_nodes if an else 0,
        "minibatches": an.minibatches if an else None,
        "ignored": {k: v for k, v in an.ignored.items() if v} if an else {},
        "both_nonfinite": an.both_nonfinite.as_dict(metric) if an and an.both_nonfinite else None,
        "coverage": an.coverage if an else None,
        "layer_errors": [dict(lay, worst=json_number(lay["worst"]), worst_backward=json_number(lay["worst_backward"]))
                         for lay in an.by_layer[:MAX_LAYERS]] if an else [],
        "target": p.target.path, "golden": p.golden.path,
        "findings": [f.to_dict() for f in p.findings],
    }
    if p.ran_on:
        d["ran_on"] = p.ran_on
    if layers:
        lays = pair_layers(an) if an else []
        d["layers"] = [layer_dict(lay) for lay in lays]
        d["left_of_first"] = left_of_first(lays, an.first, threshold) if an else None
    return d


def _point_dict(t: TokenPoint | None) -> dict | None:
    return t.as_dict(ROLLOUT_METRIC) if t is not None else None


def request_dict(r: RequestSummary) -> dict:
    return {"request": r.request, "tokens": r.tokens, "compared": r.compared, "diverged_tokens": r.diverged_tokens,
            "max_logprob_gap": r.max_logprob_gap, "first_divergence": _point_dict(r.first)}


def token_summary_dict(t: TokenSummary) -> dict:
    return {"request": t.request, "position": t.position, "token_id": t.token_id, "logprob_engine": t.logprob_engine,
            "logprob_trainer": t.logprob_trainer, "logprob_gap": t.logprob_gap, "worst": t.worst,
            "first_divergence": _point_dict(t.first)}


def token_pair_dict(p: Pair) -> dict:
    """One pair of the rollout compare as data: its step against the actor's, the first divergence at a token,
    the coverage in tokens and the per-request and per-token sections."""
    an = p.analysis
    sec = an.per_token if an and an.per_token else TokenSections()
    d = {"step": p.step, "stage": p.stage, "rank": p.rank, "target": p.target.path, "golden": p.golden.path,
         "status": str(p.status), "reason": str(p.reason) if p.reason else None,
         "first_divergence": _point_dict(an.first) if an else None,
         "top": [{"module": m.module, "tokens": m.tokens} for m in sec.top],
         "coverage": an.coverage if an else None, "requests": [request_dict(r) for r in sec.requests],
         "tokens": [token_summary_dict(t) for t in sec.tokens],
         "engine_steps": sec.engine_steps}
    if sec.engine is not None:
        d["engine"] = sec.engine
    if sec.summarized:
        d.update(routing=sec.routing, max_logprob_gap=sec.max_logprob_gap, token_map=sec.token_map)
    if sec.diverged_tokens is not None:
        d["diverged_tokens"] = sec.diverged_tokens
    d["findings"] = [f.to_dict() for f in p.findings]
    if p.ran_on:
        d["ran_on"] = p.ran_on
    return d


def token_dict(cmp: Comparison) -> dict:
    """The rollout compare's document ("mode": "rollout")."""
    return {"mode": "rollout", "target": cmp.target, "golden": cmp.golden, "output_dir": _output_dir(cmp),
            "metric": f"{ROLLOUT_METRIC} (per token)", "threshold": cmp.threshold,
            "dtype_aware": cmp.options.dtype_aware, "min_coverage": cmp.min_coverage,
            "pairs": [token_pair_dict(p) for p in cmp.pairs], "diagnostics": [f.to_dict() for f in cmp.findings],
            "statuses": cmp.statuses, "exit_code": cmp.exit_code}


def _output_dir(cmp: Comparison) -> str | None:
    return None if not cmp.out_dir or (cmp.temporary and not os.path.isdir(cmp.out_dir)) else cmp.out_dir


def write_summaries(cmp: Comparison) -> None:
    """OUT/<step>/<stage>/<inner>/<rank>/summary.json per pair (with its layers) and OUT/summary.json (the
    whole comparison, without them): bounded files, written by this process only."""
    for p in cmp.pairs:
        d = pair_dir(cmp.out_dir, p)
        os.makedirs(d, mode=0o750, exist_ok=True)
        _write_json(os.path.join(d, SUMMARY), token_pair_dict(p) if cmp.mode == ROLLOUT else
                    pair_dict(p, cmp.metric, cmp.threshold, layers=True))
    _write_json(os.path.join(cmp.out_dir, SUMMARY), as_dict(cmp))


def _write_json(path: str, doc: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(marked_json(doc), fh, indent=1)
        fh.write("\n")


def ignored_summary(cmp: Comparison) -> list[dict]:
    """Each pattern in force: why (the default's), the records it left out and in how many pairs."""
    why = dict(DEFAULT_IGNORES)
    out = []
    for pat in cmp.ignores:
        counts = [p.analysis.ignored.get(pat, 0) for p in cmp.pairs if p.analysis]
        out.append({"pattern": pat, "default": pat in why, "why": why.get(pat, ""), "records": sum(counts),
                    "pairs": sum(1 for c in counts if c)})
    return out


def as_dict(cmp: Comparison) -> dict:
    """The comparison's document, of either compare."""
    if cmp.mode == ROLLOUT:
        return token_dict(cmp)
    pairs, plotted = [], 0
    for p in cmp.pairs:
        plot = plotted < MAX_PLOTS and p.status == Status.DIVERGED and bool(p.analysis and p.analysis.first)
        plotted += plot
        pairs.append(pair_dict(p, cmp.metric, cmp.threshold, layers=plot))
    return {
        "target": cmp.target, "golden": cmp.golden,
        "output_dir": _output_dir(cmp),
        "metric": cmp.metric, "threshold": cmp.threshold, "min_coverage": cmp.min_coverage,
        "dtype_aware": cmp.options.dtype_aware, "ignore_dtype": cmp.options.ignore_dtype,
        "ignore_patterns": list(cmp.ignores),
        "msprobe_csv": cmp.msprobe_csv,
        "reference_rank": cmp.reference_rank,
        "ignored": ignored_summary(cmp),
        "pairs": pairs,
        "only_in_target": [side_dict(s) for s in cmp.only_in_target],
        "only_in_golden": [side_dict(s) for s in cmp.only_in_golden],
        "diagnostics": [f.to_dict() for f in cmp.findings],
        "statuses": cmp.statuses,
        "exit_code": cmp.exit_code,
    }
