"""Read one msprobe compare result (compare_result_*.csv) into nodes in execution order, and find
the first one whose difference passes a threshold.

msprobe 26.2 writes one row per API or module input, output, parameter and parameter gradient, in
dump order, with statistics-task columns (Max/Min/Mean/NormRelativeErr as percent strings) or
tensor-task columns (Cosine, EucDist, MaxAbsErr, MaxRelativeErr as fractions, both sides' l2norm).
All values here are fractions (msprobe's "1.0%" is 0.01). No pandas, no msprobe: the csv module."""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field

# The default metric: the relative error of the L2 norm, |norm(target) - norm(golden)| / norm(golden).
# msprobe's statistics task prints it (NormRelativeErr); for the tensor task it is computed here from
# msprobe's "NPU l2norm"/"Bench l2norm" columns with the same formula, so one default serves both.
# A norm is near zero only for a (near) zero tensor, so unlike MeanRelativeErr (a mean can be ~0) or
# Max/MinRelativeErr (one element) it does not blow up on noise. The threshold 1e-4 (0.01 %) sits
# between fp32 reduction-order noise (~1e-7..1e-6 on a norm) and what one wants found: bf16 rounding
# (~1e-3) and a 1 % weight change (1e-2). msprobe's own "error" mark for this metric needs 0.5.
DEFAULT_METRIC = "NormRelativeErr"
DEFAULT_THRESHOLD = 1e-4


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
_NA = {"", "N/A", "NAN", "NONE", "UNSUPPORTED", "NAN%"}


class MetricUnavailable(ValueError):
    """The result file has no column for the chosen metric (another task, or md5 summary mode)."""


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

    def as_dict(self, metric: str) -> dict:
        d = {"name": self.name, "metric": metric, "value": _json_number(self.value), "order": self.order,
             "direction": self.direction, "kind": self.kind, "module": self.module, "node": self.owner}
        if self.where:
            d["where"] = self.where
        if self.target_dtype != self.golden_dtype:
            d["dtype"] = {"target": self.target_dtype, "golden": self.golden_dtype}
        if self.reason:
            d["reason"] = self.reason
        if self.result:
            d["msprobe_result"] = self.result
        return d


@dataclass
class Analysis:
    task: str  # statistics | tensor | md5
    nodes: list[Node] = field(default_factory=list)  # execution order
    first: Node | None = None
    top: list[Node] = field(default_factory=list)


def _json_number(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


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


def module_path(owner: str) -> str | None:
    """Module.blocks.3.fc.Linear.forward.0 -> blocks.3.fc (the root module -> "")."""
    parts = owner.split(".")
    if parts[0] not in ("Module", "Cell"):
        return None
    for i, p in enumerate(parts):
        if p in ("forward", "backward", "parameters_grad"):
            return ".".join(parts[1:i - 1])
    return ".".join(parts[1:-1])


def _load_json(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _api_modules(construct: dict | None) -> dict:
    """construct.json (mix level): API call -> its enclosing module's path."""
    out = {}
    for child, parent in (construct or {}).items():
        if isinstance(parent, str) and not child.startswith(("Module.", "Cell.")):
            out[child] = module_path(parent)
    return out


_FRAME = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in (?P<func>[^,\s]+)")
_LIBS = (f"{os.sep}torch{os.sep}", f"{os.sep}msprobe{os.sep}", f"{os.sep}verl_pdbg_conf{os.sep}runtime{os.sep}")


def _stack_index(stack) -> dict:
    """stack.json -> {call name: innermost frame outside torch and msprobe, as file:line in func}."""
    out = {}
    if not isinstance(stack, dict):
        return out
    for entry in stack.values():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
            continue
        names, frames = entry
        where = ""
        for fr in frames if isinstance(frames, list) else ():
            m = _FRAME.search(str(fr))
            if m and not any(lib in m.group("file") for lib in _LIBS):
                where = f"{os.path.basename(m.group('file'))}:{m.group('line')} in {m.group('func')}"
                break
        for n in names:
            out.setdefault(n, where)
    return out


def task_of(columns: list[str]) -> str:
    if "NormRelativeErr" in columns:
        return "statistics"
    if "Cosine" in columns:
        return "tensor"
    if any("MD5" in c for c in columns):
        return "md5"
    return "unknown"


def read_result(csv_path: str, metric: str, threshold: float, top: int, target_dump: str | None = None,
                ignore_dtype: bool = False) -> Analysis:
    """Nodes of one result file in execution order (forward before backward, then msprobe's dump
    order), the first that diverges (its metric passes threshold, or its dtype or shape differs, or it
    has no golden counterpart), and the `top` largest differences."""
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
    nodes = []
    for i, r in enumerate(rows):
        name = r.get("NPU Name", "")
        direction, kind, owner, _ = split_name(name)
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
    an = Analysis(task, nodes)
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
    if npu is None or bench is None:
        return None
    if bench == 0:
        return 0.0 if npu == 0 else math.inf
    return abs(npu - bench) / abs(bench)


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
