"""What a comparison says, shared by the run compare (pairs.py) and the rollout compare (rollout/steps.py):
a pair's status (decide(), called for both by execute.py), the reason it is not a plain verdict, the
command's exit code computed from the pairs in one place, and the one builder of their findings.

Exit codes: 0 same (every pair compared whole, none diverged); 1 diverged (at least one pair); 2 usage
(arguments or output paths refused before any dump was read); 3 incomplete (no divergence, but a pair
could not be compared because of its dumps, was compared in part, or is in one run only; also when no
pair could be compared at all); 4 error (the compare itself failed on a pair: an unexpected exception,
a worker lost; it wins over every other code, since the pairs it lost may hold the divergence)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from verl_pdbg_conf.core.findings import Finding, Severity


class Status(str, enum.Enum):
    """pairs[].status in the JSON."""
    PENDING = "pending"  # not compared yet
    SAME = "same"
    DIVERGED = "diverged"
    PARTIAL = "partial"  # no divergence in what was compared, but not all was
    MISMATCH = "mismatch"  # collected differently (task, level, token layout): not comparable
    ERROR = "error"  # not compared: a bad dump, or the compare failed (the reason says which)

    def __str__(self) -> str:
        return self.value


class Reason(str, enum.Enum):
    """pairs[].reason: why a pair is partial, mismatch or error (in the run compare, also the rule of the
    finding that says it)."""
    DUMP_MISSING = "dump-missing"
    DUMP_EMPTY = "dump-empty"
    DUMP_CORRUPT = "dump-corrupt"
    MISMATCH = "compare-mismatch"
    DATA = "compare-data"  # the runs fed the stage other data (pipeline/feeding.py): a mismatch
    METRIC = "compare-metric"
    COVERAGE = "compare-coverage"
    FAILED = "compare-failed"  # the compare itself: an unexpected exception, a worker or node lost

    def __str__(self) -> str:
        return self.value


class UsageError(ValueError):
    """Arguments or paths refused before any dump is read (exit code 2, USAGE)."""


class ExitCode(enum.IntEnum):
    SAME = 0
    DIVERGED = 1
    USAGE = 2
    INCOMPLETE = 3
    ERROR = 4


@dataclass(frozen=True)
class Note:
    """What the engine says about a compared pair; a finding of it once the pair is named (execute.py)."""
    rule: str
    message: str
    hint: str = ""
    severity: Severity = Severity.INFO
    file: str = ""  # the file it is about ("": the pair's target dump.json)


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: Reason | None = None


def decide(refused: Reason | None = None, diverged: bool = False, compared: bool = True,
           full: bool = True) -> Verdict:
    """A pair's status, for both compares: refused (nothing compared, `refused` says why) is mismatch where
    the two were collected differently and error otherwise; a divergence found is diverged; nothing at all
    compared is mismatch; else same where the pair was compared in full, partial (coverage) where not."""
    if refused is not None:
        return Verdict(Status.MISMATCH if refused == Reason.MISMATCH else Status.ERROR, refused)
    if diverged:
        return Verdict(Status.DIVERGED)
    if not compared:
        return Verdict(Status.MISMATCH, Reason.MISMATCH)
    return Verdict(Status.SAME) if full else Verdict(Status.PARTIAL, Reason.COVERAGE)


def exit_code(verdicts: Iterable[Verdict], one_sided: bool = False) -> ExitCode:
    """The command's exit code from its pairs' verdicts; `one_sided`: a (step, stage, rank) is in one run
    only. A fault of the compare wins (its pair may hide a divergence), then a divergence, then anything
    not compared whole."""
    verdicts = list(verdicts)
    if any(v.reason == Reason.FAILED for v in verdicts):
        return ExitCode.ERROR
    if any(v.status == Status.DIVERGED for v in verdicts):
        return ExitCode.DIVERGED
    if not verdicts or one_sided or any(v.status != Status.SAME for v in verdicts):
        return ExitCode.INCOMPLETE
    return ExitCode.SAME


def finding(rule: str, severity: Severity, message: str, file: str, hint: str = "") -> Finding:
    """The one builder of a compare finding, for both compares: a pair's or a run's, about a file (not a line
    in it: dumps are data, not text a user edits)."""
    return Finding(rule, severity, message, file, 1, 1, "", hint)


def tally(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """The pairs by status, and of the errors those the compare itself failed on (reason compare-failed): what
    each report says of the whole, counted here once."""
    out = {s.value: 0 for s in Status if s != Status.PENDING}
    out["failed"] = 0
    for v in verdicts:
        status = Status(v.status)  # a Status, or its value
        if status != Status.PENDING:
            out[status.value] += 1
        out["failed"] += v.reason == Reason.FAILED
    return out


FAULT_HINT = "a fault of verl-pdbg-compare itself, not of the dumps: please report it with this pair's dumps"


def failure(exc: BaseException) -> str:
    """An unexpected exception as one line for a finding: its type and text."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
