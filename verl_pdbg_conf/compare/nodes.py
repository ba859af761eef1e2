"""What a comparison is made of, as the engine computes it: the metrics, one
node (a tensor of an API or module call) and a pair's analysis, and how msprobe's record names read."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

# The default metric and threshold, and why: options.py.


@dataclass(frozen=True)
class Metric:
    column: str
    higher_is_worse: bool = True  # Cosine and the err-ratio columns: 1 is perfect, badness = 1 - value
    tasks: tuple = ("statistics", "tensor")


METRICS = {
    "NormRelativeErr": Metric("NormRelativeErr"),
    "MaxRelativeErr": Metric("MaxRelativeErr"),
    "MinRelativeErr": Metric("MinRelativeErr", tasks=("statistics",)),
    "MeanRelativeErr": Metric("MeanRelativeErr", tasks=("statistics",)),
    "MaxAbsErr": Metric("MaxAbsErr", tasks=("tensor",)),
    "EucDist": Metric("EucDist", tasks=("tensor",)),
    "Cosine": Metric("Cosine", higher_is_worse=False, tasks=("tensor",)),
    "OneThousandthErrRatio": Metric("One Thousandth Err Ratio", higher_is_worse=False, tasks=("tensor",)),
    "FiveThousandthsErrRatio": Metric("Five Thousandths Err Ratio", higher_is_worse=False, tasks=("tensor",)),
}


@dataclass
class Node:
    """One row of msprobe's result: a tensor of an API or module call."""
    order: int  # position in execution order (forward rows first)
    row: int  # position in msprobe's CSV
    name: str
    direction: str  # forward | backward
    kind: str  # input | output | parameter | parameter_grad | the raw token
    owner: str  # Module.blocks.3.fc.Linear.forward.0 or Functional.linear.3.forward
    module: str | None  # module path (blocks.3.fc); for an API, its enclosing module from construct.json
    value: float | None  # the metric, as a badness (higher is worse), None where msprobe has none
    target_dtype: str = ""
    golden_dtype: str = ""
    result: str = ""  # msprobe's own Result column
    matched: bool = True  # msprobe found the golden counterpart
    where: str = ""  # the innermost user frame from stack.json (L1 has no module tree)
    reason: str = ""  # why this node counts as diverged: threshold | dtype | shape | unmatched | nan
    shape_differs: bool = False
    minibatch: int | None = None  # 0-based: forward after backward starts the next (engine only)
    call: int | None = None  # the call counter in the record name
    golden_nonfinite: str = ""  # nan | inf: the golden run is non-finite there too (differently)
    note: str = ""  # how the engine reached its verdict when not from this node's own numbers
    layer: int | None = None  # model.layers.K's K: from the module path, or at L1 from stack.json
    received: float | None = None  # the error its inputs carried (the recent level) when it was named
    in_tensor: dict | None = None  # tensor task: where in the tensor the error sits (pipeline/locating.py)
    expert: int | None = None  # an MoE expert's module: its global index (a Megatron rank's local index + offset)

    def as_dict(self, metric: str) -> dict:
        d = {"name": self.name, "metric": metric, "value": json_number(self.value), "order": self.order,
             "direction": self.direction, "kind": self.kind, "module": self.module, "node": self.owner}
        if self.where:
            d["where"] = self.where
        if self.target_dtype or self.golden_dtype:  # the page's dtype column; the text says it where they differ
            d["dtype"] = {"target": self.target_dtype, "golden": self.golden_dtype}
        for key, value in (("reason", self.reason), ("msprobe_result", self.result), ("minibatch", self.minibatch),
                           ("call", self.call), ("golden_nonfinite", self.golden_nonfinite), ("note", self.note),
                           ("layer", self.layer), ("received", json_number(self.received)),
                           ("in_tensor", self.in_tensor), ("expert", self.expert)):
            if value not in ("", None):
                d[key] = value
        return d


@dataclass
class TokenPoint(Node):
    """A divergence the rollout compare finds at one token: the node (a comparison point's tensor, `kind` its
    input or output, or "logprob" / "routing") and the token it parts at, so one divergence type serves both
    compares; `received` is the error carried in from the point before."""
    request: str = ""
    position: int = 0
    token_id: int | None = None
    logprob_gap: float | None = None
    span: list = field(default_factory=list)  # engine modules run since the last point that agreed
    compared_at: str = ""  # with a span: the point where it shows
    experts: list | None = None  # a fused experts' divergence: the experts only the parting tokens used
    routing: dict | None = None  # a routing divergence: each side's experts and margins
    nonfinite: tuple | None = None  # (engine, trainer): nan | inf | "" where one side is non-finite

    def as_dict(self, metric: str) -> dict:
        d = {"name": self.name, "module": self.module, "direction": self.direction, "kind": self.kind,
             "metric": metric, "value": json_number(self.value), "carried": self.received, "request": self.request,
             "position": self.position, "token_id": self.token_id, "logprob_gap": self.logprob_gap,
             "layer": self.layer}
        if self.span:
            d["span"] = self.span
            d["compared_at"] = self.compared_at
        if self.experts:
            d["experts"] = self.experts
            if len(self.experts) == 1:
                d["expert"] = self.experts[0]
        if self.routing:
            d["routing"] = self.routing
        if self.nonfinite:  # no error measured (value null): which side holds NaN or Inf
            d["nonfinite"] = {"engine": self.nonfinite[0], "trainer": self.nonfinite[1]}
        return d


@dataclass
class RequestSummary:
    """One request of a rollout step: its tokens, how many were compared and how many part, its largest
    log-prob gap and the token where it first parts."""
    request: str
    tokens: int
    compared: int
    diverged_tokens: int
    max_logprob_gap: float | None
    first: TokenPoint | None


@dataclass
class TokenSummary:
    """One token of a rollout step, as the report lists the tokens of largest log-prob gap."""
    request: str
    position: int
    token_id: int | None
    logprob_engine: float | None
    logprob_trainer: float | None
    logprob_gap: float | None
    worst: float | None  # the largest error of its comparison points
    first: TokenPoint | None  # where it parts


@dataclass
class ModuleCount:
    """A module where tokens of a rollout step part, with how many."""
    module: str
    tokens: int


@dataclass
class TokenSections:
    """What the rollout compare adds to a pair's analysis, per request and per token (report data: the
    status is decided from the analysis's first divergence and coverage, verdict.decide); plain data only in
    the document (report/document.py)."""
    engine_steps: int = 0
    engine: str | None = None  # the engine's name (its token record), once its table is known
    summarized: bool = False  # the tokens were walked: routing, the log-prob gap and the token map are said
    requests: list[RequestSummary] = field(default_factory=list)
    tokens: list[TokenSummary] = field(default_factory=list)  # the tokens of largest log-prob gap
    top: list[ModuleCount] = field(default_factory=list)  # modules where tokens part, most tokens first
    routing: dict | None = None
    max_logprob_gap: float | None = None
    token_map: dict | None = None
    diverged_tokens: int | None = None


@dataclass(slots=True)
class LayerStat:
    """One layer or module of a pair, aggregated over its nodes in execution order: what a plot and
    an overview show at any dump size (a pair's nodes are not all kept)."""
    label: str  # layers.3.mlp, or the API's enclosing module; "" for nodes outside any
    first_order: int  # execution order of its first node
    n_nodes: int = 0
    worst: float | None = None  # the largest metric badness among its nodes
    worst_order: int | None = None  # execution order of that node: after the first divergence, it carries it
    nan: bool = False  # a node is NaN on one side and not the other (or differently)
    inf: bool = False
    diverged: bool = False  # holds the pair's first divergence


@dataclass
class Analysis:
    task: str  # statistics | tensor | md5
    nodes: list[Node] = field(default_factory=list)  # execution order (may be left empty at scale)
    first: Node | None = None
    top: list[Node] = field(default_factory=list)
    layers: list[LayerStat] = field(default_factory=list)  # execution order, bounded
    n_nodes: int = 0  # nodes compared, whether or not kept in `nodes`
    minibatches: int = 1  # forward/backward rounds in the dump (the engine counts them)
    ignored: dict = field(default_factory=dict)  # --ignore pattern -> nodes it left out
    both_nonfinite: Node | None = None  # first node NaN/Inf in both runs alike (not a divergence)
    by_layer: list = field(default_factory=list)  # per model layer K: {"layer", "worst" (forward), "worst_backward", "nodes", "introduced"}
    coverage: dict | None = None  # pipeline/coverage.py: how much of each side was compared
    tokens: str = ""  # the runs were fed token ids laid out otherwise: why no tensor can be compared
    fed: str = ""  # the runs were fed other data (pipeline/feeding.py): why the first divergence is none
    compared: bool = True  # anything compared at all (the rollout: a token aligned); nothing is a mismatch
    per_token: TokenSections | None = None  # the rollout compare's requests and tokens


# A pair's plot and summary hold at most this many layers, whatever the dump's size (500k nodes included):
# adjacent layers are merged beyond it, so a summary stays a few tens of kB and a plot stays readable.
MAX_LAYERS = 400
SPAN = 64  # nodes with no module (L1 dumps): grouped by this many consecutive nodes in execution order


def layer_label(module: str | None) -> str | None:
    """model.layers.3.mlp.down_proj -> model.layers.3.mlp: a module path cut one part after its first
    index (a repeated block), so a layer's submodules share a label; None stays None."""
    if module is None:
        return None
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 2])
    return module


def layers_of(nodes: list[Node], first: Node | None, max_layers: int = MAX_LAYERS) -> list[LayerStat]:
    """Nodes in execution order -> LayerStats: one per run of consecutive nodes of the same layer
    (layer_label of the node's module; a span of SPAN nodes where no module is known), at most
    max_layers (adjacent runs merged evenly beyond that)."""
    runs: list[LayerStat] = []
    for n in nodes:
        label = layer_label(n.module)
        if label is None:
            label = f"nodes {n.order // SPAN * SPAN}-{n.order // SPAN * SPAN + SPAN - 1}"
        if not runs or runs[-1].label != label:
            runs.append(LayerStat(label, n.order))
        _add(runs[-1], n, first)
    return fold_layers(runs, max_layers)


def fold_layers(layers: list[LayerStat], max_layers: int = MAX_LAYERS) -> list[LayerStat]:
    """At most max_layers, in execution order: adjacent layers merged evenly (worst of the worst, any
    NaN/Inf/first divergence kept), their labels joined as "first .. last"."""
    layers = sorted(layers, key=lambda lay: lay.first_order)
    if len(layers) <= max_layers:
        return layers
    merged: list[LayerStat] = []
    per = -(-len(layers) // max_layers)
    for i in range(0, len(layers), per):
        group = layers[i:i + per]
        m = LayerStat(group[0].label if len(group) == 1 else f"{group[0].label} .. {group[-1].label}",
                      group[0].first_order)
        for g in group:
            m.n_nodes += g.n_nodes
            if g.worst is not None and (m.worst is None or g.worst > m.worst):
                m.worst, m.worst_order = g.worst, g.worst_order
            m.nan |= g.nan
            m.inf |= g.inf
            m.diverged |= g.diverged
        merged.append(m)
    return merged


def _max(a, b):
    if a is None:
        return b
    return a if b is None or a >= b else b


def _add(layer: LayerStat, n: Node, first: Node | None) -> None:
    layer.n_nodes += 1
    v = n.value
    if v is not None:
        if math.isnan(v) or n.reason == "nan":
            layer.nan = True
        elif math.isinf(v):
            layer.inf = True
        else:
            if layer.worst is None or v > layer.worst:
                layer.worst_order = n.order
            layer.worst = _max(layer.worst, v)
    elif n.reason == "nan":
        layer.nan = True
    if n is first:
        layer.diverged = True


def json_number(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def split_name(name: str) -> tuple[str, str, str, str]:
    """msprobe data name -> (direction, kind, owner, detail).

    Module.blocks.3.fc.Linear.forward.0.parameters.weight -> forward, parameter, Module.blocks.3.fc.Linear.forward.0
    Module.head.Linear.parameters_grad.0.bias              -> backward, parameter_grad, Module.head.Linear
    Functional.linear.3.forward.input.1                    -> forward, input, Functional.linear.3.forward"""
    parts = name.split(".")
    if "parameters_grad" in parts:
        i = parts.index("parameters_grad")
        return "backward", "parameter_grad", ".".join(parts[:i]), ".".join(parts[i + 2:])
    idx = [i for i, p in enumerate(parts) if p in ("forward", "backward")]
    if not idx:
        return "", "", name, ""
    i = idx[-1]
    direction = parts[i]
    if parts[0] in ("Module", "Cell") and i + 1 < len(parts) and parts[i + 1].isdigit():
        owner, rest = parts[:i + 2], parts[i + 2:]
    else:
        owner, rest = parts[:i + 1], parts[i + 1:]
    kind = rest[0] if rest else ""
    kind = {"parameters": "parameter"}.get(kind, kind)
    return direction, kind, ".".join(owner), ".".join(rest[1:])


_INDEX = re.compile(r"\.\d+(?=\.|$)")


def module_kind(path: str) -> str:
    """model.layers.3.self_attn -> model.layers.*.self_attn: one name for a module repeated per layer."""
    return _INDEX.sub(".*", path)


def module_path(owner: str) -> str | None:
    """Module.blocks.3.fc.Linear.forward.0 -> blocks.3.fc (the root module -> "")."""
    parts = owner.split(".")
    if parts[0] not in ("Module", "Cell"):
        return None
    for i, p in enumerate(parts):
        if p in ("forward", "backward", "parameters_grad"):
            return ".".join(parts[1:i - 1])
    return ".".join(parts[1:-1])


FRAME = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in (?P<func>[^,\s]+)")
LIBRARY_DIRS = (f"{os.sep}torch{os.sep}", f"{os.sep}msprobe{os.sep}", f"{os.sep}verl_pdbg_conf{os.sep}runtime{os.sep}")


def stack_entries(stack):
    """msprobe's stack.json (parsed): (call names, frames innermost first) of each well-formed entry."""
    if not isinstance(stack, dict):
        return
    for entry in stack.values():
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list):
            yield entry[0], entry[1] if isinstance(entry[1], list) else []
