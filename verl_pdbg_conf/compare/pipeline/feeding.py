"""Runs fed other data: where a pair's first divergence is an integer input (token ids, positions, a mask, an
index) before anything computed in the stage differed, the two runs handed the stage other rows, and every
tensor after it differs for that reason. That is not a numeric divergence, and naming a node would send the
user after the wrong bug: the pair is a mismatch (rule compare-data, exit 3) with a line saying why.

Seen in verl 0.9.1's own trainer (docs/compare-trainer-runs.md): its v1 trainer orders the batch by rollout
completion, so two runs of the same weights feed the actor's stages the same rows in another order; sampled
(not greedy) rollouts give other responses altogether."""

from __future__ import annotations

from verl_pdbg_conf.compare import metrics as M

HINT = ("statistics of other rows can never be compared: re-run both with +profiler=precision_debugger_tensor (tensors "
        "and each forward's token ids: the calls are then compared token by token, whatever rows each held), or feed "
        "both runs the same rows in the same calls: greedy rollouts (actor_rollout_ref.rollout.top_k=1), verl's "
        "legacy trainer (trainer.use_v1=False: the v1 trainer orders the batch by rollout completion), "
        "data.shuffle=False, and as many rows per call (the micro-batch size times the data-parallel size); then "
        "compare again")


def fed_otherwise(row, grow, reason: str) -> str:
    """Why a first divergence at (row, grow), diverged for `reason` (judge.Rule's value), says the runs were
    fed other data; "" where it does not (a float, an output, a shape: the token layout check's).
    An integer computed in the stage from floats that differed would follow a float's divergence, not lead."""
    if grow is None or row.state != "input" or row.direction == "backward" or not M.exact_dtype(row.dtype):
        return ""
    if str(reason) != "exact" or row.shape != grow.shape or _overwritten(row):
        return ""
    return (f"the runs handed this stage other rows: {row.name} ({row.dtype} {row.shape}), an input, differs "
            "before anything computed here did (other data, or the same rows in another order or split otherwise "
            "between calls or ranks), so every tensor after it differs for that reason: not a numeric divergence")


def _overwritten(row) -> bool:
    """The first input of an in-place op (Tensor.__setitem__, add_, __iadd__): a buffer it writes into, which
    may hold whatever the memory held (a fresh torch.empty), not rows the stage was handed."""
    parts = row.record.split(".")
    op = parts[1] if len(parts) > 2 else ""
    first = row.name.endswith(".input.0")
    return first and (op == "__setitem__" or op.startswith("__i") or (op.endswith("_") and not op.endswith("__")))


def handed_other_rows(pair) -> bool:
    """A compared pair whose analysis says the runs handed the stage other rows: made a mismatch (compare-data)
    naming the input, its counts (records ignored, coverage) kept and no node named; True where it was."""
    an = pair.analysis
    if not an.fed:
        return False
    from verl_pdbg_conf.compare.pairs import W
    from verl_pdbg_conf.compare.verdict import Reason, Status, finding

    an.first = None
    pair.status, pair.reason = Status.MISMATCH, Reason.DATA
    pair.findings.append(finding(Reason.DATA.value, W, f"{pair.label}: {an.fed}", pair.target.path, HINT))
    return True
