"""`verl-pdbg-compare --rollout ACTOR_SAVE_PATH [ROLLOUT_SAVE_PATH]`: per profiled step, the rollout's
engine steps (rollout_generate) against the same run's actor log-prob forward (actor_compute_log_prob),
token by token. Each step is a pair job (compare_job) run by compare/execute.py as the run compare's pairs
are; its outcome is the shared Analysis (a TokenPoint as its first divergence, the per-token sections in
TokenSections), its status verdict.decide's. Returns data (pairs.Comparison); nothing is printed here."""

from __future__ import annotations

import importlib.util

import os
import re

from verl_pdbg_conf.compare.engine import PairJob, PairOutcome
from verl_pdbg_conf.compare.execute import execute
from verl_pdbg_conf.compare.nodes import Analysis, ModuleCount, RequestSummary, TokenPoint, TokenSections, TokenSummary
from verl_pdbg_conf.compare.options import ROLLOUT as MODE, CompareOptions, PairOptions
from verl_pdbg_conf.compare.pairs import Comparison, Pair, RankDump
from verl_pdbg_conf.compare.pipeline.coverage import Counts, counts_of
from verl_pdbg_conf.install_hints import TORCH_CPU
from verl_pdbg_conf.compare.rollout import dumps as D
from verl_pdbg_conf.compare.rollout import engines as E
from verl_pdbg_conf.compare.rollout import renames as RN
from verl_pdbg_conf.compare.rollout import routing as R
from verl_pdbg_conf.compare.rollout import table as T
from verl_pdbg_conf.compare.rollout import tokens as K
from verl_pdbg_conf.compare.rollout.walk import TokenResult, Walk
from verl_pdbg_conf.compare.verdict import Reason, UsageError, finding
from verl_pdbg_conf.core.findings import Finding, Severity

ROLLOUT, ACTOR = "rollout_generate", "actor_compute_log_prob"
STAGE = f"{ROLLOUT} vs {ACTOR}"  # each pair's stage: the engine's steps against the actor's forward
ALIGN_HINT = ("collect both stages with task tensor at L0, forward only (this package's "
              "+profiler=precision_debugger_rollout, conf/msprobe/tensor_rollout.json)")


def _steps(root: str) -> dict[str, str]:
    """step_N directories of a save_path (or the save_path's one step given directly)."""
    if re.fullmatch(r"step_\w+", os.path.basename(os.path.normpath(root))):
        return {os.path.basename(os.path.normpath(root)): root}
    try:
        return {e.name: e.path for e in os.scandir(root) if e.is_dir() and re.fullmatch(r"step_\w+", e.name)}
    except OSError:
        return {}


def _rank_dirs(iter_dir: str) -> dict[str, str]:
    try:
        return {e.name: e.path for e in os.scandir(iter_dir) if e.is_dir() and re.fullmatch(r"rank\d+|proc\d+", e.name)}
    except OSError:
        return {}


def _engine_steps(stage_dir: str) -> list[tuple[int, str]]:
    try:
        found = [(int(m.group(1)), e.path) for e in os.scandir(stage_dir)
                 if e.is_dir() and (m := re.fullmatch(r"step(\d+)", e.name))]
    except OSError:
        return []
    return sorted(found)


def compare_rollout(actor_root: str, rollout_root: str | None = None, options: CompareOptions = CompareOptions(),
                    progress=None, pool=None, job_fn=None) -> Comparison:
    """Per step both stages hold, a pair run by the executor (execute.py) as the run compare's are: its pool,
    Ray and -o, its fault isolation; job_fn(PairJob) -> PairOutcome is the per-step job (default
    compare_job)."""
    rollout_root = rollout_root or actor_root
    if importlib.util.find_spec("torch") is None:  # found, not imported: every value is in a torch file
        raise UsageError("--rollout compares the dumps' tensor files, which torch reads, and torch is not installed "
                         f"here: {TORCH_CPU} (or run the compare where the trainer runs)")
    for p in {actor_root, rollout_root}:
        if not os.path.isdir(p):
            raise UsageError(f"{p} is a file, not an msprobe save_path: --rollout takes the run's save_path "
                             "directory" if os.path.exists(p) else f"{p}: no such directory (give a save_path)")
    a_steps, r_steps = _steps(actor_root), _steps(rollout_root)
    keys = sorted(k for k in set(a_steps) & set(r_steps)
                  if os.path.isdir(os.path.join(r_steps[k], ROLLOUT)) and os.path.isdir(os.path.join(a_steps[k], ACTOR)))
    findings: list[Finding] = []
    for k in sorted(set(a_steps) | set(r_steps)):
        if k in keys:
            continue
        has_r = k in r_steps and os.path.isdir(os.path.join(r_steps[k], ROLLOUT))
        has_a = k in a_steps and os.path.isdir(os.path.join(a_steps[k], ACTOR))
        if has_r != has_a:
            which, where = (ROLLOUT, r_steps[k]) if has_r else (ACTOR, a_steps[k])
            other = ACTOR if has_r else ROLLOUT
            findings.append(finding("compare-pairing", Severity.WARNING, f"{k}: {which} is collected but {other} is "
                                    "not: nothing to compare it with", where,
                                    "collect rollout_generate and actor_compute_log_prob on the same steps"))
    if not keys:
        raise UsageError(f"no step holds both {ROLLOUT} (under {rollout_root}) and {ACTOR} (under {actor_root}): "
                         f"collect both on the same step")
    cmp = Comparison(os.path.abspath(rollout_root), os.path.abspath(actor_root), "", options, mode=MODE)
    cmp.findings = findings
    for k in keys:
        r_dir, a_dir = os.path.join(r_steps[k], ROLLOUT), os.path.join(a_steps[k], ACTOR)
        cmp.pairs.append(Pair(RankDump((k, ROLLOUT), "", r_dir), RankDump((k, ACTOR), "", a_dir), _step_number(k),
                              STAGE, None, name=k))
    return execute(cmp, progress, pool, job_fn or compare_job)


def _step_number(key: str) -> int | None:
    tail = key.partition("_")[2]
    return int(tail) if tail.isdigit() else None


def compare_job(job: PairJob) -> PairOutcome:
    """One step's job (job.target its rollout_generate directory, job.golden its actor_compute_log_prob one): a
    top-level function of plain data, for a worker process or a Ray task; a fault is the executor's to catch."""
    return compare_step(os.path.basename(os.path.dirname(os.path.normpath(job.target))), job.target, job.golden,
                        job.options)


def _refused(reason: Reason, engine_steps: int, findings: list[Finding]) -> PairOutcome:
    """Nothing compared, for `reason` (the findings say why)."""
    return PairOutcome(Analysis("tensor", compared=False, per_token=TokenSections(engine_steps)), rule=reason,
                       findings=findings)


def compare_step(key: str, rollout_dir: str, actor_dir: str, options: PairOptions = PairOptions()) -> PairOutcome:
    """One profiled step: read both sides, refuse what cannot be aligned, align, judge every token, sum up."""
    findings: list[Finding] = []
    engine, trainer = _read(rollout_dir, actor_dir, findings)
    refused = _refusal(engine, trainer, rollout_dir, actor_dir, findings)
    if refused:
        return _refused(refused, len(engine), findings)
    info = engine[0][1].tokens or {}
    try:
        table = E.engine_named(info.get("engine")).facts
    except E.UnknownEngine as e:
        findings.append(finding("compare-rollout-engine", Severity.ERROR, f"{rollout_dir}: {e}", rollout_dir,
                                "compare a rollout of a known engine, or add this engine's table "
                                "(docs/compare-rollout.md#another-engine)"))
        return _refused(Reason.MISMATCH, len(engine), findings)
    sections = TokenSections(len(engine), info.get("engine") or E.UNNAMED)
    findings += RN.apply([d for _, d in engine], trainer, (info.get("hf_config") or {}).get("model_type"),
                         rollout_dir)
    requests, sequences, al = _align(engine, trainer, rollout_dir, actor_dir, findings)
    judge = Walk(options.threshold, options.dtype_aware, engine_dtype=str(info.get("dtype") or ""),
                  logits_path=next((r.module for _, d in engine for r in d.records if T.is_logits(r.base, table)),
                                   "logits"),
                  shapes={(i, c): _batch_shape(call) for i, d in enumerate(trainer)
                          for c, call in enumerate(d.tokens.get("calls") or [])})
    findings += _dtypes(info, trainer, judge, rollout_dir)
    archs = info.get("architectures") or []
    moe = T.moe_for(archs, table)
    results, unpaired, routing = _judge(engine, trainer, al, judge, table, T.packed_for(archs, table), moe,
                                        R.setting(moe, info.get("hf_config") or {}, table))
    sections.routing = routing
    _misreplayed(routing, rollout_dir, findings)
    unread = sum(d.unread for _, d in engine) + sum(d.unread for d in trainer)
    return _summarize(sections, rollout_dir, results, al, requests, sequences, findings, options,
                      _unpaired(unpaired, results, actor_dir, findings, table) + _unrouted(routing, rollout_dir, findings),
                      unread)


def _unrouted(routing: dict | None, where: str, findings: list[Finding]) -> list[str]:
    """MoE layers whose routing could not be compared for some tokens, said once: the pair is then not `same`."""
    missed = (routing or {}).get("not_compared") or []
    if not missed:
        return []
    said = "; ".join(f"{m['layer']}: {m['tokens']} token(s), {m['why']}" for m in missed)
    findings.append(finding("compare-routing", Severity.WARNING, f"routing not compared for: {said}", where,
                            "collect both stages' routers at L0 with task tensor (their logits and, on the actor's "
                            "side, the top-k indices): this package's +profiler=precision_debugger_rollout"))
    return sorted({f"routing of {m['layer']}" for m in missed})


def _misreplayed(routing: dict | None, where: str, findings: list[Finding]) -> None:
    """A routing replay that handed the actor other experts than the engine chose, said once (routing.replay)."""
    rep = (routing or {}).get("replay")
    if not rep or not rep["bug"]:
        return
    wrong = [f"{l['layer']} gets the engine's {l['follows']} ({l['follows_tokens']} of the {l['follows_of']} tokens "
             "routed differently)" for l in rep["layers"] if l["layer"] in rep["misattached"]]
    differ = sum(l["routed_differently"] for l in rep["layers"])
    said = ("the replay is attached to the wrong layer: " + "; ".join(wrong) if wrong else
            "the replayed experts are not the engine's (another batch's or step's record, or rows misaligned)")
    findings.append(finding("compare-routing-replay", Severity.ERROR,
                            "the actor's routers replay a routing record (they keep experts their own logits rank "
                            f"lower) and route {differ} token-layer(s) otherwise than the engine: {said}", where,
                            "replay each layer's record at that layer: index the rollout's routed_experts by the "
                            "decoder layer number, not by the order the routers are found or fire"))


def _batch_shape(call: dict) -> tuple[int, int] | None:
    ids = call.get("input_ids") if isinstance(call, dict) else None
    return (len(ids), len(ids[0])) if isinstance(ids, list) and ids and isinstance(ids[0], list) else None


def _read(rollout_dir: str, actor_dir: str, findings: list[Finding]) -> tuple[list[tuple[int, D.Dump]], list[D.Dump]]:
    """The rollout's engine steps (the first rank of each) and the actor's ranks, their reading problems said."""
    engine: list[tuple[int, D.Dump]] = []
    for k, path in _engine_steps(rollout_dir):
        ranks = _rank_dirs(path)
        if len(ranks) > 1:
            findings.append(finding("compare-rollout-ranks", Severity.WARNING, f"{path}: {len(ranks)} rank directories; "
                                    f"only {sorted(ranks)[0]} is compared (a tensor-parallel engine's shards are not "
                                    "combined yet)", path))
        for name in sorted(ranks)[:1]:
            engine.append((k, D.read(ranks[name])))
    trainer = [D.read(p) for _, p in sorted(_rank_dirs(os.path.join(actor_dir, "step0")).items())]
    for d in [d for _, d in engine] + trainer:
        findings += d.findings
    return engine, trainer


def _refusal(engine, trainer, rollout_dir: str, actor_dir: str, findings: list[Finding]) -> Reason | None:
    """Why the pair's tokens cannot be aligned at all (said in a finding), else None."""
    mismatch = Reason.MISMATCH
    if not engine or not trainer:
        where = rollout_dir if not engine else actor_dir
        findings.append(finding("compare-missing", Severity.ERROR, f"{where}: no rank directory with a dump", where))
        return Reason.DUMP_MISSING
    # a dump that could not be read has said so already; the others decide whether tokens can be told apart
    tasks = {d.task for _, d in engine if d.task} | {d.task for d in trainer if d.task}
    if tasks - {"tensor"}:
        findings.append(finding("compare-rollout-align", Severity.ERROR, f"cannot align tokens: the dumps hold task "
                                f"{', '.join(sorted(str(t) for t in tasks))}; statistics reduce each tensor over "
                                "every token of an engine step (all requests scheduled in it) and of the whole "
                                "trainer batch, so tokens cannot be told apart", rollout_dir, ALIGN_HINT))
        return mismatch
    if any(d.tokens is None for _, d in engine) or any(d.tokens is None for d in trainer):
        return mismatch  # compare-tokens says which
    return None


def _align(engine, trainer, rollout_dir: str, actor_dir: str, findings: list[Finding]):
    """Requests, the actor's sequences (their rows tagged with the rank they came from) and the two paired."""
    requests, problems = K.rollout_requests([(k, d.tokens) for k, d in engine])
    for p in problems:
        findings.append(finding("compare-tokens", Severity.WARNING, p, rollout_dir,
                                "those tokens are not compared; collect the whole generation"))
    sequences: list[K.Sequence] = []
    for i, d in enumerate(trainer):
        for seq in K.trainer_sequences(d.tokens.get("calls") or []):
            seq.at = [(i, *a) for a in seq.at]
            sequences.append(seq)
    al = K.align(requests, sequences)
    for r in al.rollout_only:
        findings.append(finding("compare-rollout-request", Severity.WARNING, f"request {r.id} of the rollout ({len(r.tokens)} "
                                "tokens) has no sequence in the actor's batch holding its tokens", rollout_dir,
                                "the actor ran on other data (another step, a filtered batch), or the rollout dump is "
                                "missing an engine step"))
    for s in al.trainer_only:
        findings.append(finding("compare-rollout-request", Severity.WARNING, f"an actor sequence of {len(s.tokens)} tokens "
                                f"(starting {s.tokens[:6]}) is in no rollout request", actor_dir,
                                "the rollout dump misses it: another rank, or an engine step not collected"))
    return requests, sequences, al


def _judge(engine, trainer, al, judge: Walk, table: dict, packed: dict, moe: dict, setting: R.Setting) -> \
        tuple[list[TokenResult], dict[str, str], dict | None]:
    """Every aligned token through its engine step's comparison points; the engine modules (path -> class)
    that have no counterpart in the actor's dump; and the routing of MoE layers, side by side."""
    trainer_paths = [d.by_module() for d in trainer]
    found = R.routers(engine, table)
    routes, missed = R.routes(al, found, trainer_paths, judge, setting, R.captured(engine))
    per_step = {}
    unpaired: dict[str, str] = {}
    for k, d in engine:
        pts, alone = T.points(d.every, trainer_paths[0], packed, moe, table)
        per_step[k] = (pts, [r.module for r in d.records])
        unpaired.update({r.module: r.base for r in d.every if r.module in alone})
    results: list[TokenResult] = []
    for req, seq in al.pairs:
        for p in sorted(req.rows):
            if p < len(seq.at):
                pts, order = per_step[req.rows[p][0]]
                results.append(judge.token(req, seq, p, pts, order, trainer_paths, routes.get((req.id, p))))
    R.blame_experts(results, routes)
    return results, unpaired, R.summary(routes, setting, any(found.values()), missed=missed)


def _unpaired(modules: dict[str, str], results: list[TokenResult], where: str, findings: list[Finding],
              table: dict) -> list[str]:
    """Engine modules no trainer record matches, said once; the logits processor is accounted for where every
    sampled token's log-probs were compared from the token records. Returns those left uncompared."""
    if not modules:
        return []
    sampled = [t for t in results if t.logprob_engine is not None or t.logprob_engine_logits is not None]
    compared = sampled and all(t.logprob_trainer is not None and t.logprob_engine_logits is not None for t in sampled)
    left = [m for m, cls in modules.items() if not (compared and T.is_logits(cls, table))]
    why = (" (msprobe leaves a model's first child and last module out of its dump where verl is imported: "
           "lm_head in verl's actor)") if any(T.is_logits(c, table) for c in modules.values()) else ""
    said = "; its log-probs are compared from the token records" if compared and len(left) < len(modules) else ""
    findings.append(finding("compare-rollout-unpaired", Severity.WARNING if left else Severity.INFO,
                            f"engine modules with no counterpart in the actor's dump: {', '.join(modules)}{why}{said}",
                            where, "" if not left else "these modules are not compared"))
    return left


def _dtypes(info: dict, trainer: list[D.Dump], judge: Walk, where: str) -> list[Finding]:
    """The engine's dtype against the trainer's activations': a difference on purpose wants --dtype-aware."""
    engine = info.get("dtype")
    found = {t.dtype.replace("torch.", "") for d in trainer for r in d.records[:8] for t in r.outputs if t.dtype}
    floats = {x for x in found if "float" in x}
    if not engine or not floats or engine in floats:
        return []
    if judge.dtype_aware:
        return [finding("compare-dtype", Severity.INFO, f"the rollout runs {engine}, the actor {', '.join(sorted(floats))}: "
                        "judged by growth, the lower precision's rounding is not a divergence", where)]
    return [finding("compare-dtype", Severity.WARNING, f"the rollout runs {engine}, the actor {', '.join(sorted(floats))}: "
                    "their rounding differs, and is judged as a divergence", where,
                    "add --dtype-aware where the two run in different precisions on purpose")]


def _point(t: TokenResult) -> TokenPoint:
    """Where token t parts, as the divergence type both compares share."""
    g = t.gap
    layer = re.search(r"layers\.(\d+)\.", g.module + ".")
    return TokenPoint(order=g.order, row=0, name=g.record, direction="forward", kind=g.io, owner=g.record,
                      module=g.module, value=g.error, received=g.carried, layer=int(layer.group(1)) if layer else None,
                      request=t.request, position=t.position, token_id=t.token_id, logprob_gap=t.logprob_gap,
                      span=g.span, compared_at=g.at, experts=g.experts, routing=g.routing, nonfinite=g.nonfinite)


TOKEN_MAP_MAX = 20_000  # tokens the report's pictures draw (evenly taken from more)


def _token_map(results: list[TokenResult]) -> dict:
    """Every compared token in request and position order, for the report's pictures: [request, position,
    log-prob gap or None, where it parts or None]; evenly thinned to TOKEN_MAP_MAX."""
    ts = sorted((t for t in results if t.compared), key=lambda t: (K.natural(t.request), t.position))
    step = max(1, -(-len(ts) // TOKEN_MAP_MAX))
    return {"of": len(ts), "every": step,
            "tokens": [[t.request, t.position, t.logprob_gap, t.gap.module if t.gap else None] for t in ts[::step]]}


def _summarize(sections: TokenSections, rollout_dir: str, results, al, requests, sequences, findings,
               options: PairOptions, uncompared=(), unread=0) -> PairOutcome:
    """The step's analysis: its first divergence, coverage and per-token sections. `unread`: values of the pair's
    files that could not be read (dump-value, compare-tokens): not compared, so the pair is at best partial."""
    top, min_coverage = options.top, options.min_coverage
    rollout_tokens = sum(len(r.rows) for r in requests.values())
    trainer_tokens = sum(len(s.tokens) for s in sequences)
    compared_tokens = [t for t in results if t.compared]
    points = sum(t.compared for t in results)
    skipped = sum(t.skipped for t in results)
    # each rollout row and each actor token once: compared, or not (its request or sequence on one side only, a
    # row past its sequence, a token walked with no point compared); checked by Counts
    compared_in = {rid: sum(1 for t in results if t.request == rid and t.compared) for rid in requests}
    rows = Counts("tokens", rollout_tokens, len(compared_tokens),
                  sum(1 for t in results if not t.compared) + sum(len(r.rows) for r in al.rollout_only)
                  + sum(1 for req, seq in al.pairs for p in req.rows if p >= len(seq.at)))
    actor = Counts("tokens", trainer_tokens, len(compared_tokens),
                   sum(len(seq.tokens) - compared_in[req.id] for req, seq in al.pairs)
                   + sum(len(s.tokens) for s in al.trainer_only))
    cov_r = len(compared_tokens) / rollout_tokens if rollout_tokens else 0.0
    # the trainer's last token of each sequence is never computed by the engine (nothing samples after it)
    cov_t = len(compared_tokens) / max(1, trainer_tokens - len(sequences)) if sequences else 0.0
    coverage = {"rollout_tokens": rollout_tokens, "trainer_tokens": trainer_tokens,
                "tokens_compared": len(compared_tokens), "target": round(min(cov_r, 1.0), 4),
                "golden": round(min(cov_t, 1.0), 4), "points_compared": points, "points_skipped": skipped,
                "requests_aligned": len(al.pairs), "rollout_requests": len(requests),
                "uncompared_modules": list(uncompared), "unreadable": unread,
                "trainer_sequences": len(sequences), "minimum": min_coverage,
                "full": min(cov_r, cov_t) >= min_coverage and not skipped and not uncompared and not unread,
                "counts": counts_of(rows, actor)}
    diverged = [t for t in results if t.gap is not None]
    gaps = [t for t in results if t.logprob_gap is not None]
    by_req: dict[str, list[TokenResult]] = {}
    for t in results:
        by_req.setdefault(t.request, []).append(t)
    for rid, ts in sorted(by_req.items(), key=lambda kv: K.natural(kv[0])):
        lg = [abs(t.logprob_gap) for t in ts if t.logprob_gap is not None]
        first = next((t for t in ts if t.gap is not None), None)
        sections.requests.append(RequestSummary(rid, len(ts), sum(1 for t in ts if t.compared),
                                                sum(1 for t in ts if t.gap is not None), max(lg) if lg else None,
                                                _point(first) if first else None))
    ranked = sorted(gaps, key=lambda t: -abs(t.logprob_gap))
    sections.tokens = [TokenSummary(t.request, t.position, t.token_id, t.logprob_engine, t.logprob_trainer,
                                    t.logprob_gap, t.worst, _point(t) if t.gap else None) for t in ranked[:max(top, 0)]]
    sections.summarized = True
    sections.max_logprob_gap = abs(ranked[0].logprob_gap) if ranked else None
    sections.token_map = _token_map(results)
    an = Analysis("tensor", first=None, n_nodes=points, coverage=coverage, compared=bool(compared_tokens),
                  per_token=sections)
    if diverged:
        # where the error enters: the earliest point in the forward at which a token parts (a token that parts
        # later may only carry it in, through attention to that one); of those, the largest log-prob gap
        lead = min(diverged, key=lambda t: (t.gap.order, -abs(t.logprob_gap or 0.0)))
        an.first = _point(lead)
        sections.diverged_tokens = len(diverged)
        modules: dict[str, int] = {}
        for t in diverged:
            modules[t.gap.module] = modules.get(t.gap.module, 0) + 1
        sections.top = [ModuleCount(m, n) for m, n in sorted(modules.items(), key=lambda kv: -kv[1])[:top]]
    elif not compared_tokens:
        findings.append(finding("compare-rollout-align", Severity.ERROR, "no token of the rollout could be aligned "
                                "with the actor's forward", rollout_dir, ALIGN_HINT))
    return PairOutcome(an, findings=findings)
