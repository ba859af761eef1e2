"""The first-divergence engine: one pair of dump.json files read side by side as two streams and run
through the pipeline (pipeline/): reading, splits, pairing, judging (judge.py), attribution, locating, collecting,
in the order the target's records were written (forward and backward interleaved as they ran,
mini-batch by mini-batch), in memory bounded by the pairing window, not by the dump.

`compare_pair(PairJob) -> PairOutcome` is a top-level function of plain data, for a process pool or a
Ray task. A record with no counterpart is a structure difference, never a divergence by itself; a
paired tensor diverges by the rules of judge.py, and counts as the first divergence where
its error is introduced (pipeline/attribution.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader
from verl_pdbg_conf.compare.nodes import METRICS, Analysis
from verl_pdbg_conf.compare.options import PairOptions
from verl_pdbg_conf.compare.parallel.replica import Replica
from verl_pdbg_conf.compare.pipeline.analysis import run_pipeline
from verl_pdbg_conf.compare.rollout import trainers
from verl_pdbg_conf.compare.verdict import FAULT_HINT, Reason, failure


@dataclass(frozen=True)
class PairJob:
    """What to compare (each side's dump.json, and its replica's) and how."""
    target: str
    golden: str
    options: PairOptions = PairOptions()
    target_replica: Replica = Replica()
    golden_replica: Replica = Replica()


@dataclass
class PairOutcome:
    """A pair's job's result: an analysis, or nothing compared (`rule` says why; the rollout compare keeps
    its analysis's counts then), with what is said about it."""
    analysis: Analysis | None = None
    error: str = ""  # why nothing was compared
    rule: Reason | None = None  # the reason, also its finding's rule: dump-corrupt, compare-mismatch...
    path: str = ""  # the file at fault
    hint: str = ""
    notes: list = field(default_factory=list)  # verdict.Note: what is said about a compared pair
    findings: list = field(default_factory=list)  # findings already named (the rollout's: each names its file)


def failed_outcome(job: PairJob, error: str, hint: str = FAULT_HINT) -> PairOutcome:
    """The pair's job raised or was lost (`error` says how): nothing compared, the other pairs go on."""
    return PairOutcome(error=f"the compare failed: {error}", rule=Reason.FAILED, path=job.target, hint=hint)


def header_of(path: str) -> dict:
    """task, level and summary_mode of a dump, read as the pair's own job reads them (DumpReader.head: up to
    its first tensor); {} when it cannot be read."""
    return DumpReader(path, chunk=1 << 16).head()


def mismatch(t: dict, g: dict) -> str:
    """The two dumps were collected differently: no node by node comparison means anything."""
    said = []
    for key, what in (("task", "task"), ("level", "level"), ("summary_mode", "summary_mode")):
        a, b = t.get(key), g.get(key)
        if a and b and a != b:
            said.append(f"{what} {a} against {b}")
    return ", ".join(said)


def compare_pair(job: PairJob) -> PairOutcome:
    """One pair, whatever happens: an unexpected exception is returned as the pair's failure, so a worker
    process or a Ray task reports it like any outcome."""
    try:
        return _checked(job)
    except Exception as e:  # noqa: BLE001 - a fault stays in its pair
        return failed_outcome(job, failure(e))


def _checked(job: PairJob) -> PairOutcome:
    # each dump.json opened once: its header and first tensor read off the stream the pipeline then reads on
    # (one reader per side, also where both sides are the same file)
    streams = (DumpReader(job.target), DumpReader(job.golden))
    th, gh = streams[0].head(), streams[1].head()
    differ = mismatch(th, gh)
    if differ:
        return PairOutcome(error=f"the two dumps were collected differently ({differ}): not compared node by "
                           "node", rule=Reason.MISMATCH, path=job.target,
                           hint="collect both runs with the same config.json task, level and summary_mode")
    task = th.get("task") or gh.get("task") or "statistics"
    if th.get("summary_mode") == "md5":
        task = "md5"
    spec = METRICS[job.options.metric]
    if task not in spec.tasks:
        return PairOutcome(error=f"{job.options.metric} is not given by a {task} dump", rule=Reason.METRIC,
                           path=job.target, hint="choose another --metric for this task")
    try:
        return _compare(job, task, th.get("level") or "", streams)
    except (DumpError, UnicodeDecodeError) as e:
        return PairOutcome(error=str(e) if isinstance(e, DumpError) else "is not UTF-8 text",
                           rule=Reason.DUMP_CORRUPT, path=getattr(e, "path", job.target),
                           hint="the writer was interrupted (a killed worker, a full disk); collect this stage again")
    except OSError as e:
        return PairOutcome(error=f"cannot be read ({e.strerror})", rule=Reason.DUMP_MISSING,
                           path=e.filename or job.target)


def _compare(job: PairJob, task: str, level: str, streams: tuple) -> PairOutcome:
    an, notes, empty = run_pipeline(job, task, level, streams)
    if empty:
        return PairOutcome(error="holds no records", rule=Reason.DUMP_EMPTY, path=empty,
                           hint="the stage ran no hooked API or module (config.json scope/list/level, or the "
                           "stage's model was not resolved)")
    swapped = trainers.instead(job, task, level, an, notes)  # calls holding other rows: token by token
    if swapped is not None:
        an, notes = swapped
    if an.tokens:
        return PairOutcome(error=an.tokens, rule=Reason.MISMATCH, path=job.target,
                           hint="collect both with the same token layout (verl: use_remove_padding and the "
                           "log-prob micro-batch size alike), or compare the same tokens")
    out = PairOutcome(an)
    out.notes.extend(notes)
    return out
