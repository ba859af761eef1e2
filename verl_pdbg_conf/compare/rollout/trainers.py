"""Two trainer runs token by token: the rollout's token walk (walk.py) with a trainer on both sides.

Where two runs' calls of a stage hold other rows (world size 2 against 1: verl's balance_batch deals rows to
ranks by length, each micro-batch is padded to its own longest row; use_remove_padding: the rows are packed
into one), no record of one is the other's, and per-call statistics can never be compared. With tensors and
each rank's token record (tokens.json: every forward's input ids, mask, positions), every token is known:
a token is keyed by its row's real tokens and its position, all calls and ranks of a side pooled, and each
paired record's per-token rows (hidden states [B, L, H] padded, [1, T, H] packed, [B * L, H] flat) are
compared at the real tokens both sides hold.

Records pair by call: a forward of the same code path runs the same ops in the same order, so the k-th call
of an op (direction kept: a backward record belongs to its forward's call) within one forward is the other
run's k-th of that op within its forward, wherever each run's forward sat. An op whose calls are not a whole
number per forward on a side (once per stage: verl's token count and its all-reduce), or not as many per
forward on both sides (the packing ops of use_remove_padding), has no counterpart: counted, never judged.
A tensor that is not per-token (a weight, a mask [B, 1, L, L], a scalar) is not compared here. Nor is a
sequence's last token: what it computes for a next token (verl's labels, the ids rolled by one over the call)
pairs it with whatever follows it in its call, another sequence's first token or padding, and nothing of it
reaches the log-probs or the loss."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from verl_pdbg_conf.compare import judge as J
from verl_pdbg_conf.compare.dumpread import DumpError, read_tokens
from verl_pdbg_conf.compare.pipeline.analysis import gap_compared
from verl_pdbg_conf.compare.pipeline.coverage import MAX_REGIONS, Counts, counts_of
from verl_pdbg_conf.compare.records import Reader, Record
from verl_pdbg_conf.compare.rollout.dumps import TOKENS
from verl_pdbg_conf.compare.rollout.tokens import Sequence, trainer_sequences
from verl_pdbg_conf.compare.rollout.walk import Walk, cell, pick


@dataclass
class Side:
    """One side's ranks: per rank its records by (op, calling line, direction) in order, its forwards' token
    record, and per such key how many calls one forward makes (None: not a whole number per forward, or not as
    many on every rank)."""

    paths: tuple
    records: list[dict] = field(default_factory=list)  # per rank: (op, site, direction) -> [Record]
    calls: list[list] = field(default_factory=list)  # per rank: tokens.json's calls
    per_call: dict = field(default_factory=dict)  # (op, site, direction) -> calls per forward, or None
    every: list[Record] = field(default_factory=list)  # all records of all ranks
    unread: int = 0  # records with a value that cannot be read
    why: str = ""  # why the side cannot be compared token by token ("" where it can)

    def sequences(self) -> list[tuple[int, Sequence]]:
        return [(r, s) for r, calls in enumerate(self.calls) for s in trainer_sequences(calls)]

    def layout(self) -> list:
        """The token ids of every call, rank after rank: two sides alike here hold the same rows per call."""
        return [c.get("input_ids") if c else None for calls in self.calls for c in calls]


def read_calls(paths: tuple) -> Side:
    """Each rank's token record (the calls), read before any dump: `why` says where there is none."""
    side = Side(tuple(paths))
    for path in paths:
        d = os.path.dirname(path)
        try:
            doc, _said = read_tokens(os.path.join(d, TOKENS))
        except OSError:
            doc = None
        calls = (doc or {}).get("calls") or []
        if doc is None or doc.get("engine") != "trainer" or not calls or any(c is None for c in calls):
            side.why = f"{d} holds no readable trainer token record ({TOKENS})"
            return side
        side.calls.append(calls)
    return side


def read_side(paths: tuple, level: str, stacks_of, side: Side | None = None) -> Side:
    """Each rank's records and token record (`side`: its token records read already); `why` says what keeps
    the side from a token compare."""
    side = side or read_calls(paths)
    if side.why:
        return side
    for path in paths:
        by: dict = {}
        try:
            for rec in Reader(path, level, stacks_of(path, level)):
                # an op's calls from one line of code: the same op run elsewhere (once per stage, or on one
                # side's own path) is another key
                by.setdefault((rec.op, rec.site, rec.direction), []).append(rec)
                side.every.append(rec)
                side.unread += bool(rec.unread)
        except (OSError, DumpError, UnicodeDecodeError) as e:
            side.why = f"{path} cannot be read ({e})"
            return side
        side.records.append(by)
    for key in {k for by in side.records for k in by}:
        counts = {len(by.get(key, ())) / len(calls) for by, calls in zip(side.records, side.calls)}
        n = counts.pop() if len(counts) == 1 else 0.0
        side.per_call[key] = int(n) if n == int(n) and n > 0 else None
    return side


@dataclass
class Result:
    """What the token compare did, as data: counts, and the first divergence (a point and its error)."""

    tokens: int = 0  # token pairs compared (at least one point)
    sequences: int = 0  # sequence pairs
    target_alone: int = 0  # sequences of one side with no twin in the other
    golden_alone: int = 0
    records: int = 0  # target records with at least one per-token row compared
    target_records: int = 0
    golden_records: int = 0
    golden_compared: int = 0
    # (tensor folder, order) of the records of each side with a per-token row compared
    hit: tuple = field(default_factory=lambda: (set(), set()))
    unpaired: dict = field(default_factory=dict)  # op -> records of it with no counterpart (both sides)
    untoken: int = 0  # paired records holding no per-token row
    skipped: int = 0  # token rows not compared: non-finite alike, or no number
    apart: int = 0  # token rows of other sizes on the two sides (a mask's row over its call's columns)
    unread_points: int = 0  # points whose tensor file cannot be read on a side
    # (tensor folder, order) of each side's records holding a tensor file that cannot be read: not compared
    unread_at: tuple = field(default_factory=lambda: (set(), set()))
    unread: int = 0  # records with a value that cannot be read
    first: tuple | None = None  # (order, target Record, row, golden row, error, tokens over the limit)
    points: list = field(default_factory=list)  # (order, target Record, row, golden row, worst error, tokens over)


def _pair_sequences(t: list, g: list) -> tuple[list, int, int]:
    """Sequences of the same tokens paired, in order where several hold the same (n samples alike)."""
    free: dict = {}
    for item in g:
        free.setdefault(tuple(item[1].tokens), []).append(item)
    pairs, alone = [], 0
    for item in t:
        mates = free.get(tuple(item[1].tokens))
        if mates:
            pairs.append((item, mates.pop(0)))
        else:
            alone += 1
    return pairs, alone, sum(len(v) for v in free.values())


@dataclass(frozen=True)
class Grid:
    """A call's token layout: (batch, seq) of its ids, and each real token's index among the call's real tokens
    in row-major order (the unpadded layout [tokens, ...] verl computes its log-probs and entropy in)."""

    batch: int
    seq: int
    real: dict  # (b, s) -> index

    @property
    def bs(self) -> tuple:
        return self.batch, self.seq


def _grid(call: dict) -> Grid:
    ids, mask = call["input_ids"], call.get("attention_mask")
    real: dict = {}
    for b, row in enumerate(ids):
        for s in range(len(row)):
            if mask is None or (b < len(mask) and s < len(mask[b]) and mask[b][s]):
                real[(b, s)] = len(real)
    return Grid(len(ids), len(ids[0]) if ids else 0, real)


def _shapes(calls: list) -> list:
    return [_grid(c) for c in calls]


def compare(t: Side, g: Side, walk: Walk) -> Result:
    res = Result(target_records=len(t.every), golden_records=len(g.every), unread=t.unread + g.unread)
    pairs, res.target_alone, res.golden_alone = _pair_sequences(t.sequences(), g.sequences())
    res.sequences = len(pairs)
    keys = [k for k, n in t.per_call.items() if n and g.per_call.get(k) == n]
    for side in (t, g):
        for k, n in side.per_call.items():
            if k not in keys:
                op = f"{k[0]} ({k[2]})"
                res.unpaired[op] = res.unpaired.get(op, 0) + sum(len(by.get(k, ())) for by in side.records)
    tshape, gshape = [_shapes(c) for c in t.calls], [_shapes(c) for c in g.calls]
    compared_tokens: set = set()
    hit = res.hit
    for key in keys:
        n = t.per_call[key]
        for k in range(n):
            first = t.records[0][key][k]
            for io in ("input", "output"):
                for i in range(len(first.tensors(io))):
                    if _by_token(t, tshape, key, n, k, io, i) and _by_token(g, gshape, key, n, k, io, i):
                        _point(t, g, key, n, k, io, i, pairs, tshape, gshape, walk, res, compared_tokens, hit)
    res.records, res.golden_compared = len(res.hit[0]), len(res.hit[1])
    paired = sum(t.per_call[k] * len(calls) for k in keys for calls in t.calls)
    res.untoken = paired - res.records
    res.tokens = len(compared_tokens)
    return res


def _point(t, g, key, n, k, io, i, pairs, tshape, gshape, walk, res, compared_tokens, hit) -> None:
    """One point (the k-th call of an op within a forward, its io's i-th tensor) at every token pair."""
    worst, over, rows, order = -1.0, 0, None, None
    bad = ""
    for ti, ((rt, st), (rg, sg)) in enumerate(pairs):
        for p, ((ct, bt, xt), (cg, bg, xg)) in enumerate(zip(st.at[:-1], sg.at[:-1])):
            trec, grec = t.records[rt][key][ct * n + k], g.records[rg][key][cg * n + k]
            ta, ga = pick(walk.tensors, trec, io, i), pick(walk.tensors, grec, io, i)
            if ta is None or ga is None:
                for seen, rec in zip(res.unread_at, (trec, grec)):
                    if _unreadable(rec, io, i):
                        seen.add((rec.tensor_dir, rec.order))
                        bad = "unread"
                bad = bad or "none"
                break  # this point holds no tensor (statistics only) or one that cannot be loaded
            a, b = token_row(ta, bt, xt, tshape[rt][ct]), token_row(ga, bg, xg, gshape[rg][cg])
            if a is None or b is None:
                break  # not a per-token tensor in this call (a weight, a 4-D mask, a scalar)
            if a.numel() != b.numel():
                res.apart += 1  # a row over its call's columns (a mask's): no token's own
                continue
            said, err = walk.judge(a, b, walk.threshold)
            if said is None:
                res.skipped += 1  # non-finite alike, or no number
                continue
            compared_tokens.add((ti, p))
            hit[0].add((trec.tensor_dir, trec.order))
            hit[1].add((grec.tensor_dir, grec.order))
            if rows is None:
                rows = (trec.tensors(io)[i], grec.tensors(io)[i])
                order = t.records[0][key][k].order
            value = err if math.isfinite(err) else math.inf
            if value > worst:
                worst = value
            if said.reason not in (J.Rule.AGREE, "") and said.reason != J.Rule.APART:
                over += 1
    if bad == "unread":
        res.unread_points += 1
    if rows is None:
        return
    rec = t.records[0][key][k]
    res.points.append((order, rec, rows[0], rows[1], worst, over))
    if over and (res.first is None or order < res.first[0]):
        res.first = (order, rec, rows[0], rows[1], worst, over)


def token_row(t, b: int, s: int, grid: Grid):
    """Token (b, s)'s row of a tensor of a call laid out as `grid`: walk.cell's [B, L, ...] and [B * L, ...],
    attention's heads first [B, heads, L, d] (every head's row; not scores [B, heads, L, L], whose rows run
    over the call's own columns), or the call's real tokens alone [tokens, ...] (padding removed)."""
    bs = grid.bs
    got = cell(t, b, s, bs)
    if got is None and t is not None and t.dim() == 4 and tuple(t.shape[:1]) + tuple(t.shape[2:3]) == tuple(bs) \
            and t.shape[3] != bs[1] and t.shape[1] != bs[1]:
        got = t[b, :, s]
    if got is None and t is not None and t.dim() >= 1 and t.shape[0] == len(grid.real) != grid.batch \
            and (b, s) in grid.real:
        got = t[grid.real[(b, s)]]
    return got


def per_token(shape, grids: list) -> bool:
    """A tensor of this shape (dump.json's) holds rows of one of these calls' tokens (token_row's layouts)."""
    if type(shape) is not list or not shape:
        return False
    for g in grids:
        bsz, n = g.bs
        if shape[:2] == [bsz, n] or (shape[0] == bsz * n != bsz) or shape[0] == len(g.real) != bsz or \
                (len(shape) == 4 and shape[0] == bsz and shape[2] == n and n not in (shape[1], shape[3])):
            return True
    return False


def _by_token(side: Side, grids: list, key, n: int, k: int, io: str, i: int) -> bool:
    """The point's tensor is laid out by tokens in every call of it on every rank (dump.json's shapes): a weight
    whose first axis happens to match one call's token count does not match them all."""
    for by, calls in zip(side.records, grids):
        for c, grid in enumerate(calls):
            rows = by[key][c * n + k].tensors(io)
            if i >= len(rows) or (not rows[i].bad and not per_token(rows[i].shape, [grid])):
                return False
    return True


def _unreadable(rec: Record, io: str, i: int) -> bool:
    """The row is unreadable in dump.json, or names a tensor file that does not load (Walk's Tensors: None)."""
    rows = rec.tensors(io)
    return i < len(rows) and (bool(rows[i].bad) or rec.file_of(rows[i]) is not None)


def _coverage(side: Side, hit: set, unread_at: set) -> dict:
    """A side's token records (those holding a per-token row of one of its rank's calls) as coverage.py's data:
    compared (a per-token row compared), or lying in a gap of one rank before a compared record, compared at
    it by the pipeline's gap rule (gap_compared; its length in token records: a packing op, attention's
    scores over the call's columns); the rest counted by op. Records holding no token's row (weights, the
    optimizer's, counts, one token's alone) are outside a token compare: counted apart."""
    compared, records, outside, unread, loose = 0, 0, 0, 0, {}
    for path, calls in zip(side.paths, side.calls):
        tdir = os.path.join(os.path.dirname(path), "dump_tensor_data")
        by = sorted((r for r in side.every if r.tensor_dir == tdir), key=lambda r: r.order)
        shapes = _shapes(calls)
        bad = [bool(r.unread) or (r.tensor_dir, r.order) in unread_at for r in by]
        marks = [(r.tensor_dir, r.order) in hit and not x for r, x in zip(by, bad)]
        token = [m or x or any(per_token(row.shape, shapes) for row in r.rows if row.state in ("input", "output"))
                 for m, x, r in zip(marks, bad, by)]
        # a gap before the first compared record, or between two, is compared at the one after it (as the
        # pipeline's are); one after the last has none after it. Its length counts token records only
        at = [-1] + [i for i, m in enumerate(marks) if m]
        inside = set()
        for a, b in zip(at, at[1:]):
            if gap_compared(sum(token[a + 1:b])):  # bracketed: b is a compared record
                inside.update(range(a + 1, b))
        for i, r in enumerate(by):
            if not token[i]:
                outside += 1
                continue
            records += 1
            if bad[i]:
                unread += 1
                continue
            if marks[i] or i in inside:
                compared += 1
            else:
                loose[r.op] = loose.get(r.op, 0) + 1
    counts = Counts("records", records, compared, records - compared - unread, unread)
    return {"records": records, "compared_records": compared, "unreadable_records": unread,
            "rank_own_records": {}, "paired_records": compared, "share": counts.share, "counts": counts,
            "modules": 0, "paired_modules": 0, "accounted_modules": 0, "uncompared_modules": {},
            "uncompared_records": dict(sorted(loose.items(), key=lambda kv: -kv[1])[:MAX_REGIONS]),
            "records_without_token_rows": outside}


def instead(job, task: str, level: str, an, notes: list):
    """The pair compared token by token where its calls hold other rows and both sides have tensors and token
    records: (Analysis, notes) to use instead of the record-by-record ones, or None (compared as it was).
    Whatever the record-by-record verdict: records of other rows neither agree nor part for a reason of their
    own (compare-data, partial; a per-call sum of other rows taken for a divergence). Where the calls hold the
    same token ids, only a record-by-record verdict of other rows (compare-data, a token layout) is checked so."""
    if task != "tensor":
        return None
    from verl_pdbg_conf.compare.pipeline.sides import stacks_of

    t, g = read_calls(job.target_replica.group or (job.target,)), read_calls(job.golden_replica.group or (job.golden,))
    if t.why or g.why or (t.layout() == g.layout() and not (an.fed or an.tokens)):
        return None  # the same token ids in the same calls: record by record holds, unless it said otherwise
    t, g = read_side(t.paths, level, stacks_of, t), read_side(g.paths, level, stacks_of, g)
    if t.why or g.why:
        return None
    o = job.options
    res = compare(t, g, Walk(o.threshold))
    if not res.tokens:
        return None  # no token of one run is the other's: other data, as the record-by-record compare says
    if res.target_alone and res.golden_alone and res.first is None and an.fed:
        return None  # each run holds rows the other does not and the shared ones agree: other data, as said
    an = analysis(res, t, g, task, o)
    return an, [_note(res, t, g, an.coverage)] + [n for n in notes if n.rule.startswith("dump-")]


def analysis(res: Result, t: Side, g: Side, task: str, options):
    """The token compare's Analysis, built as the pipeline's collector builds one."""
    from verl_pdbg_conf.compare.judge import Decision, Rule
    from verl_pdbg_conf.compare.pipeline.collecting import Collector, label_of, node

    coll = Collector(task, options.top, options.keep_nodes)
    f_order = res.first[0] if res.first else None
    for order, rec, row, grow, worst, over in sorted(res.points, key=lambda p: p[0]):
        coll.add(order, row, grow, Decision(Rule.THRESHOLD if over else Rule.AGREE, worst), rec, label_of(rec),
                 order == f_order)
    an = coll.finish()
    if res.first:
        order, rec, row, grow, worst, over = res.first
        an.first = node(order, row, grow, worst, Rule.THRESHOLD, rec, label_of(rec))
        an.first.note = (f"token by token: {over} of the {res.tokens} tokens compared are past the limit here, "
                         "no point before it is past the limit at any token")
    tc, gc = _coverage(t, res.hit[0], res.unread_at[0]), _coverage(g, res.hit[1], res.unread_at[1])
    full = all(s["share"] >= options.min_coverage and not s["unreadable_records"] for s in (tc, gc)) \
        and res.tokens > 0 and not res.target_alone and not res.golden_alone and not res.unread_points
    counts = counts_of(tc.pop("counts"), gc.pop("counts"))
    an.coverage = {"target": tc, "golden": gc, "minimum": options.min_coverage, "full": full, "counts": counts,
                   "tokens": token_counts(res)}
    return an


def token_counts(res: Result) -> dict:
    """How much the token compare compared, as data (the verdict's figures)."""
    return {"tokens": res.tokens, "sequences": res.sequences, "target_sequences_alone": res.target_alone,
            "golden_sequences_alone": res.golden_alone, "target_records_compared": res.records,
            "golden_records_compared": res.golden_compared, "records_not_paired": dict(res.unpaired),
            "paired_records_without_token_rows": res.untoken, "rows_not_compared": res.skipped,
            "rows_of_other_sizes": res.apart, "points_not_readable": res.unread_points}


def _note(res: Result, t: Side, g: Side, cov: dict):
    from verl_pdbg_conf.compare.verdict import Note

    alone = ""
    if res.target_alone or res.golden_alone:
        alone = (f"; {res.target_alone} sequence(s) of the target and {res.golden_alone} of the golden hold tokens "
                 "the other run's calls do not: not compared")
    unpaired = sum(res.unpaired.values())
    ops = ", ".join(f"{op} {n}" for op, n in sorted(res.unpaired.items(), key=lambda kv: -kv[1])[:6])
    said = (f"the runs' calls hold other rows ({len(t.layout())} call(s) on {len(t.paths)} rank(s) against "
            f"{len(g.layout())} on {len(g.paths)})" if t.layout() != g.layout() else
            "the runs' calls hold the same token ids, though record by record an input seemed to differ")
    return Note("compare-tokens",
                f"{said}: compared token by token, {res.tokens} token(s) of "
                f"{res.sequences} sequence(s) at {res.records} target and {res.golden_compared} golden record(s) "
                f"holding per-token rows{alone}; {cov['target']['records_without_token_rows']} target and "
                f"{cov['golden']['records_without_token_rows']} golden record(s) hold no token's row (weights, the "
                f"optimizer's, counts, one token's alone): outside a token compare; {unpaired} record(s) with no "
                "counterpart call"
                + (f" ({ops})" if ops else "") + f", {res.untoken} paired record(s) hold no per-token row (weights, "
                f"scores over the call's columns), {res.apart} token row(s) of other sizes (a mask's row over its "
                "call's columns), "
                f"{res.skipped} non-finite alike or of no number and {res.unread_points} tensor(s) not readable: "
                "not compared",
                "tokens keyed by their row's real tokens and position, every call and rank of a side pooled; "
                "each sequence's last token is left out (its next token is whatever follows it in its call)")
