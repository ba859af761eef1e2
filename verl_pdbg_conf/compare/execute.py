"""Execution of a comparison: each pair's engine job in local worker processes (or this one), or on a Ray
cluster, then msprobe's compare for its CSV when asked, then the summaries; a worker that dies is retried
in this process. A fault stays in its pair: an exception from a pair's job, wherever it ran, makes that
pair `error` (reason compare-failed) and the others are compared. The output directory is refused inside
an input before anything runs."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import shutil
import tempfile

from verl_pdbg_conf.compare.engine import PairJob, PairOutcome, failed_outcome, header_of
from verl_pdbg_conf.compare.msprobe_compare import diagnose, msprobe_compare, precheck, csv_written, msprobe_remote
from verl_pdbg_conf.compare.nodes import METRICS
from verl_pdbg_conf.compare.options import ROLLOUT, default_jobs
from verl_pdbg_conf.compare.report.document import write_summaries
from verl_pdbg_conf.compare.output_paths import refuse_inside
from verl_pdbg_conf.compare.pairs import E, W, Comparison, Pair, pair_dir
from verl_pdbg_conf.compare.pipeline import feeding
from verl_pdbg_conf.compare.pipeline.coverage import coverage_text
from verl_pdbg_conf.compare.verdict import Reason, Status, UsageError, decide, failure, finding

def execute(cmp: Comparison, progress, pool, job_fn) -> Comparison:
    """Run the comparison `cmp` (paired, not compared) as its options say: job_fn(PairJob) -> PairOutcome per
    pair."""
    out_dir, jobs = cmp.options.out_dir, cmp.options.jobs
    inputs = (cmp.target, cmp.golden)
    if out_dir is not None:  # -o beside an input must not reach into it through a pair's subdirectory either
        for p in cmp.pairs:
            refuse_inside({"-o": pair_dir(out_dir, p)}, inputs)
    for side, which in [(s, "target") for s in cmp.only_in_target] + [(s, "golden") for s in cmp.only_in_golden]:
        if cmp.reference_rank is None:
            cmp.findings.append(finding("compare-pairing", W, f"{side.label} is in the {which} run only",
                                         os.path.dirname(side.path), "the other run did not collect it"))
    todo = list(cmp.pairs) if cmp.mode == ROLLOUT else _prechecked(cmp)  # its steps are directories, read by its job
    if cmp.mode != ROLLOUT:
        _refuse_metric(cmp, todo)
    if out_dir is None and cmp.msprobe_csv:  # the engine alone writes nothing without -o
        out_dir = tempfile.mkdtemp(prefix="verl-pdbg-compare-")
        try:  # an input under the temporary directory's parent (TMPDIR) is no excuse either
            refuse_inside({"the temporary output directory": out_dir}, inputs)
        except UsageError:
            os.rmdir(out_dir)
            raise
        cmp.temporary = True
    cmp.out_dir = os.path.abspath(out_dir) if out_dir else ""
    try:
        _run_engine(cmp, todo, jobs, progress, pool, job_fn)
        if cmp.msprobe_csv:
            _run_msprobe(cmp, jobs, pool)
        if cmp.out_dir:
            write_summaries(cmp)
    except BaseException:
        remove_output(cmp)
        raise
    return cmp


def _prechecked(cmp: Comparison) -> list[Pair]:
    todo = []
    for p in cmp.pairs:
        bad = [f for f in (precheck(p.target), precheck(p.golden)) if f]
        if bad:
            p.status, p.reason, p.findings = Status.ERROR, Reason(bad[0].rule), bad
        else:
            todo.append(p)
    return todo


def _refuse_metric(cmp: Comparison, todo: list[Pair]) -> None:
    """A metric no dump here can give is refused before anything runs (exit 2)."""
    spec = METRICS[cmp.metric]
    for p in todo:
        for side in (p.target, p.golden):
            head = header_of(side.path)
            task = "md5" if head.get("summary_mode") == "md5" else head.get("task")
            if task and task not in spec.tasks:
                offered = ", ".join(m for m, s in METRICS.items() if task in s.tasks)
                raise UsageError(f"--metric {cmp.metric} cannot be computed from {side.file_label}: a {task} dump "
                                 f"(metrics for it: {offered})")


def worker_pool(jobs: int | None = None) -> cf.ProcessPoolExecutor:
    """Worker processes for the engine and msprobe compare. spawn, not fork: the caller may have torch
    loaded."""
    return cf.ProcessPoolExecutor(max_workers=jobs or default_jobs(),
                                  mp_context=multiprocessing.get_context("spawn"))


def _run_engine(cmp: Comparison, todo: list[Pair], jobs: int | None, progress, shared: cf.Executor | None,
                job_fn) -> None:
    options = cmp.options.pair

    def job(p: Pair) -> PairJob:
        return PairJob(p.target.path, p.golden.path, options, p.target.replica, p.golden.replica)

    def here(p: Pair) -> PairOutcome:  # in this process: an exception stays in its pair
        try:
            return job_fn(job(p))
        except Exception as e:  # noqa: BLE001 - any fault of one pair's job is that pair's finding
            return failed_outcome(job(p), failure(e))

    done = len(cmp.pairs) - len(todo)
    if progress:
        progress(done, len(cmp.pairs))
    if not todo:
        return
    if cmp.ray:
        _spread(cmp, todo, job_fn, job, lambda p, out: _finish_engine(cmp, p, out), progress, done, len(cmp.pairs),
                lambda p, error: failed_outcome(job(p), error, "see the Ray cluster's logs for that node"))
        return
    workers = max(1, min(jobs or default_jobs(), len(todo)))
    if shared is None and workers == 1:  # one pair or -j 1: no worker process to start
        for p in todo:
            _finish_engine(cmp, p, here(p))
            done += 1
            if progress:
                progress(done, len(cmp.pairs))
        return
    retry = _pool(todo, shared or worker_pool(workers), job_fn, job, lambda p, out: _finish_engine(cmp, p, out),
                  lambda p, error: failed_outcome(job(p), error), progress, done, len(cmp.pairs), shared is None)
    for p in retry:  # a worker died (killed, out of memory) and took the pool: each again, in this process
        _finish_engine(cmp, p, here(p))


def _run_msprobe(cmp: Comparison, jobs: int | None, shared: cf.Executor | None) -> None:
    """msprobe's own compare, for its CSV: on the diverged pairs, or on every compared pair."""
    todo = [p for p in cmp.pairs
            if p.status == Status.DIVERGED or (cmp.msprobe_csv == "all" and p.status == Status.SAME)]
    if not todo:
        return
    for p in todo:
        p.out_dir = pair_dir(cmp.out_dir, p)
        os.makedirs(p.out_dir, mode=0o750, exist_ok=True)
    if cmp.ray:  # the CSV comes back as data and is written here, by the driver
        _spread(cmp, todo, msprobe_remote, lambda p: (p.target.path, p.golden.path),
                lambda p, out: _finish_csv(p, csv_written(p, out)), None, 0, len(todo),
                lambda p, error: {"result": None, "error": error, "log": None})
        return
    workers = max(1, min(jobs or default_jobs(), len(todo)))

    def job(p: Pair) -> tuple[str, str, str]:
        return p.target.path, p.golden.path, p.out_dir

    def failed(p: Pair, error: str) -> dict:
        return {"result": None, "error": error, "log": None}

    lost = _pool(todo, shared or worker_pool(workers), msprobe_compare, job, _finish_csv, failed, None, 0,
                 len(todo), shared is None)
    if lost:
        _pool(lost, worker_pool(1), msprobe_compare, job, _finish_csv, failed, None, 0, len(lost), True,
              retry=False)


def _pool(todo: list[Pair], pool: cf.Executor, fn, make_job, finish, failed, progress, done: int, total: int,
          own: bool, retry: bool = True) -> list[Pair]:
    """Run fn(make_job(p)) for each pair; finish(p, outcome) as they complete, finish(p, failed(p, error))
    where the job raised. Returns the pairs lost to a worker that died (with `retry`; otherwise they
    finish as failed)."""
    lost = []
    try:
        try:
            futures = {pool.submit(fn, make_job(p)): p for p in todo}
        except cf.process.BrokenProcessPool:
            return list(todo)  # a shared pool broken earlier
        for fut in cf.as_completed(futures):
            p = futures[fut]
            try:
                outcome = fut.result()
            except cf.process.BrokenProcessPool:
                if retry:
                    lost.append(p)
                    continue
                outcome = failed(p, "the worker process died")
            except Exception as e:  # noqa: BLE001 - raised in the worker, or its job not sent: that pair only
                outcome = failed(p, failure(e))
            finish(p, outcome)
            done += 1
            if progress:
                progress(done, total)
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
    return lost


def _spread(cmp: Comparison, todo: list[Pair], fn, make_job, finish, progress, done: int, total: int, failed) -> None:
    """On the Ray cluster: fn(make_job(p)) per pair, finish(p, outcome) as they come back; a pair the
    cluster could not run finishes with failed(p, error). Ray is imported here only."""
    from verl_pdbg_conf.compare.ray_cluster import ClusterError, run_ray

    notes: list[str] = []
    try:
        for i, outcome, node, error in run_ray(fn, [make_job(p) for p in todo], _reads, cmp.ray, cmp.options.ray_resource,
                                               notes):
            p = todo[i]
            p.ran_on = node or p.ran_on
            finish(p, failed(p, error) if error else outcome)
            done += 1
            if progress:
                progress(done, total)
    except ClusterError as e:
        raise UsageError(str(e)) from e
    cmp.findings += [finding("compare-ray", W, n, cmp.ray) for n in notes if n not in
                     {f.message for f in cmp.findings}]


def _reads(job) -> tuple[str, str]:
    """The two dump.json files a job reads (a PairJob, or msprobe's (target, golden))."""
    return (job.target, job.golden) if isinstance(job, PairJob) else tuple(job[:2])


def _finish_engine(cmp: Comparison, p: Pair, out: PairOutcome) -> None:
    try:
        _verdict(p, out)
    except Exception as e:  # noqa: BLE001 - an outcome this process cannot read is that pair's fault alone
        p.analysis, p.findings = None, []
        _verdict(p, failed_outcome(PairJob(p.target.path, p.golden.path), failure(e)))


def _verdict(p: Pair, out: PairOutcome) -> None:
    """The pair's status, by verdict.decide for both compares, and its findings."""
    p.findings += out.findings
    for n in out.notes:
        p.findings.append(finding(n.rule, n.severity, f"{p.label}: {n.message}", n.file or p.target.path, n.hint))
    p.analysis = out.analysis
    if out.rule is not None:
        v = decide(refused=Reason(out.rule))
        p.status, p.reason = v.status, v.reason
        if out.error:
            sev = W if p.status == Status.MISMATCH else E
            side = p.golden if out.path == p.golden.path else p.target
            what = f"{side.file_label} {out.error}" if out.rule.startswith("dump-") else f"{p.label}: {out.error}"
            p.findings.append(finding(p.reason.value, sev, what, out.path or p.target.path, out.hint))
        return
    if feeding.handed_other_rows(p):
        return
    cov = p.analysis.coverage
    v = decide(diverged=bool(p.analysis.first), compared=p.analysis.compared, full=cov is None or cov["full"])
    p.status, p.reason = v.status, v.reason
    if p.status == Status.PARTIAL and p.analysis.per_token is None:  # the rollout's findings say what was not
        p.findings.append(finding(Reason.COVERAGE.value, W, f"{p.label}: partly compared: {coverage_text(cov)}",
                                  p.target.path, "the regions named have no counterpart in the other run: "
                                  "nothing there was compared (--min-coverage sets the share \"same\" needs)"))


def _finish_csv(p: Pair, outcome: dict) -> None:
    p.log_file = outcome.get("log")
    if outcome.get("result"):
        p.result_file = outcome["result"]
    else:
        p.findings.append(diagnose(p, outcome))  # the engine's verdict stands; only msprobe's CSV is missing


def remove_output(cmp: Comparison) -> bool:
    """Delete the temporary output directory (no -o given) once the report is out; True if removed.
    The pairs' result and log paths are cleared: they no longer exist."""
    if not cmp.temporary:
        return False
    shutil.rmtree(cmp.out_dir, ignore_errors=True)
    for p in cmp.pairs:
        p.result_file = p.log_file = None
    return True
