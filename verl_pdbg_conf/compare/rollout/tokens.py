"""Tokens of the two sides put side by side: each rollout request (its rows over the engine steps that
computed it) is matched with the trainer's sequence holding the same token ids, and each position with
the row that computed it on either side.

Rollout rows are `[num_scheduled_tokens, ...]`, every request of an engine step concatenated; the
trainer's are `[batch, seq, ...]` with left-padded prompts and right-padded responses, or one packed row
(`use_remove_padding`: position ids restart at 0 for each sequence)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Request:
    """One rollout request: per position the (engine step, row) that computed it, its token ids, and per
    sampled position (the token after the step's last row) the step, logits row and returned log-prob."""

    id: str
    tokens: dict[int, int] = field(default_factory=dict)  # position -> token id (computed rows)
    rows: dict[int, tuple[int, int]] = field(default_factory=dict)  # position -> (engine step, row)
    sampled: dict[int, dict] = field(default_factory=dict)  # position of the sampled token -> its record

    def sequence(self) -> list[int]:
        """Computed tokens in order, then the last sampled one (never fed back); [] where a position is missing."""
        n = len(self.tokens)
        seq = [self.tokens[p] for p in range(n)] if all(p in self.tokens for p in range(n)) else []
        last = self.sampled.get(n)
        if seq and last is not None:
            seq.append(last["token_id"])
        return seq

    def known(self) -> dict[int, int]:
        """Every position whose token is known: the computed ones and each sampled one."""
        out = {p: s["token_id"] for p, s in self.sampled.items()}
        out.update(self.tokens)
        return out

    def missing(self) -> list[int]:
        """Positions below the last computed one that no collected engine step computed."""
        return [p for p in range(max(self.tokens, default=-1) + 1) if p not in self.tokens]


@dataclass
class Sequence:
    """One trainer sequence: per position the (call, batch row, column) that computed it."""

    tokens: list[int]
    at: list[tuple[int, int, int]]
    next_logprob: list[float | None] = field(default_factory=list)  # per position: the next token's log-prob


def rollout_requests(steps: list[tuple[int, dict]]) -> tuple[dict[str, Request], list[str]]:
    """Requests from the engine steps' token records ((K, record) in step order); problems as text."""
    out: dict[str, Request] = {}
    problems = []
    for k, rec in steps:
        if rec.get("error"):
            problems.append(f"engine step {k}: {rec['error']}")
        sampled = rec.get("sampled") or {}
        for i, req in enumerate(rec.get("requests") or ()):
            if req is None:
                continue  # left out at reading (dumpread.read_tokens), its index kept: i is the logits row
            rid = req["request"]
            r = out.setdefault(rid, Request(rid))
            first = (req.get("rows") or [0])[0]
            positions, ids = req.get("positions") or [], req.get("token_ids") or []
            for j, (p, t) in enumerate(zip(positions, ids)):
                r.tokens[p] = t
                r.rows[p] = (k, first + j)
            s = sampled.get(rid) or {}
            tok = (s.get("token_ids") or [None])[0]
            if tok is not None and positions:
                r.sampled[positions[-1] + 1] = {"token_id": tok, "logprob": s.get("logprob"), "step": k,
                                                "logits_row": i, "logprob_logits": s.get("logprob_logits")}
    for r in out.values():
        gap = r.missing()
        if gap:
            problems.append(f"request {r.id}: positions {_ranges(gap)} were computed in no collected engine step "
                            "(a step's dump or token record is missing)")
    return out, problems


def _ranges(values: list[int]) -> str:
    out, start = [], values[0]
    for a, b in zip(values, values[1:] + [None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def trainer_sequences(calls: list[dict]) -> list[Sequence]:
    out = []
    for c, call in enumerate(calls):
        if call is None:
            continue  # left out at reading, its index kept: c is its forward's call number
        ids = call.get("input_ids") or []
        mask, pos = call.get("attention_mask"), call.get("position_ids")
        lps = call.get("next_logprobs")
        start = len(out)
        if not _rows_of_ints(ids) or (mask is not None and not _rows_of_ints(mask)) or \
                (pos is not None and not _rows_of_ints(pos)):
            continue  # not a [batch, seq] record: nothing to align (the caller counts what aligned)
        for b, row in enumerate(ids):
            if mask is not None:
                cols = [s for s, m in enumerate(mask[b]) if m]
                out.append(Sequence([row[s] for s in cols], [(c, b, s) for s in cols]))
            elif pos is not None:
                prow = pos[b] if len(pos) > b else pos[0]
                current: Sequence | None = None
                for s, (t, p) in enumerate(zip(row, prow)):
                    if p == 0 or current is None:
                        current = Sequence([], [])
                        out.append(current)
                    current.tokens.append(t)
                    current.at.append((c, b, s))
            else:
                out.append(Sequence(list(row), [(c, b, s) for s in range(len(row))]))
        for seq in out[start:]:
            seq.next_logprob = [_next(lps, b, s, seq.at[j + 1][2] if j + 1 < len(seq.at) else None)
                                for j, (_, b, s) in enumerate(seq.at)]
    return out


def _rows_of_ints(value) -> bool:
    return isinstance(value, list) and all(isinstance(r, list) and all(isinstance(x, int) for x in r) for r in value)


def _next(lps, b: int, s: int, following: int | None) -> float | None:
    """The log-prob the forward gave the sequence's next token: the one at column s + 1 of its row."""
    if lps is None or following != s + 1 or b >= len(lps) or s >= len(lps[b]):
        return None
    return lps[b][s]


@dataclass
class RequestMatch:
    pairs: list[tuple[Request, Sequence]]
    rollout_only: list[Request]
    trainer_only: list[Sequence]


def align(requests: dict[str, Request], sequences: list[Sequence]) -> RequestMatch:
    """Each request with the trainer sequence holding its tokens at their positions (prompt + response; a
    position no collected step computed is left open); requests with the same tokens (n samples of one
    prompt that happened to agree) pair in order."""
    free = list(range(len(sequences)))
    pairs, alone = [], []
    for rid in sorted(requests, key=natural):
        r = requests[rid]
        known = r.known()
        hit = next((i for i in free if known and all(p < len(sequences[i].tokens) and sequences[i].tokens[p] == t
                                                     for p, t in known.items())), None)
        if hit is None:
            alone.append(r)
            continue
        free.remove(hit)
        pairs.append((r, sequences[hit]))
    return RequestMatch(pairs, alone, [sequences[i] for i in free])


def natural(s: str):
    """Request ids in their natural order: 2 before 10."""
    return (0, int(s), "") if s.isdigit() else (1, 0, s)
