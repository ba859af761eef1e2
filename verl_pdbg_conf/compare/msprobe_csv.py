"""Read one msprobe compare result (compare_result_*.csv) into nodes in execution order, and find
the first one whose difference passes a threshold.

msprobe 26.2 writes one row per API or module input, output, parameter and parameter gradient, in
dump order, with statistics-task columns (Max/Min/Mean/NormRelativeErr as percent strings) or
tensor-task columns (Cosine, EucDist, MaxAbsErr, MaxRelativeErr as fractions, both sides' l2norm).
All values here are fractions (msprobe's "1.0%" is 0.01). No pandas, no msprobe: the csv module."""

from __future__ import annotations

import csv
import math
import os

from verl_pdbg_conf.compare.ignores import Ignorer
from verl_pdbg_conf.compare.metrics import norm_rel
from verl_pdbg_conf.compare.nodes import (METRICS, Analysis, MetricUnavailable, Node, _api_modules, _load_json,
                                          _NA, _stack_index, module_path, split_name)


def parse_value(text) -> float | None:
    """msprobe cell -> fraction: "1.5%" -> 0.015, "0" -> 0.0, " inf" -> inf, N/A -> None."""
    s = str(text).strip()
    if s.upper() in _NA:
        return None
    pct = s.endswith("%")
    try:
        v = float(s[:-1] if pct else s)
    except ValueError:
        return None
    return v / 100 if pct else v


def task_of(columns: list[str]) -> str:
    if "NormRelativeErr" in columns:
        return "statistics"
    if "Cosine" in columns:
        return "tensor"
    if any("MD5" in c for c in columns):
        return "md5"
    return "unknown"


def read_result(csv_path: str, metric: str, threshold: float, top: int, target_dump: str | None = None,
                ignore_dtype: bool = False, ignores: tuple = (), golden_dump: str | None = None) -> Analysis:
    """Nodes of one result file in execution order (forward before backward, then msprobe's dump
    order), the first that diverges (its metric passes threshold, or its dtype or shape differs, or it
    has no golden counterpart), and the `top` largest differences. Rows matching an ignore pattern
    (ignores.py) are left out, counted per pattern in Analysis.ignored."""
    spec = METRICS[metric]
    with open(csv_path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        columns = reader.fieldnames or []
        rows = list(reader)
    task = task_of(columns)
    derived = metric == "NormRelativeErr" and spec.column not in columns and "Bench l2norm" in columns
    if spec.column not in columns and not derived:
        raise MetricUnavailable(f"{metric} is not in msprobe's result for a {task} dump "
                                f"(metrics for it: {', '.join(m for m, s in METRICS.items() if task in s.tasks)})")
    here = os.path.dirname(target_dump) if target_dump else None
    apis = _api_modules(_load_json(os.path.join(here, "construct.json"))) if here else {}
    ignorer = Ignorer(ignores, *(d for d in (target_dump, golden_dump) if d))
    nodes = []
    for i, r in enumerate(rows):
        name = r.get("NPU Name", "")
        direction, kind, owner, _ = split_name(name)
        if ignores and ignorer.match(name, owner):
            continue
        if derived:
            value = _norm_rel(parse_value(r.get("NPU l2norm")), parse_value(r.get("Bench l2norm")))
        else:
            value = parse_value(r.get(spec.column))
            if value is not None and not spec.higher_is_worse:
                value = 1.0 - value
        module = module_path(owner)
        if module is None:
            module = apis.get(owner)
        bench = str(r.get("Bench Name", "")).strip()
        node = Node(0, i, name, direction, kind, owner, module, value, r.get("NPU Dtype", ""),
                    r.get("Bench Dtype", ""), r.get("Result", ""), bench not in ("", "N/A"))
        node.shape_differs = _cell(r, "NPU Tensor Shape") != _cell(r, "Bench Tensor Shape")
        nodes.append(node)
    nodes.sort(key=lambda n: (n.direction == "backward", n.row))
    for k, n in enumerate(nodes):
        n.order = k
    an = Analysis(task, nodes, ignored=ignorer.counts)
    for n in nodes:
        reason = _diverged(n, threshold, ignore_dtype)
        if reason:
            n.reason = reason
            an.first = n
            break
    ranked = [n for n in nodes if n.value is not None and not math.isnan(n.value) and n.value > 0]
    ranked.sort(key=lambda n: (-n.value, n.order))
    an.top = ranked[:max(top, 0)]
    if here and any(n.module is None for n in [an.first, *an.top] if n):
        where = _stack_index(_load_json(os.path.join(here, "stack.json")))
        for n in [an.first, *an.top]:
            if n and n.module is None:
                n.where = where.get(n.owner, "")
    return an


def _norm_rel(npu: float | None, bench: float | None) -> float | None:
    return norm_rel(npu, bench)


def _cell(r: dict, col: str) -> str:
    return str(r.get(col, "")).strip()


def _diverged(n: Node, threshold: float, ignore_dtype: bool = False) -> str:
    if not n.matched:
        return "unmatched"  # in the target only: the two runs did not make the same calls
    if n.shape_differs:
        return "shape"
    if n.target_dtype != n.golden_dtype and not ignore_dtype:
        return "dtype"  # a cast the golden run does not make (bf16 for fp32): where precision was lost
    if n.value is None:
        return ""  # not a tensor (an int, a bool, None): msprobe computes no difference
    if math.isnan(n.value):
        return "nan"
    return "threshold" if n.value > threshold else ""
