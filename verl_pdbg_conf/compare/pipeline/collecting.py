"""Collecting: a pair's Analysis built as its nodes are judged, bounded whatever the dump's size: the
first divergence, the top nodes (a heap), per-module LayerStats, the error per model layer, and the nodes
themselves only when asked (keep_nodes)."""

from __future__ import annotations

import heapq

from verl_pdbg_conf.compare.judge import Rule
from verl_pdbg_conf.compare.nodes import Analysis, LayerStat, Node, module_path, split_name
from verl_pdbg_conf.compare.pipeline.stacks import call_number

MAX_LAYERS = 4096  # LayerStat entries per pair; further labels fold into the last one


def label_of(record) -> str:
    """The module a record belongs to (its own, or its enclosing one at mix); at L1 its model layer."""
    if record.module is not None:
        return record.module
    if record.scope:
        return module_path(record.scope) or ""
    if record.layer is not None:
        return f"layer {record.layer}"
    return ""


class Collector:
    def __init__(self, task: str, top: int, keep_nodes: int):
        self.an = Analysis(task)
        self.top_n, self.keep = top, keep_nodes
        self.top: list = []  # heap of (value, -order, id, node args)
        self.layers: dict[str, LayerStat] = {}
        self.by_layer: dict[int, dict] = {}
        self.n = 0

    def add(self, order: int, t, g, verdict, record, label: str, is_first: bool, synthetic: bool = False) -> None:
        self.n += not synthetic
        value, reason = verdict.value, verdict.reason
        st = self.layers.get(label)
        if st is None:
            if len(self.layers) >= MAX_LAYERS:
                label = "(more)"
                st = self.layers.get(label)
            if st is None:
                st = self.layers[label] = LayerStat(label, order)
        st.n_nodes += 1
        finite = value is not None and value == value
        if finite and (st.worst is None or value > st.worst):
            st.worst, st.worst_order = value, order
        if reason == Rule.NAN:
            st.nan = True
        elif reason == Rule.INF:
            st.inf = True
        if is_first:
            st.diverged = True
        if record.layer is not None:
            lay = self.by_layer.get(record.layer)
            if lay is None:
                lay = self.by_layer[record.layer] = {"layer": record.layer, "worst": None, "worst_backward": None,
                                                     "nodes": 0, "introduced": False}
            lay["nodes"] += 1
            key = "worst" if record.direction == "forward" else "worst_backward"  # growth forward, then back
            if finite and value != float("inf") and (lay[key] is None or value > lay[key]):
                lay[key] = value
            lay["introduced"] |= is_first
        if finite and value > 0 and self.top_n:
            item = (value, -order, id(t), (t, g, reason, record, label))
            if len(self.top) < self.top_n:
                heapq.heappush(self.top, item)
            elif item > self.top[0]:
                heapq.heapreplace(self.top, item)
        if self.keep and not synthetic and len(self.an.nodes) < self.keep:
            self.an.nodes.append(node(order, t, g, value, reason, record, label))

    def value_at(self, order: int):
        for v, neg, _, _args in self.top:
            if -neg == order:
                return v
        return None

    def finish(self) -> Analysis:
        an = self.an
        an.n_nodes = self.n
        if self.keep and self.n > self.keep:
            an.nodes = []  # too many to plot one by one: the per-layer summary stands for them
        an.top = [node(-neg, t, g, v, r, rec, lab) for v, neg, _, (t, g, r, rec, lab) in sorted(self.top, reverse=True)]
        an.layers = sorted(self.layers.values(), key=lambda s: s.first_order)
        an.by_layer = [self.by_layer[k] for k in sorted(self.by_layer)]
        return an


def node(order: int, t, g, value, reason: str, record, label: str) -> Node:
    direction, kind, owner, _ = split_name(t.name)
    module = module_path(owner)
    if module is None:
        module = (label if record.module is not None or record.scope else "") or None
    n = Node(order, order, t.name, direction, kind, owner, module, value, t.dtype or "",
             (g.dtype or "") if g is not None else "", "", g is not None)
    n.reason = str(reason)  # the JSON's text
    n.shape_differs = g is not None and t.shape != g.shape
    n.minibatch = record.minibatch
    n.call = call_number(t.record)
    n.layer = record.layer
    if record.site:
        n.where = record.site + (f", layer {record.layer}" if record.layer is not None else "")
    return n
