"""Pairing: which golden record corresponds to each target record, when the two runs need not run the
same code. msprobe's names carry per-API counters (Tensor.__add__.N) that shift as soon as one side runs
one op more or fewer, so records pair by what they are instead:

- a module record by its module path and call (Module.model.layers.3.mlp.Qwen2MLP.forward.0);
- an API record by its signature (op, direction, enclosing module call from construct.json, calling line
  and layer from stack.json, forward pass, shapes and dtype kinds) in a monotone alignment of the two
  streams: the next golden record of the same signature, within a bounded look-ahead. Golden records
  passed over are golden-only, a target record with no such golden one is target-only: an extra or
  missing op shifts nothing after it.

Records with no counterpart between two pairs form a gap; a gap whose sides are a fused op and its
decomposition (equivalents.py) is compared at its boundary, and every gap is a structure difference,
said once per module kind (Structure), never a divergence by itself. Memory: the look-ahead window."""

from __future__ import annotations

from collections import deque

from verl_pdbg_conf.compare import metrics as M
from verl_pdbg_conf.compare.nodes import module_kind, module_path
from verl_pdbg_conf.compare.pipeline.equivalents import equivalent
from verl_pdbg_conf.compare.pipeline.indices import index_end
from verl_pdbg_conf.compare.pipeline.plan import AlignmentPlan, Kinship

WINDOW = 1 << 13  # golden records held while looking ahead for a target record's counterpart
FORWARDS = 1 << 17  # forward API calls remembered for their backward calls (the oldest dropped past this)
SKIP_MAX = 512  # a counterpart further ahead than this is taken for another call of the same code
LATE = 1 << 14  # module records passed over, kept by name for a counterpart that comes later (reordered grads)
MAX_KINDS = 64  # structure differences kept per pair


def _kind(dtype) -> str:
    return "float" if dtype in M.FLOAT_DTYPES else str(dtype)


def head(r) -> tuple:
    """What a record must agree in with its counterpart, shapes aside. The calling line only where no
    enclosing module is known (L1): a module's forward may be written anew (a fused MLP) and its linear
    layers are still its linear layers."""
    if r.is_module:
        return ("M", r.key)
    return (r.op, r.direction, r.scope, "" if r.scope else r.site, r.layer, r.passes)


def shapes(r) -> tuple:
    return tuple((row.state, str(row.shape), _kind(row.dtype)) for row in r.rows if row.state != "parameters")


def _same_but_site(a, b) -> bool:
    return (not a.site or not b.site) and (a.op, a.direction, a.scope, a.layer, a.passes) == \
        (b.op, b.direction, b.scope, b.layer, b.passes)


def _same_shapes(a, b) -> bool:
    if len(a.rows) != len(b.rows):
        return shapes(a) == shapes(b)
    for x, y in zip(a.rows, b.rows):
        if x.shape != y.shape and x.state != "parameters" or (x.dtype != y.dtype and _kind(x.dtype) != _kind(y.dtype)):
            return False
    return True


def signature(r) -> tuple:
    """What a record must agree in with its counterpart: op, direction, scope, calling line, layer, pass,
    and the shapes and dtype kinds of its inputs and outputs (a module record: its path and call)."""
    return head(r) if r.is_module else (*head(r), shapes(r))


def sizes(r) -> tuple:
    """shapes() as element counts: where the runs lay tensors out otherwise ([s, b, h] against [b, s, h],
    shards put together along an axis a call cannot tell)."""
    return tuple((row.state, M.numel(row.shape) if isinstance(row.shape, list) else str(row.shape), _kind(row.dtype))
                 for row in r.rows if row.state != "parameters")


def layout_signature(r) -> tuple:
    return head(r) if r.is_module else (*head(r), sizes(r))


def cross_signature(r) -> tuple:
    """signature() between two backends: a forward call outside any module pairs whatever line called it
    (each backend computes log-probs in its own code); after a backward, outside any module (an optimizer's
    step), it pairs with nothing: the parameters are laid out otherwise (fused, sharded) and a call names
    none of them, so equal shapes say nothing."""
    if r.is_module or r.scope:
        return layout_signature(r)
    if r.after_backward and r.direction == "forward":
        return ("unpaired", object())  # equal to no other signature
    return (r.op, r.direction, "", "", r.layer, r.passes, sizes(r))


def family_signature(r) -> tuple:
    """signature() where one run holds a family's parameters one per index and the other one fused tensor: an
    optimizer's step (after a backward, outside any module) names no parameter, so equal shapes say nothing
    and it pairs with nothing, as cross_signature()'s."""
    if not r.is_module and not r.scope and r.after_backward and r.direction == "forward":
        return ("unpaired", object())
    if r.is_module:
        return signature(r)
    # an argument given as None is no tensor: F.linear(x, w) inside a fused module is nn.Linear's F.linear(x, w, None)
    return (*head(r), tuple(x for x in shapes(r) if x[1] != "None"))


def anchorless_signature(r) -> tuple:
    """cross_signature() at L1, where no module anchors two backends' ops: inside the layers, ops of one
    size repeat in another order (a bias add before a residual add), so a pair there would be a guess and a
    difference found in it no divergence; only calls outside the layers pair (the log-probs)."""
    if r.layer is not None:
        return ("unpaired", object())
    return cross_signature(r)


LAYER = 4  # the layer's place in an API record's signature


def _unlayered(sig: tuple) -> tuple:
    """An API record's signature without its layer: a layer read from the call stacks of one run only (the
    other's stacks cannot say) is no difference."""
    return ("L", *sig[:LAYER], *sig[LAYER + 1:])


class Aligner:
    """for t, g, passed in Aligner(golden_records).pairs(target_records): g is t's counterpart or None;
    `passed` the golden records skipped before g (golden-only). Golden-only records left at the end come
    as (None, None, rest). The record at the head of the golden stream is tried first, by name; golden
    records are indexed by signature only once a search needs them (two runs of the same code never do)."""

    def __init__(self, golden, window: int = WINDOW, skip_max: int = SKIP_MAX, plan: AlignmentPlan = AlignmentPlan()):
        self.golden = iter(golden)
        # runs of other code (two backends, two tensor-parallel sizes) number their API calls alike by chance
        # only: there, API records pair by signature alone, and a backward by its forward's counterpart always
        self.by_name = plan.by_name
        self.signature = {Kinship.SAME_CODE: signature, Kinship.SHARDS: layout_signature,
                          Kinship.FAMILIES: family_signature,
                          Kinship.BACKENDS: cross_signature, Kinship.BACKENDS_L1: anchorless_signature}[plan.kinship]
        if plan.opaque:
            self.signature = _opaque(self.signature, plan.opaque)
        self.window, self.skip_max = window, skip_max
        self.buf: deque = deque()  # [signature or None (not indexed yet), record]
        self.base = 0  # absolute position of buf[0]
        self.indexed = 0  # absolute position from which buf's records are not indexed yet
        self.index: dict[tuple, deque] = {}
        self.done = False
        # an API call's backward pairs with its forward call's counterpart's backward: target call -> golden
        # call, or None where the forward had none (a LoRA branch's linear has the base linear's shapes);
        # kept only where the forward did not pair by its own name: a backward not listed pairs by its own
        self.forwards: dict[str, str | None] = {}
        # a module record pairs by its path whatever the order (FSDP reduces gradients when a unit's backward
        # ends): golden module records passed over wait here for a target record of their name
        self.late: dict[str, object] = {}
        self.late_paired: list = []  # golden records paired after they were passed over (for coverage)
        self.lockstep = False  # the last record paired with the golden record of its name, at the same line

    def _read(self) -> bool:
        if self.done:
            return False
        g = next(self.golden, None)
        if g is None:
            self.done = True
            return False
        self.buf.append([None, g])
        return True

    def _index_rest(self) -> None:
        for pos in range(max(self.indexed, self.base), self.base + len(self.buf)):
            entry = self.buf[pos - self.base]
            entry[0] = self.signature(entry[1])
            for key in _keys(entry[0], entry[1]):
                self.index.setdefault(key, deque()).append(pos)
        self.indexed = self.base + len(self.buf)

    def _find(self, sig: tuple):
        self._index_rest()
        while True:
            at = self.index.get(sig)
            while at and at[0] < self.base:
                at.popleft()
            if at:
                return at[0]
            if len(self.buf) >= self.window or not self._read():
                return None
            self._index_rest()

    def _pop(self):
        sig, g = self.buf.popleft()
        if sig is not None:
            for key in _keys(sig, g):
                at = self.index.get(key)
                while at and at[0] <= self.base:
                    at.popleft()
                if not at:
                    self.index.pop(key, None)
        self.base += 1
        return g

    def _take(self, pos: int) -> tuple:
        passed = []
        while self.base < pos:
            g = self._pop()
            passed.append(g)
            if g.is_module:
                self.late[g.key] = g
                if len(self.late) > LATE:
                    del self.late[next(iter(self.late))]
        g = self._pop()
        if g.is_module:
            self.late.pop(g.key, None)
        return g, passed

    def match(self, t):
        call = _api_call(t)
        if call is not None and t.direction == "backward":
            return self._backward(t, self.forwards.get(call, call))
        g, passed = self._match(t)
        if call is not None and t.direction == "forward" and (g is None or g.name != t.name or not self.by_name):
            # not cleared per mini-batch: a backward may run after the next pass has begun (verl's update)
            if len(self.forwards) >= FORWARDS:
                del self.forwards[next(iter(self.forwards))]
            self.forwards[call] = _api_call(g) if g is not None else None
        return g, passed

    def _backward(self, t, counterpart: str | None):
        """The backward of a forward call paired (or not) before: its counterpart's backward, by name."""
        if counterpart is None:
            return None, []
        name = counterpart + t.name[len(_api_call(t)):]
        if self.buf and self.buf[0][1].name == name:
            return self._take(self.base)
        return self._take_near(self._find(("N", name)))

    def _take_near(self, pos):
        """The record found at pos and those passed over, or none where it is too far ahead."""
        if pos is None or pos - self.base > self.skip_max:
            return None, []
        return self._take(pos)

    def _match(self, t):
        if not self.buf:
            self._read()
        if self.buf and (self.by_name or t.is_module):
            g = self.buf[0][1]
            # the same name, the same code: paired even if a shape changed (judged by the shape rule, or held
            # apart where the element counts differ: a flat parameter against one, compare/judge.py) where
            # the calling line says which code ran; without one, the shapes must agree too
            # a calling line known on one side only (its stack.json missing or broken) says nothing
            if g.key == t.key and (head(g) == head(t) or _same_but_site(g, t)) and \
                    (t.site or t.is_module or _same_shapes(g, t)):
                self.lockstep = True
                return self._take(self.base)
            # names and order agreeing so far are not overruled by a call stack (an identity hook changes
            # the stack, not the computation): the same name, op and shapes pair while the runs keep step
            if self.lockstep and g.key == t.key and g.op == t.op and g.direction == t.direction and \
                    g.scope == t.scope and _same_shapes(g, t):
                return self._take(self.base)
            self.lockstep = False
        sig = self.signature(t)
        g, passed = self._take_near(self._find(sig))
        if g is None and not t.is_module:
            pos = self._find(_unlayered(sig))
            if pos is not None and (t.layer is None or self.buf[pos - self.base][1].layer is None):
                g, passed = self._take_near(pos)
        if g is None and t.is_module and t.key in self.late:
            g = self.late.pop(t.key)
            self.late_paired.append(g)
        return g, passed

    def pairs(self, target):
        for t in target:
            g, passed = self.match(t)
            yield t, g, passed
        rest = [g for _sig, g in self.buf]
        self.buf.clear()
        self.index.clear()
        while self._read():
            rest.append(self.buf.popleft()[1])
            if len(rest) > self.window:
                rest = rest[-self.window:]
        if rest:
            yield None, None, rest


def _opaque(sig, modules: frozenset):
    """sig(), but an API call inside one of `modules` pairs with nothing (plan.AlignmentPlan.opaque)."""
    def opaque_signature(r) -> tuple:
        if not r.is_module and r.scope and module_path(r.scope) in modules:
            return ("unpaired", object())
        return sig(r)
    return opaque_signature


def _keys(sig: tuple, g) -> tuple:
    """The keys a golden record is found by: its signature, its name, and an API record's signature
    without its layer."""
    return (sig, ("N", g.name)) if g.is_module else (sig, ("N", g.name), _unlayered(sig))


def _api_call(r) -> str | None:
    """Functional.linear.3.backward -> Functional.linear.3: an API call's name without its direction (its
    forward and backward records share it); None for a module record."""
    if r.is_module or r.direction not in ("forward", "backward"):
        return None
    return r.name.rsplit(".", 1)[0] if r.name.endswith((".forward", ".backward")) else None


def row_pairs(t, g):
    """The rows of two paired records, by their place in the record (.input.0, .parameters.weight...)."""
    if g is None:
        return [(row, None) for row in t.rows]
    if g.name == t.name:
        if len(g.rows) == len(t.rows) and all(a.name == b.name for a, b in zip(t.rows, g.rows)):
            return list(zip(t.rows, g.rows))
        by = {row.name: row for row in g.rows}
        return [(row, by.get(row.name)) for row in t.rows]
    n, by = len(g.name), {}
    for row in g.rows:
        by[row.name[n:] if row.name.startswith(g.name) else row.name] = row
    n = len(t.name)
    return [(row, by.get(row.name[n:] if row.name.startswith(t.name) else row.name)) for row in t.rows]


def _module_kind(r) -> str:
    """model.layers.3.self_attn -> model.layers.*.self_attn; at L1 the calling line."""
    path = module_path(r.scope) if r.scope else None
    if path:
        return module_kind(path)
    return r.site or "(outside any known module)"


def _ops(records) -> tuple:
    out = []
    for r in records:
        if r.is_module:
            continue
        if not out or out[-1] != r.base:
            out.append(r.base)
    return tuple(out)


class Unpaired:
    """Records with no counterpart between two pairs."""

    def __init__(self):
        self.target: list = []
        self.golden: list = []

    def __bool__(self):
        return bool(self.target or self.golden)

    def equivalent(self) -> bool:
        t_ops, g_ops = _ops(self.target), _ops(self.golden)
        return bool(t_ops and g_ops) and equivalent(t_ops, g_ops) is not None

    def index_ends(self, closing=None) -> list[tuple]:
        """(target call, golden call) per index of an indexed family (indices.py) whose calls end in this gap on
        both sides: what each side's calls of that index end with (indices.index_end), where their outputs
        hold as many elements; not the index of `closing`, the pair after the gap (its calls go on there)."""
        after = closing.extra.get("index") if closing is not None else None
        mine: dict = {}
        theirs: dict = {}
        for into, records in ((mine, self.target), (theirs, self.golden)):
            for r in records:
                k = r.extra.get("index")
                if k is not None and k != after:
                    into.setdefault(k, []).append(r)
        out = []
        for k, recs in mine.items():
            if k not in theirs:
                continue
            tb, gb = index_end(recs), index_end(theirs[k])
            if tb is not None and gb is not None and \
                    [M.numel(o.shape) for o in tb.outputs] == [M.numel(o.shape) for o in gb.outputs]:
                out.append((tb, gb))
        return out

    def boundary(self):
        """(target record, golden record) to compare when the gap is a fused op against its decomposition,
        forward: the last call of each side (the fused op's output against the last decomposed op's), else
        None."""
        t_ops, g_ops = _ops(self.target), _ops(self.golden)
        if not (t_ops and g_ops) or equivalent(t_ops, g_ops) is None:
            return None
        if any(r.direction != "forward" for r in (*self.target, *self.golden) if not r.is_module):
            return None  # backward: a fused op's gradients are not its decomposition's last op's
        t = next((r for r in reversed(self.target) if not r.is_module), None)
        g = next((r for r in reversed(self.golden) if not r.is_module), None)
        return (t, g) if t is not None and g is not None else None


class Structure:
    """Structure differences of a pair, one per module kind and direction: the ops each side runs there
    with no counterpart (in order, each once), and the layers (or calls) where they occur."""

    def __init__(self):
        self.kinds: dict[tuple, dict] = {}
        self.records = [0, 0]  # target-only, golden-only

    def add(self, gap: Unpaired) -> None:
        self.records[0] += len(gap.target)
        self.records[1] += len(gap.golden)
        t_ops, g_ops = _ops(gap.target), _ops(gap.golden)
        if not t_ops and not g_ops:
            return  # module records only: they pair by path, a gap of them is a call made once more
        first = next((r for r in (*gap.target, *gap.golden) if not r.is_module), None) or (gap.target or gap.golden)[0]
        key = (_module_kind(first), first.direction)
        k = self.kinds.get(key)
        if k is None:
            if len(self.kinds) >= MAX_KINDS:
                return
            k = self.kinds[key] = {"t": [], "g": [], "equiv": set(), "where": set()}
        k["t"] += [o for o in t_ops if o not in k["t"]]
        k["g"] += [o for o in g_ops if o not in k["g"]]
        equiv = equivalent(t_ops, g_ops)
        if equiv:
            k["equiv"].add(equiv)
        k["where"].add(first.layer if first.layer is not None else ("call", first.order))

    def messages(self) -> list[str]:
        out = []
        for (kind, direction), k in self.kinds.items():
            t_ops, g_ops, where = tuple(k["t"]), tuple(k["g"]), k["where"]
            layers = [w for w in where if not isinstance(w, tuple)]
            count = f"{len(layers)} layer{'s' * (len(layers) != 1)}" if layers and len(layers) == len(where) else \
                f"{len(where)} time{'s' * (len(where) != 1)}"
            said = (f"target runs {_list(t_ops)} where golden runs {_list(g_ops)}" if t_ops and g_ops else
                    f"target runs {_list(t_ops)} (golden nothing there)" if t_ops else
                    f"golden runs {_list(g_ops)} (target nothing there)")
            how = "" if not k["equiv"] else f" (equivalent: {', '.join(sorted(k['equiv']))}" + \
                (", compared at its output)" if direction == "forward" else ")")
            out.append(f"{kind}{'' if direction == 'forward' else ' (' + direction + ')'}: {said}; {count}{how}")
        return out


def _list(ops: tuple, most: int = 8) -> str:
    shown = ", ".join(ops[:most])
    return shown + (f" and {len(ops) - most} more" if len(ops) > most else "")
