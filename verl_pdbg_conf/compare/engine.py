"""The first-divergence engine: one pair of dump.json files read side by side as two streams, rows paired
as msprobe's compare pairs them, judged in the order the target's records were written (forward and
backward interleaved as they ran, mini-batch by mini-batch), in memory bounded by a pairing window,
not by the dump.

`compare_pair(PairJob) -> PairOutcome` is a top-level function of plain data, for a process pool or a
Ray task. A node diverges, in this order of rules: no counterpart (msprobe's pairing, its dtype groups),
NaN/Inf on one side and not the other (or both, differently), a shape, a dtype (unless told), an integer
or bool tensor not exactly equal, then the metric above the threshold."""

from __future__ import annotations

import heapq
import math
import os
from dataclasses import dataclass, field

from verl_pdbg_conf.compare import metrics as M
from verl_pdbg_conf.compare.dumpread import (DumpError, DumpReader, KeyCounter, iter_items, read_header, rows_of,
                                             split_record)
from verl_pdbg_conf.compare.ignores import Ignorer
from verl_pdbg_conf.compare.nodes import (DEFAULT_METRIC, DEFAULT_THRESHOLD, METRICS, Analysis, LayerStat, Node,
                                          _stack_index, module_path, split_name)

WINDOW = 1 << 16  # golden rows held while looking ahead for a target row's counterpart
SLACK = 1 << 13  # golden rows this far behind the last match are taken as golden-only and dropped
MAX_LAYERS = 4096  # LayerStat entries per pair; further labels fold into the last one
MAX_PASSES = 1024  # forward passes per op whose first call number is kept (for the L1 layer index)


@dataclass(frozen=True)
class PairJob:
    target: str  # dump.json paths
    golden: str
    metric: str = DEFAULT_METRIC
    threshold: float = DEFAULT_THRESHOLD
    top: int = 5
    ignore_dtype: bool = False
    dtype_aware: bool = False
    ignores: tuple = ()
    keep_nodes: int = 0  # keep up to this many nodes (for a per-node plot); 0 keeps none


@dataclass
class PairOutcome:
    analysis: Analysis | None = None
    error: str = ""  # why nothing was compared
    rule: str = ""  # its finding rule: dump-corrupt, compare-mismatch...
    path: str = ""  # the file at fault
    hint: str = ""
    notes: list = field(default_factory=list)  # (rule, message, hint) said about a compared pair


def header_of(path: str) -> dict:
    """task, level and summary_mode of a dump (first record only); {} when it cannot be read."""
    try:
        return read_header(path)
    except (OSError, DumpError, UnicodeDecodeError):
        return {}


def mismatch(t: dict, g: dict) -> str:
    """The two dumps were collected differently: no node by node comparison means anything."""
    said = []
    for key, what in (("task", "task"), ("level", "level"), ("summary_mode", "summary_mode")):
        a, b = t.get(key), g.get(key)
        if a and b and a != b:
            said.append(f"{what} {a} against {b}")
    return ", ".join(said)


def compare_pair(job: PairJob) -> PairOutcome:
    th, gh = header_of(job.target), header_of(job.golden)
    differ = mismatch(th, gh)
    if differ:
        return PairOutcome(error=f"the two dumps were collected differently ({differ}): not compared node by "
                           "node", rule="compare-mismatch", path=job.target,
                           hint="collect both runs with the same config.json task, level and summary_mode")
    task = th.get("task") or gh.get("task") or "statistics"
    if th.get("summary_mode") == "md5":
        task = "md5"
    spec = METRICS[job.metric]
    if task not in spec.tasks:
        return PairOutcome(error=f"{job.metric} is not given by a {task} dump", rule="compare-metric",
                           path=job.target, hint="choose another --metric for this task")
    try:
        return _compare(job, task, th.get("level") or "")
    except (DumpError, UnicodeDecodeError) as e:
        return PairOutcome(error=str(e) if isinstance(e, DumpError) else "is not UTF-8 text", rule="dump-corrupt",
                           path=getattr(e, "path", job.target),
                           hint="the writer was interrupted (a killed worker, a full disk); collect this stage again")
    except OSError as e:
        return PairOutcome(error=f"cannot be read ({e.strerror})", rule="dump-missing", path=e.filename or job.target)


class _Side:
    """A dump's rows in its order, with pairing keys. Counts mini-batches on the way: one starts when the
    op that opened the dump (the embedding, the root module) runs forward again after a backward, so an
    optimizer step stays with the mini-batch whose gradients it applies."""

    def __init__(self, path: str):
        self.path = path
        self.reader = DumpReader(path)
        self.keys = KeyCounter()
        self.minibatch = 0
        self.passes = 0  # forward passes: the opening op run again (micro-batches of a no-grad stage too)
        self.pass_first: dict[str, dict[int, int]] = {}  # API op -> pass -> its first call number there
        self.records = 0
        self._back = False
        self._opener = None

    def rows(self):
        try:
            for name, rec in self.reader.records():
                self.records += 1
                split = split_record(name)
                op, _, direction = split
                if not op:
                    continue  # msprobe skips names with no forward/backward/parameters_grad part
                prefix, _ = self.keys.record_prefix(name, split)
                if direction == "forward":
                    if self._opener is None:
                        self._opener = op
                    elif op == self._opener:
                        self.passes += 1
                        if self._back:
                            self.minibatch += 1
                            self._back = False
                    head, _, tail = split[1].partition(".")  # "3.forward" (an API) or "forward.0"
                    call = int(head) if head.isdigit() else None
                    if call is not None:
                        firsts = self.pass_first.setdefault(op, {})
                        if len(firsts) < MAX_PASSES:
                            firsts.setdefault(self.passes, call)
                else:
                    self._back = True
                for row in rows_of(name, rec, direction):
                    if prefix is not name and row.name.startswith(name):
                        row.key = prefix + row.name[len(name):]
                    yield row
        except DumpError as e:
            e.path = self.path
            raise


def _compare(job: PairJob, task: str, level: str) -> PairOutcome:
    spec = METRICS[job.metric]
    arrays = task == "tensor" and job.metric != "NormRelativeErr"  # the others come from the tensor files
    stat_i = None if arrays else M.STAT_INDEX[job.metric]
    # the tensor task's CSV has no NormRelativeErr: it is the l2norms' relative error, none without both
    stat_rel = M.norm_rel if task == "tensor" else M.rel_err
    t_dir, g_dir = (os.path.join(os.path.dirname(p), "dump_tensor_data") for p in (job.target, job.golden))
    ignorer = Ignorer(job.ignores, job.target, job.golden) if job.ignores else None
    tside, gside = _Side(job.target), _Side(job.golden)
    g_rows = gside.rows()
    pending: dict[str, tuple] = {}  # golden rows read ahead: key -> (golden index, row)
    g_next = 0
    last_match = 0

    def counterpart(key: str):
        nonlocal g_next, last_match
        hit = pending.pop(key, None)
        if hit is None:
            for g in g_rows:
                g_next += 1
                if g.key == key:
                    hit = (g_next - 1, g)
                    break
                pending[g.key] = (g_next - 1, g)
                if len(pending) >= WINDOW:
                    break
        if hit is None:
            return None
        last_match = hit[0]
        while pending:  # golden-only rows well behind the match point: msprobe drops them too
            k = next(iter(pending))
            if pending[k][0] >= last_match - SLACK:
                break
            del pending[k]
        return hit[1]

    an = Analysis(task)
    first = None
    rec_name, rec_ints, inferred = None, [], ""
    in_backward, ran_in_backward = None, False
    label_of, label = None, ""
    both_nonfinite = None
    top: list = []  # heap of (value, -order, row, golden row, reason, mb)
    layers: dict[str, LayerStat] = {}
    apis = None
    lowp_eps = 0.0  # --dtype-aware: the largest rounding step of a float dtype the runs differ in
    suggest = ""
    n = 0
    for order, t in enumerate(tside.rows()):
        if in_backward is not None and t.record != first[1].record:
            # the first divergence was a forward-named call made after a backward record: if backward
            # records follow in the same mini-batch, it ran inside the backward pass (a hook's op)
            if t.direction == "backward" and tside.minibatch == first[4]:
                in_backward = True
                ran_in_backward = True
            if t.direction == "backward" or tside.minibatch != first[4]:
                in_backward = None
        g = counterpart(t.key)
        if ignorer is not None and ignorer.match(t.name, t.record) is not None:
            continue  # counted per pattern in ignorer.counts
        n += 1
        mb = tside.minibatch
        if t.record is not label_of:
            if apis is None and level in ("mix", "L0"):
                apis = _Construct(os.path.join(os.path.dirname(job.target), "construct.json"))
            label_of, label = t.record, _label(t.record, apis)
        reason, golden_nf = "", ""
        value = None
        if g is None or not M.dtypes_pair(t.dtype or "None", g.dtype or "None"):
            reason = "unmatched"
        else:
            tc, gc = M.nonfinite(t.stats), M.nonfinite(g.stats)
            if tc != gc:
                reason = M.kind_of(tc) or M.kind_of(gc)
                golden_nf = M.kind_of(gc)
                value = math.nan
            else:
                if stat_i is not None:
                    value = stat_rel(t.stats[stat_i], g.stats[stat_i])
                if value is not None and not spec.higher_is_worse:
                    value = 1.0 - value
                if M.kind_of(tc) and both_nonfinite is None:
                    both_nonfinite = (order, t, g, M.kind_of(tc), mb, label)
                if arrays and t.shape == g.shape:
                    value = _array_value(job.metric, t, g, t_dir, g_dir)
                    if value is not None and not spec.higher_is_worse:
                        value = 1.0 - value
                if t.shape != g.shape:
                    reason = "shape"
                elif t.dtype != g.dtype:
                    if t.dtype in M.FLOAT_DTYPES and g.dtype in M.FLOAT_DTYPES:
                        step = max(M.EPS[t.dtype], M.EPS[g.dtype])
                        if job.dtype_aware:
                            lowp_eps = max(lowp_eps, step)
                        elif not suggest:
                            low = t.dtype if M.EPS[t.dtype] == step else g.dtype
                            suggest = (f"{t.dtype} against {g.dtype}: --dtype-aware judges such runs with the "
                                       f"threshold raised to {step:.3g}, the relative rounding step (machine "
                                       f"epsilon) of {low}")
                    if not (job.ignore_dtype or job.dtype_aware):
                        reason = "dtype"
                if not reason and M.exact_dtype(t.dtype) and t.stats != g.stats:
                    reason = "exact"
                    if not value:
                        value = max((v for v in map(M.rel_err, t.stats, g.stats) if v is not None), default=None)
                if not reason and not arrays and task == "tensor" and M.exact_dtype(t.dtype):
                    if _arrays_differ(t, g, t_dir, g_dir):
                        reason = "exact"
                if not reason and value is not None:
                    if value != value:
                        reason = "nan"
                    elif value > max(job.threshold, lowp_eps):
                        reason = "threshold"
        if t.record != rec_name:
            rec_name, rec_ints = t.record, []
        if reason and first is None:
            first = (order, t, g, reason, mb, golden_nf, label)
            if t.direction == "forward" and tside._back and module_path(t.record) is None:
                in_backward = False
            if t.state == "output" and rec_ints and reason in ("threshold", "exact", "nan", "inf"):
                # every input and parameter of this call is equal, its output is not: an integer input
                # whose statistics cannot show the change (msprobe keeps only max/min of one) differs
                o, ti, gi = rec_ints[0]
                first = (o, ti, gi, "exact", mb, "", label)
                inferred = (f"statistics equal (msprobe keeps max/min of an integer tensor), but the output of "
                            f"{t.record} differs with every other input equal")
        elif g is not None and not reason and t.state == "input" and M.exact_dtype(t.dtype):
            rec_ints.append((order, t, g))
        _layer(layers, label or "", order, value, reason, first is not None and first[0] == order)
        if value is not None and value == value and value > 0 and job.top:
            item = (value, -order, id(t), t, g, reason, mb, label)
            if len(top) < job.top:
                heapq.heappush(top, item)
            elif item > top[0]:
                heapq.heapreplace(top, item)
        if job.keep_nodes and len(an.nodes) < job.keep_nodes:
            an.nodes.append(_node(order, t, g, value, reason, mb, label))
    for side in (tside, gside):
        if side.records == 0 and (side is tside or next(g_rows, None) is None and gside.records == 0):
            return PairOutcome(error="holds no records", rule="dump-empty", path=side.path,
                               hint="the stage ran no hooked API or module (config.json scope/list/level, or the "
                               "stage's model was not resolved)")
    an.n_nodes = n
    an.minibatches = tside.minibatch + 1
    an.ignored = ignorer.counts if ignorer is not None else {}
    if job.keep_nodes and n > job.keep_nodes:
        an.nodes = []  # too many to plot one by one: the per-layer summary stands for them
    if first:
        order, t, g, reason, mb, golden_nf, lab = first
        an.first = _node(order, t, g, None, reason, mb, lab)
        an.first.value = _value_of(an, order, top, job, t, g, stat_i, spec, arrays, t_dir, g_dir, task)
        an.first.golden_nonfinite = golden_nf
        an.first.note = inferred
        if ran_in_backward:
            an.first.direction = "backward"
            an.first.note = "a forward-named call made during the backward pass (a hook's operation)"
    an.top = [_node(-neg, t, g, v, r, mb, lab) for v, neg, _, t, g, r, mb, lab in sorted(top, reverse=True)]
    if both_nonfinite:
        order, t, g, kind, mb, lab = both_nonfinite
        an.both_nonfinite = _node(order, t, g, None, kind, mb, lab)
    _locate(an, job.target, tside.pass_first)
    an.layers = sorted(layers.values(), key=lambda s: s.first_order)
    out = PairOutcome(an)
    if suggest:
        out.notes.append(("compare-dtype", suggest, "or --ignore-dtype to keep the threshold"))
    if job.dtype_aware and lowp_eps:
        out.notes.append(("compare-dtype", f"--dtype-aware: threshold {max(job.threshold, lowp_eps):.3g} "
                          "(machine epsilon of the lower precision the runs differ in)", ""))
    return out


def _value_of(an, order, top, job, t, g, stat_i, spec, arrays, t_dir, g_dir, task):
    for v, neg, _, *_rest in top:
        if -neg == order:
            return v
    if g is None:
        return None
    if arrays:
        v = _array_value(job.metric, t, g, t_dir, g_dir)
    else:
        v = (M.norm_rel if task == "tensor" else M.rel_err)(t.stats[stat_i], g.stats[stat_i])
    if v is not None and not spec.higher_is_worse:
        v = 1.0 - v
    return v


def _arrays(t, g, t_dir: str, g_dir: str):
    """The two rows' tensor files as arrays, or None without both."""
    if t.data_name in ("-1", "", None) or g.data_name in ("-1", "", None):
        return None
    try:
        return M.load_array(os.path.join(t_dir, t.data_name)), M.load_array(os.path.join(g_dir, g.data_name))
    except (OSError, RuntimeError, ValueError):
        return None


def _array_value(metric: str, t, g, t_dir: str, g_dir: str):
    both = _arrays(t, g, t_dir, g_dir)
    return None if both is None else M.tensor_metric(metric, *both)


def _arrays_differ(t, g, t_dir: str, g_dir: str) -> bool:
    """The tensor task keeps the values: an integer tensor is equal only if every element is."""
    import numpy as np

    both = _arrays(t, g, t_dir, g_dir)
    return both is not None and not np.array_equal(*both)


class _Construct:
    """construct.json (mix level: each API call's enclosing module) read as a stream beside the dump,
    in the same order; entries not asked for yet wait in a bounded window."""

    def __init__(self, path: str):
        self._items = iter_items(path) if os.path.isfile(path) else iter(())
        self._ahead: dict = {}

    def get(self, name: str):
        if name in self._ahead:
            return self._ahead.pop(name)
        try:
            for key, parent in self._items:
                if key == name:
                    return parent
                self._ahead[key] = parent
                if len(self._ahead) > WINDOW:
                    del self._ahead[next(iter(self._ahead))]
        except (OSError, DumpError, UnicodeDecodeError):
            self._items = iter(())
        return None


def _label(record: str, construct) -> str:
    """The module a record belongs to: its own for a module record, the enclosing one for an API at mix."""
    m = module_path(record)
    if m is not None:
        return m
    parent = construct.get(record) if construct is not None else None
    return (module_path(parent) or "") if isinstance(parent, str) else ""


def _layer(layers: dict, label: str, order: int, value, reason: str, is_first: bool) -> None:
    st = layers.get(label)
    if st is None:
        if len(layers) >= MAX_LAYERS:
            label = "(more)"
            st = layers.get(label)
        if st is None:
            st = layers[label] = LayerStat(label, order)
    st.n_nodes += 1
    if value is not None and value == value and (st.worst is None or value > st.worst):
        st.worst = value
    if reason == "nan":
        st.nan = True
    elif reason == "inf":
        st.inf = True
    if is_first:
        st.diverged = True


def _node(order: int, t, g, value, reason: str, mb: int, label: str) -> Node:
    direction, kind, owner, _ = split_name(t.name)
    module = module_path(owner)
    if module is None:
        module = label or None
    node = Node(order, order, t.name, direction, kind, owner, module, value, t.dtype or "",
                (g.dtype or "") if g is not None else "", "", g is not None)
    node.reason = reason
    node.shape_differs = g is not None and t.shape != g.shape
    node.minibatch = mb
    node.call = _call(t.record)
    return node


def _call(record: str) -> int | None:
    """The call counter in a record name: Functional.linear.3.forward -> 3, Module.x.Y.forward.2 -> 2."""
    parts = record.split(".")
    for p in (parts[-1], parts[-2] if len(parts) > 1 else ""):
        if p.isdigit():
            return int(p)
    return None


def _locate(an: Analysis, target: str, pass_first: dict) -> None:
    """An API node outside any known module (L1) gets its calling line from stack.json and the layer it
    ran in: the same line runs once per layer, so its k-th call in a forward pass is layer k."""
    todo = [n for n in (an.first, *an.top) if n and n.module is None]
    if not todo:
        return
    wanted = {n.owner for n in todo} | {n.owner.replace(".backward", ".forward") for n in todo}
    kept = {}  # only the stack.json entries naming a reported node: read as a stream
    try:
        for key, entry in iter_items(os.path.join(os.path.dirname(target), "stack.json")):
            if isinstance(entry, list) and entry and isinstance(entry[0], list) and wanted.intersection(entry[0]):
                kept[key] = entry
    except (OSError, DumpError, UnicodeDecodeError):
        pass
    where = _stack_index(kept)
    groups = {name: entry[0] for entry in kept.values() for name in entry[0] if name in wanted}
    for n in todo:
        fwd = n.owner.replace(".backward", ".forward")
        n.where = where.get(n.owner, "") or where.get(fwd, "")
        # a forward-named call made during backward (a hook) runs the layers last to first
        n.layer = _layer_index(fwd, groups.get(fwd), pass_first,
                               reverse=n.direction == "backward" and n.owner.endswith(".forward"))
        if n.layer is not None and n.where:
            n.where = f"{n.where}, layer {n.layer}"


def _layer_index(fwd: str, group, pass_first: dict, reverse: bool = False) -> int | None:
    """Functional.linear.21.forward among the calls made from its stack in the same pass, in call order."""
    op, _, _ = split_record(fwd)
    call = _call(fwd)
    firsts = pass_first.get(op)
    if not group or call is None or not firsts:
        return None
    starts = sorted(firsts.values())
    lo = max((c for c in starts if c <= call), default=0)
    hi = min((c for c in starts if c > call), default=1 << 62)
    same = sorted(c for c in (_call(g) for g in group if split_record(g)[0] == op and g.endswith(".forward"))
                  if c is not None and lo <= c < hi)
    if len(same) < 2 or call not in same:
        return None  # a line run once per pass says nothing of layers
    return len(same) - 1 - same.index(call) if reverse else same.index(call)
