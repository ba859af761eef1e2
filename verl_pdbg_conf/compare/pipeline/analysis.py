"""One pair through the pipeline: read both dumps (reading, stacks), combine a batch split (splits), pair
records (pairing), judge each paired row (compare/judge.py), name where an error is introduced (attribution),
and collect the analysis (collecting), with the tensor task's location of the error (locating)."""

from __future__ import annotations

import itertools
import os

from verl_pdbg_conf.compare.dumpread import STATS, check_items, said_of
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.compare.ignores import Ignorer
from verl_pdbg_conf.compare.pipeline import feeding, indices, splits
from verl_pdbg_conf.compare.pipeline.attribution import Attributor
from verl_pdbg_conf.compare.pipeline.collecting import Collector, label_of, node
from verl_pdbg_conf.compare.pipeline.coverage import Coverage
from verl_pdbg_conf.compare.judge import Decision, Judge, Rule
from verl_pdbg_conf.compare.verdict import Note
from verl_pdbg_conf.compare.pipeline.locating import describe, spread
from verl_pdbg_conf.compare.pipeline.plan import AlignmentPlan, plan_for
from verl_pdbg_conf.compare.pipeline.pairing import Aligner, Structure, Unpaired, row_pairs
from verl_pdbg_conf.compare.pipeline.stacks import skip_foreign
from verl_pdbg_conf.compare.megatron.table import Correspondence, local_expert
from verl_pdbg_conf.compare.nodes import module_kind
from verl_pdbg_conf.compare.pipeline.fusion import Fuser, Group
from verl_pdbg_conf.compare.pipeline.gradscale import GradScale
from verl_pdbg_conf.compare.pipeline.sides import PairSide, stacks_of
from verl_pdbg_conf.compare.pipeline.trees import TreeAlignment


WARNING = Severity.WARNING
GAP_COMPARED = 64  # records of one side with no counterpart between two pairs, taken as compared at them


def gap_compared(length: int, bracketed: bool = True) -> bool:
    """A gap of `length` records with no counterpart is compared at the pair after it: when one comes after it
    (`bracketed`) and the gap is short (a packing op, a mask built another way, a LoRA branch). The rule of
    the record compare and of the token compare (rollout/trainers.py) alike."""
    return bracketed and length <= GAP_COMPARED


def _calls(n: int, batch: int) -> str:
    return f"{n} call{'s' * (n != 1)} of batch {batch}"


class _Pair:
    """The state of one pair's run: what the loop hands from record to record."""

    def __init__(self, job, task: str, plan: AlignmentPlan, scale: GradScale):
        self.job = job
        self.scale = scale if scale.k != 1 else None  # the runs split the batch alike: gradients as they are
        o = job.options
        self.judge = Judge(o.metric, o.threshold, task, job.target, job.golden, o.ignore_dtype, o.dtype_aware,
                           plan.layout_free)
        self.ignorer = Ignorer(o.ignores, job.target, job.golden) if o.ignores else None
        self.coll = Collector(task, o.top, o.keep_nodes)
        self.attr = Attributor()
        self.structure = Structure()
        self.coverage = Coverage()
        self.gap = Unpaired()
        self.first = None  # (row order, row, golden row, Decision, record, label, note, received)
        self.watch = None  # the first divergence was a forward-named call after a backward: watch what follows
        self.in_backward = False
        self.both_nonfinite = None
        self.order = 0
        self.auto_dtype = ""
        self.alone: dict = {}  # splits.Split.alone of a combined split
        self.bracket = plan.bracketed  # records between two pairs count as compared at them
        self.split_side = ""
        self.apart = Apart()
        self.lost: list = []  # (dump.json, record, [why]) of statistics one run lost (_one_sided)

    def record(self, t, g, synthetic: bool = False) -> bool:
        """Judge one record pair; True where it holds a row that cannot be the same tensor as its counterpart's
        (Judge.like): then none of its rows is (a norm of a flat parameter's gradient is a scalar as a norm of
        one parameter's is), so the pair is not judged and counts as not compared."""
        rows, orders = [], []
        for row, grow in row_pairs(t, g):
            order = self.order
            if not synthetic:
                self.order += 1
            if self.ignorer is not None and self.ignorer.match(row.name, row.record) is not None:
                continue  # counted per pattern in ignorer.counts
            if row.bad or (grow is not None and grow.bad):
                continue  # a value that could not be read is never judged: its record counts as not compared
            if grow is not None and row.local != grow.local:
                continue  # one rank's own (a partial sum) against a whole tensor: not comparable (coverage)
            if grow is not None and not synthetic and self._one_sided(t, g, row, grow):
                continue
            if self.alone and grow is not None and row.shape != grow.shape:
                row, grow = self._broadcast(row, grow)
            rows.append((row, grow))
            orders.append(order)
        apart = next(((o, r, gr) for o, (r, gr) in zip(orders, rows) if gr is not None and
                      not self.judge.like(r, gr)), None)
        if apart is not None and not synthetic:
            self.apart.add(*apart, t)
        judged = []
        for row, grow in rows:
            if apart is not None:
                judged.append((row, grow, Decision(Rule.UNMATCHED if grow is None else Rule.APART, None)))
                continue
            if not self.auto_dtype and grow is not None:
                self._precision(row, grow)
            judged.append((row, grow, self.judge.row(row, grow) if self.scale is None else
                           self.scale.row(self.judge, row, grow, t)))
        if self.first is None and judged:
            self._attribute(t, judged, orders)
        label = label_of(t)
        f_order = self.first[0] if self.first else None
        for (row, grow, v), order in zip(judged, orders):
            if v.both_nonfinite and self.both_nonfinite is None:
                self.both_nonfinite = (order, row, grow, v.both_nonfinite, t, label)
            if synthetic and order != f_order:
                continue
            self.coll.add(order, row, grow, v, t, label, order == f_order, synthetic)
        return apart is not None

    def _one_sided(self, t, g, row, grow) -> bool:
        """A statistic null in one run and a number in the other, for a tensor of the same dtype and shape:
        msprobe writes null by dtype and size (an empty tensor, an integer's Mean), so one side's null is a
        value lost, and the row cannot be judged. Its records count as not compared, and it is said."""
        if type(row.shape) is not list or row.dtype != grow.dtype or row.shape != grow.shape:
            return False
        for stat, a, b in zip(STATS, row.stats, grow.stats):
            if (a is None) != (b is None):
                side, rec = ("target", t) if a is None else ("golden", g)
                why = f"{stat} of {row.name} is null in the {side}, a number in the other: not compared"
                rec.unread.append(why)
                self.lost.append((self.job.target if side == "target" else self.job.golden, rec.name, [why]))
                return True
        return False

    def _broadcast(self, row, grow):
        """A tensor the same in every call of a split, taken as batched, that the other run has broadcast."""
        from dataclasses import replace

        side, other = (row, grow) if self.split_side == "target" else (grow, row)
        shape = self.alone.get(side.name)
        if shape is not None and shape == other.shape:
            side = replace(side, shape=shape)
        return (side, other) if self.split_side == "target" else (other, side)

    def _precision(self, row, grow) -> None:
        """The runs differ in precision throughout (the first float tensors already do): judged as with
        --dtype-aware, and said so."""
        from verl_pdbg_conf.compare import metrics as M

        if row.dtype in M.FLOAT_DTYPES and grow.dtype in M.FLOAT_DTYPES:
            self.auto_dtype = "same"
            if row.dtype != grow.dtype and not (self.judge.dtype_aware or self.judge.ignore_dtype):
                self.judge.dtype_aware = True
                self.auto_dtype = (f"the runs compute in different precisions from the first tensor on ({row.dtype} "
                                   f"against {grow.dtype}): judged as with --dtype-aware")

    def _attribute(self, t, judged, orders) -> None:
        received = self.attr.level
        hit = self.attr.first_in(judged)
        if hit is None:
            return
        row, grow, v = judged[hit]
        note = ""
        if row.state == "output" and v.reason in (Rule.THRESHOLD, Rule.EXACT, Rule.NAN, Rule.INF):
            # every input and parameter of this call is equal, its output is not: an integer input whose
            # statistics cannot show the change (msprobe keeps only max/min of one) differs
            # (a positional input: token ids; position ids passed by keyword to a module say nothing of it)
            ints = [i for i, (r, gr, vv) in enumerate(judged[:hit]) if r.state == "input" and gr is not None
                    and not vv.reason and _exact(r.dtype) and r.name.rsplit(".", 1)[-1].isdigit()]
            if ints and all(not vv.reason for _r, _g, vv in judged[:hit]):
                i = ints[0]
                row, grow = judged[i][0], judged[i][1]
                v = Decision(Rule.EXACT, judged[i][2].value)
                hit = i
                note = (f"statistics equal (msprobe keeps max/min of an integer tensor), but the output of "
                        f"{t.name} differs with every other input equal")
        self.first = (orders[hit], row, grow, v, t, label_of(t), note, received)
        if t.direction == "forward" and t.after_backward and not t.is_module:
            self.watch = t

    def follow(self, t) -> None:
        """A forward-named first divergence followed by backward records of its mini-batch ran inside the
        backward pass (a hook's operation)."""
        w = self.watch
        if w is None or t is w:
            return
        if t.direction == "backward" and t.minibatch == w.minibatch:
            self.in_backward = True
        if t.direction == "backward" or t.minibatch != w.minibatch:
            self.watch = None

    def close_gap(self, bracketed: bool = True, closing=None) -> None:
        """`closing`: the target record of the pair after the gap (None at the end)."""
        bracketed = bracketed and self.bracket
        gap, self.gap = self.gap, Unpaired()
        if not gap:
            return
        self.structure.add(gap)
        # a fused op against its decomposition, or a few ops of one side's own between two pairs (a mask built
        # another way, a LoRA branch): judged at the pairs around them; a long run of records, or one at the
        # end with no pair after it, was not compared at all
        if gap.equivalent() or gap_compared(max(len(gap.target), len(gap.golden)), bracketed):
            self.coverage.boundary(gap)
        for ends in gap.index_ends(closing):  # one expert's calls, ended otherwise: compared where they end
            self._probe(*ends)
        ends = gap.boundary()
        if ends is not None:
            self._probe(*ends)

    def _probe(self, tb, gb) -> None:
        """Two calls' outputs judged as one record pair, at the place of the target's."""
        outs = [r for r in tb.rows if r.state == "output"]
        gouts = [r for r in gb.rows if r.state == "output"]
        if not outs or len(outs) != len(gouts):
            return
        saved, self.order = self.order, tb.extra.get("order", self.order)
        probe = _Boundary(tb, outs, gouts)
        self.record(probe, probe.golden, synthetic=True)
        self.order = saved


class Apart:
    """Record pairs held apart by judging (tensors of other element counts): how many, the first (for the
    token check and the note), and where, once per place."""

    def __init__(self):
        self.records = 0
        self.first = None  # (order, row, golden row)
        self.where: dict[str, None] = {}

    def add(self, order: int, row, grow, record) -> None:
        if self.first is None:
            self.first = (order, row, grow)
        self.records += 1
        if len(self.where) < 8:
            self.where.setdefault(label_of(record) or record.site or "(outside any module)")

    def note(self) -> Note | None:
        """One compare-structure note, or None."""
        if not self.records:
            return None
        _o, row, grow = self.first
        places = ", ".join(self.where)
        return Note("compare-structure", f"{self.records} paired call(s) hold tensors of other element counts than "
                f"their counterparts' (first {row.name}: {row.shape} against {grow.shape}; in {places}): not the "
                "same tensors, so not compared",
                "a flat parameter (FSDP1 with use_orig_params=False) against single ones, or models of other "
                "sizes: no divergence by itself")


class _Boundary:
    """A fused op's outputs against the last decomposed op's, as one record pair (pairing.Unpaired.boundary)."""

    def __init__(self, tb, outs, gouts):
        self._t = tb
        self.rows = outs
        self.golden = _Golden(tb.name, gb_rows(tb.name, outs, gouts))

    def __getattr__(self, name):
        return getattr(self._t, name)


class _Golden:
    def __init__(self, name, rows):
        self.name, self.rows = name, rows


def gb_rows(name: str, outs, gouts):
    """The golden outputs renamed as the target's, so that row_pairs pairs them by position."""
    from dataclasses import replace

    return [replace(g, name=t.name) for t, g in zip(outs, gouts)]


def _exact(dtype) -> bool:
    from verl_pdbg_conf.compare import metrics as M

    return M.exact_dtype(dtype)


def _aligned(records, alignment):
    for r in records:
        alignment.rename(r)
        yield r


class _Backends:
    """Two backends' module trees: the Correspondence (megatron/table.py) and which side is Megatron."""

    def __init__(self, corr, mcore_side: str):
        self.corr, self.mcore_side = corr, mcore_side
        routers = corr.routers()
        m2h = corr.mcore_to_hf()
        # a Megatron module holding another module's weight (a gate on its output) against its counterpart
        gated = {m: m2h[m] for m in corr.folded if m in m2h}
        self.fuser = Fuser([Group(link.hf, link.norm_in) for link in corr.fused()], {link.hf[0] for link in routers},
                           set(gated.values()))
        self.opaque = frozenset([p for link in routers for p in (link.mcore, link.hf[0])]
                                + [p for pair in gated.items() for p in pair])

    def families(self, mcore: dict, hf: dict) -> dict:
        """trees.TreeAlignment's families the table states (Correspondence.experts): each side's modules inside
        its experts module -> that module, where Megatron holds one module per expert and the Hugging Face
        run one module for all (module dicts: each side's Tree.modules)."""
        def inside(modules: dict, roots) -> dict:
            return {p: r for r in roots for p in modules if p == r or p.startswith(r + ".")}

        hf_side = "golden" if self.mcore_side == "target" else "target"
        return {self.mcore_side: inside(mcore, self.corr.experts), hf_side: inside(hf, self.corr.experts.values())}

    def seed(self) -> dict:
        m2h = self.corr.mcore_to_hf()
        return m2h if self.mcore_side == "target" else {h: m for m, h in m2h.items()}

    def note(self) -> str:
        fused = ", ".join(sorted({f"{module_kind(link.mcore)} = {' + '.join(p.rsplit('.', 1)[-1] for p in link.hf)}"
                                  for link in self.corr.fused()}))
        return (f"the {self.mcore_side} is Megatron, the other a Hugging Face model: modules paired by mbridge's "
                f"{self.corr.model} table ({len(self.corr.links)} modules, {len(self.corr.parents)} enclosing ones)"
                + (f"; fused modules against their parts' concatenation: {fused}" if fused else "")
                + "; [s, b, h] against [b, s, h] is a layout, not a difference")


def _index_scopes(alignment) -> tuple:
    """Each side's indices.Scopes, or None where it has no indexed family."""
    fams = indices.families(alignment.family, alignment.roots)
    out = []
    for side, tree in (("target", alignment.target), ("golden", alignment.golden)):
        sc = indices.Scopes(side, alignment.family[side], fams, tree.modules)
        out.append(sc if sc else None)
    return tuple(out)


def _trees(tside, gside, level: str):
    """The two module trees aligned (mix, L0), or None where they are the same or cannot be read; and the
    two backends' correspondence, or None."""
    if level not in ("mix", "L0"):
        return None, None
    t, g = tside.tree(), gside.tree()
    if t is None or g is None:
        return None, None
    backends = None
    for side, mc, hf in (("target", t, g), ("golden", g, t)):
        corr = Correspondence(mc.modules, hf.modules)
        if corr:
            backends = _Backends(corr, side)
            break
    families, roots = None, None
    if backends is not None:
        mc, hf = (t, g) if backends.mcore_side == "target" else (g, t)
        families = backends.families(mc.modules, hf.modules)
        roots = backends.corr.experts if backends.mcore_side == "target" else \
            {h: m for m, h in backends.corr.experts.items()}
    a = TreeAlignment(t, g, backends.seed() if backends else None, families, roots)
    return (None if a.identity else a), backends


MEGATRON_FILES = "megatron/core/"  # where megatron-core's code runs from, in a call stack's file names
STACK_PROBE = 1 << 21  # bytes of stack.json read to tell whose code ran


def _megatron_stacks(path: str) -> bool:
    stack = os.path.join(os.path.dirname(path), "stack.json")
    if check_items(stack):
        return False  # not read whole: says nothing
    try:
        with open(stack, errors="replace") as f:
            return MEGATRON_FILES in f.read(STACK_PROBE)
    except OSError:
        return False


def _l1_backends(job, level: str) -> str:
    """At L1 (no module records): the side whose call stacks run megatron-core where the other's do not, or ""."""
    if level != "L1":
        return ""
    t, g = _megatron_stacks(job.target), _megatron_stacks(job.golden)
    return "target" if t and not g else "golden" if g and not t else ""


def run_pipeline(job, task: str, level: str, streams: tuple = (None, None)):
    """-> (Analysis, [verdict.Note], the path of an empty dump or "")."""
    broken = _broken_files(job, level)
    no_stacks = any(name == "stack.json" for name, _f, _w in broken)
    tstacks, gstacks = (None, None) if no_stacks else (stacks_of(job.target, level), stacks_of(job.golden, level))
    if tstacks is not None and gstacks is not None:
        skip_foreign(tstacks, gstacks)
    construct = not any(name == "construct.json" for name, _f, _w in broken)
    # streams: each side's DumpReader its header was read from (engine.compare_pair), or None
    tside = PairSide(job.target, job.target_replica, level, tstacks, construct, streams[0])
    gside = PairSide(job.golden, job.golden_replica, level, gstacks, construct, streams[1])
    treader, greader = tside.reader, gside.reader
    titer, giter = tside.records(), gside.records()
    alignment, backends = _trees(tside, gside, level)
    l1_mcore = _l1_backends(job, level)
    if backends is not None:
        if backends.mcore_side == "target":
            giter = backends.fuser(giter)
        else:
            titer = backends.fuser(titer)
    scopes = (None, None)
    if alignment is not None:
        titer, giter = alignment.fuse(titer, giter)
        titer = _aligned(titer, alignment)
        scopes = _index_scopes(alignment)
        if scopes[0] is not None:
            titer = scopes[0](titer)
        if scopes[1] is not None:
            giter = scopes[1](giter)
    t0, g0 = next(titer, None), next(giter, None)
    tstream = itertools.chain([t0], titer) if t0 is not None else iter(())
    gstream = itertools.chain([g0], giter) if g0 is not None else iter(())
    # shares of the batch put together (data, expert parallelism): the first call holds them all, not one
    # micro-batch's
    split = splits.detect(t0, g0) if t0 is not None and g0 is not None and tside.batch == gside.batch == 1 \
        else None
    if split is not None:
        if split.side == "target":
            tstream = splits.combine(tstream, split)
        else:
            gstream = splits.combine(gstream, split)
    plan = plan_for(backends is not None, bool(l1_mcore), tside.merged or gside.merged,
                    backends.opaque if backends is not None else frozenset(),
                    alignment is not None and any(alignment.family.values()))
    p = _Pair(job, task, plan, GradScale(tside.batch / gside.batch))
    if alignment is not None:
        p.coverage.target.family, p.coverage.golden.family = alignment.family["target"], alignment.family["golden"]
    if split is not None:
        p.alone, p.split_side = split.alone, split.side
    aligner = Aligner(gstream, plan=plan)
    for t, g, passed in aligner.pairs(tstream):
        p.coverage.golden_only(passed)
        p.coverage.late(aligner.late_paired)
        if t is None:
            p.gap.golden.extend(passed)
            break
        p.gap.golden.extend(passed)
        p.follow(t)
        if g is None:
            t.extra["order"] = p.order
            p.gap.target.append(t)
        else:
            p.close_gap(closing=t)
        apart = p.record(t, g)
        # after judging: a row found unreadable there (_one_sided) is not compared
        p.coverage.pair(t, g, compared=not apart)
    p.close_gap(bracketed=False)
    if treader.records == 0:
        return None, [], job.target
    if greader.records == 0:
        return None, [], job.golden
    notes = _read_notes(job, broken, tside.unread + gside.unread + p.lost)
    notes += _layout_notes(backends, (("target", tside), ("golden", gside)))
    if l1_mcore:
        notes.append(Note("compare-backends", f"the {l1_mcore} runs Megatron (its call stacks run {MEGATRON_FILES}), the "
                      "other does not: at L1 no module record says which op of one is which of the other, so only "
                      "the calls outside the model's layers are compared (the log-probs): a difference there "
                      "says the runs part, not where",
                      "collect both at level mix: modules then pair by mbridge's table"))
    return _finish(p, treader, greader, split, task, alignment, notes, any(s.looped for s in scopes if s))


USES = {"construct.json": ("mix", "L0"), "stack.json": ("L1", "mix")}  # the levels whose pairing reads each


def _broken_files(job, level: str) -> list:
    """(name, path, why) of each construct.json and stack.json of the pair that the level reads and that cannot
    be read whole (dumpread.check_items)."""
    out = []
    for path in (*(job.target_replica.group or (job.target,)), *(job.golden_replica.group or (job.golden,))):
        for name, levels in USES.items():
            f = os.path.join(os.path.dirname(path), name)
            why = check_items(f) if level in levels else ""
            if why:
                out.append((name, f, why))
    return out




def _side_of(job, f: str) -> str:
    """target or golden: whose rank directory holds file f."""
    d = os.path.dirname(f)
    return "target" if any(os.path.dirname(p) == d for p in (job.target, *job.target_replica.group)) else "golden"


def _read_notes(job, broken: list, unread: list) -> list:
    """One finding per file (its path the finding's file): a construct.json or stack.json not used, the records
    of a dump.json not read."""
    notes = []
    for name, f, why in broken:
        what = "each call's enclosing module" if name == "construct.json" else "each call's calling line and layer"
        notes.append(Note(f"dump-{name.split('.')[0]}", f"the {_side_of(job, f)}'s {name} {why}: {what} is not used, "
                      "in either run",
                      f"not what msprobe writes (an interrupted writer, an edited file): pairing goes on by record "
                      f"names alone; collect the stage again to have {name} back", WARNING, f))
    by_file: dict = {}  # file -> record -> why (a record's rows said together)
    for f, record, why in unread:
        by_file.setdefault(f, {}).setdefault(record, []).extend(why)
    for f, records in by_file.items():
        said = [f"{record}: {'; '.join(why)}" for record, why in records.items()]
        head = said_of(said, " | ")
        notes.append(Note("dump-value", f"the {_side_of(job, f)}'s dump.json: {len(said)} record{'s' * (len(said) != 1)} "
                      "not compared, a value in "
                      f"{'them' if len(said) != 1 else 'it'} cannot be read: {head}",
                      "not what msprobe writes (the file was edited or overwritten): those records count as not "
                      "compared, so the pair is at best partial", WARNING, f))
    return notes


def _layout_notes(backends, sides) -> list:
    notes = []
    if backends is not None:
        note = backends.note()
        if backends.fuser.left_out:
            note += (f"; {backends.fuser.left_out} gradients of a fused module's input left out (the sum of its "
                     "parts', compared where it arrives)")
        notes.append(Note("compare-backends", note, ""))
    for name, side in sides:
        notes += [Note("compare-layout", said) for said in side.notes(name)]
    return notes


def uncompared_near(module: str | None, coverage: dict | None) -> list[str]:
    """The uncompared modules (coverage patterns, * for a number) inside `module` or inside its parent: where
    an error first seen at `module` may have been introduced unseen (an MoE router's gradient first to part
    where the experts beside it have no counterpart)."""
    if not module or not coverage:
        return []
    parent = module.rpartition(".")[0] or module
    scope = parent.split(".")
    out = []
    for side in ("target", "golden"):
        for pattern in (coverage.get(side) or {}).get("uncompared_modules") or {}:
            parts = pattern.split(".")
            if len(parts) > len(scope) and all(a == "*" and b.isdigit() or a == b for a, b in zip(parts, scope)):
                out.append(pattern)
    return [m for m in out if not any(m != o and m.startswith(o + ".") for o in out)][:3]


def _family_note(module: str, alignment, looped: bool) -> str:
    """Where a first divergence at `module` may come from an indexed family compared only at its enclosing
    module's boundary (inside it, or beside it), and why its index cannot be said ("" where there is none)."""
    inner = alignment.families_in(module)
    beside = [] if inner else alignment.families_in(module.rpartition(".")[0])
    if not inner and not beside:
        return ""
    if inner:
        said = (f"what parts here is inside {', '.join(inner)} (one module per index in one run, one module in the "
                f"other: compared at {module}'s boundary), or {module}'s own ops; its paired parts before it agree")
    else:
        said = (f"{', '.join(beside)} beside it (one module per index in one run, one module in the other) "
                f"compared only at {module.rpartition('.')[0]}'s boundary: the error may be introduced there and "
                "first seen here")
    if looped:
        return said
    why = ("the one module's calls name no index at this level (module calls only): collect at mix"
           if _called_per_index(inner or beside, alignment) else
           "the one module runs every index's rows in one call, and statistics hold them all at once (transformers "
           "runs its experts one at a time with experts_implementation=\"eager\")")
    return f"{said}; which index cannot be said: {why}"


def _called_per_index(roots: list[str], alignment) -> bool:
    """One of these families' one module calls a part of its own once per index (trees.TreeAlignment.per_index)."""
    pairs = {**alignment.roots, **{g: t for t, g in alignment.roots.items()}}
    every = set(roots) | {pairs[r] for r in roots if r in pairs}
    return any(c.startswith(f + ".") for f in every for c in alignment.per_index)


def _finish(p: _Pair, treader, greader, split, task: str, alignment=None, notes=None, looped: bool = False):
    """`looped`: an indexed family's one module was seen running its indices one at a time (indices.py)."""
    an = p.coll.finish()
    an.coverage = p.coverage.finish(p.job.options.min_coverage)
    an.minibatches = treader.minibatch + 1
    an.ignored = p.ignorer.counts if p.ignorer is not None else {}
    notes = list(notes or [])
    tokens = p.apart.first
    if tokens and p.judge.layout_free and (p.first is None or tokens[0] <= p.first[0]):
        _o, row, grow = tokens
        if row.state == "input" and _exact(row.dtype):
            an.tokens = (f"the runs were fed token ids laid out otherwise ({row.name}: {row.shape} against "
                         f"{grow.shape}): padding removed or kept, sequences packed, other micro-batches; every "
                         "tensor after it covers other tokens, and statistics cannot tell which")
    if p.first:
        order, row, grow, v, rec, label, note, received = p.first
        an.first = node(order, row, grow, v.value, v.reason, rec, label)
        an.first.golden_nonfinite = v.golden_nonfinite
        an.first.note = note
        an.first.received = received
        if not an.tokens:
            an.fed = feeding.fed_otherwise(row, grow, v.reason)
        index = rec.extra.get("index")
        if index is not None:  # one index's calls of an indexed family: named by the golden's module and the index
            an.first.module, an.first.expert = index
        if alignment is not None and an.first.module and not note and an.first.expert is None:
            an.first.note = _family_note(an.first.module, alignment, looped)
        # an expert's module (the target's path; an expert-parallel group's renamed global), named by its
        # index where that is the model's (not a rank left out of its expert-parallel group)
        if an.first.expert is None and an.first.module and p.job.target_replica.lone != "expert":
            an.first.expert = local_expert(an.first.module)
        if p.in_backward:
            an.first.direction = "backward"
            an.first.note = "a forward-named call made during the backward pass (a hook's operation)"
        hidden = uncompared_near(an.first.module, an.coverage)
        if hidden and not an.first.note:
            an.first.note = (f"{', '.join(hidden)} beside or inside it were not compared (no counterpart in the "
                             "other run): the error may be introduced there and first seen here")
        if task == "tensor" and grow is not None:
            try:
                where = spread(p.judge, row, grow, p.judge.limit)
            except (ValueError, TypeError, MemoryError):
                where = None  # tensor files that do not load as two arrays of one shape: nothing to say
            if where:
                an.first.in_tensor = where
                notes.append(Note("compare-tensor", f"{row.name}: {describe(where)}", ""))
    if p.both_nonfinite:
        order, row, grow, kind, rec, label = p.both_nonfinite
        an.both_nonfinite = node(order, row, grow, None, kind, rec, label)
    if p.judge.suggest:
        notes.append(Note("compare-dtype", p.judge.suggest, "or --ignore-dtype to keep the threshold"))
    if p.auto_dtype not in ("", "same"):
        notes.append(Note("compare-dtype", p.auto_dtype, ""))
    if p.judge.dtype_aware and p.judge.lowp_eps:
        notes.append(Note("compare-dtype", f"--dtype-aware: threshold {p.judge.limit:.3g} (machine epsilon of the "
                      "lower precision the runs differ in); " + p.attr.note(p.judge.limit), ""))
    elif p.attr.absorbed:
        notes.append(Note("compare-judged", p.attr.note(p.judge.limit), ""))
    if p.apart.note():
        notes.append(p.apart.note())
    if p.scale is not None and p.scale.note():
        notes.append(Note("compare-judged", p.scale.note(), ""))
    for msg in p.structure.messages():
        notes.append(Note("compare-structure", msg, "no counterpart in the other run: not a divergence by itself"))
    if alignment is not None and alignment.renamed:
        notes.append(Note("compare-modules", f"module trees aligned: {alignment.renamed} target module(s) pair with "
                      "golden ones under other paths (wrappers)", ""))
    if alignment is not None and alignment.family_note():
        notes.append(Note("compare-modules", alignment.family_note(), ""))
    if split is not None:
        t_calls = _calls(split.parts, split.batch[0]) if split.side == "target" else _calls(1, split.batch[1])
        g_calls = _calls(split.parts, split.batch[0]) if split.side == "golden" else _calls(1, split.batch[1])
        notes.append(Note("compare-split", split.note((t_calls, g_calls)), ""))
    return an, notes, ""
