"""After the run: check a finished run's output directory against its configuration (the
guide's "How to analyze results" and "No dump directory is generated", made automatic), and
build the `msprobe compare` command line for a pair of dumps.

Layout (guide, "Output layout"): `<save_path>/step_<global step>/<stage>/step0/rank<R>/dump.json`;
this package's runtime keeps an earlier dump and writes a new session to `<stage>.<N>` beside it.
Returns data and findings; nothing is printed here."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field

from verl_pdbg_conf.compare.dumpread import check_items
from verl_pdbg_conf.core.findings import Finding, Severity

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO
MAX_PARSE_BYTES = 256 * 1024 * 1024  # larger dump.json files are compared by size only
STEP_DIR = re.compile(r"^step_(\d+)$")
STAGE_DIR = re.compile(r"^(?P<stage>[A-Za-z_][A-Za-z0-9_]*?)(?:\.(?P<n>\d+))?$")
INNER_DIR = re.compile(r"^step(\d+)$")
RANK_DIR = re.compile(r"^(rank(\d+)|proc(\d+))$")
GROWTH_RATIO = 1.5  # same stage, later step, this much larger: the reset problem


@dataclass
class Dump:
    step: int  # verl's global step (step_N)
    stage_dir: str  # e.g. actor_update or actor_update.1
    inner: str  # msprobe's step dir (step0)
    rank: str  # rank0 or proc<pid>
    path: str  # the dump.json (may not exist)
    exists: bool = False
    size: int = 0
    mtime: float = 0.0
    records: int | None = None  # entries under "data"; None when not parsed
    error: str = ""
    error_rule: str = "dump-corrupt"  # the rule compare gives the same fault (dump-missing: cannot be read)

    @property
    def stage(self) -> str:
        return STAGE_DIR.match(self.stage_dir).group("stage")

    @property
    def rel(self) -> str:
        return f"step_{self.step}/{self.stage_dir}/{self.inner}/{self.rank}"


@dataclass
class Inspection:
    save_path: str
    expected: list[str]  # step_N/stage directories the configuration writes ([] without a plan)
    dumps: list[Dump] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # one per step_N/stage directory, expected or found
    findings: list[Finding] = field(default_factory=list)
    compare: list[str] = field(default_factory=list)  # msprobe compare command lines


def _finding(rule, sev, msg, path, hint="") -> Finding:
    return Finding(rule, sev, msg, path, 1, 1, "", hint)


def scan(save_path: str) -> tuple[list[Dump], list[str]]:
    """Every step_N/<stage>/step*/rank*/ directory under save_path, and the other entries found."""
    dumps: list[Dump] = []
    other: list[str] = []
    for step_e in _entries(save_path):
        m = STEP_DIR.match(step_e.name)
        if not m or not step_e.is_dir():
            other.append(step_e.name)
            continue
        step = int(m.group(1))
        stage_entries = [e for e in _entries(step_e.path) if e.is_dir()]
        if not stage_entries:
            dumps.append(Dump(step, "", "", "", step_e.path))
        for st in stage_entries:
            inner_entries = [e for e in _entries(st.path) if e.is_dir() and INNER_DIR.match(e.name)]
            if not inner_entries:
                dumps.append(Dump(step, st.name, "", "", os.path.join(st.path, "dump.json")))
            for inner in inner_entries:
                rank_entries = [e for e in _entries(inner.path) if e.is_dir() and RANK_DIR.match(e.name)]
                if not rank_entries:
                    dumps.append(Dump(step, st.name, inner.name, "", os.path.join(inner.path, "dump.json")))
                for r in rank_entries:
                    d = Dump(step, st.name, inner.name, r.name, os.path.join(r.path, "dump.json"))
                    _stat(d)
                    dumps.append(d)
    return dumps, other


def _entries(path: str):
    try:
        return sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return []


def _stat(d: Dump) -> None:
    try:
        st = os.stat(d.path)
    except OSError:
        return
    d.exists, d.size, d.mtime = True, st.st_size, st.st_mtime


def _records(d: Dump, cache: dict):
    """The dump's "data" mapping (cached), or None when it cannot be read or is too large."""
    if d.path in cache:
        return cache[d.path]
    data = None
    if d.exists and 0 < d.size <= MAX_PARSE_BYTES:
        try:
            with open(d.path, encoding="utf-8") as fh:
                doc = json.load(fh)
            data = doc.get("data") if isinstance(doc, dict) else None
            if not isinstance(data, dict):
                d.error = "has no \"data\" mapping: not an msprobe dump"
                data = None
        except (OSError, ValueError) as e:  # the same fault as compare's dump-corrupt, said the same way
            d.error = (f"is not valid JSON ({e.msg} at line {e.lineno}): truncated or overwritten"
                       if isinstance(e, json.JSONDecodeError) else "is not UTF-8 text"
                       if isinstance(e, UnicodeDecodeError) else f"cannot be read ({e.__class__.__name__})")
            d.error_rule = "dump-missing" if isinstance(e, OSError) else "dump-corrupt"
    cache[d.path] = data
    d.records = len(data) if data is not None else None
    return data


def inspect_run(save_path: str, plan=None) -> Inspection:
    """Compare what is under save_path with what the plan (plan.Plan, or None) says the run writes."""
    expected = list(plan.dirs) if plan is not None else []
    ins = Inspection(save_path, expected)
    if os.path.exists(save_path) and not os.path.isdir(save_path):
        what = "an msprobe dump.json" if os.path.basename(save_path) == "dump.json" else "a file"
        ins.findings.append(_finding(
            "dump-layout", E, f"{save_path} is {what}, not a save_path: --inspect reads the directory a run wrote "
            "its step_<N>/<stage>/ directories into", save_path,
            "give the run's global_profiler.save_path (the directory above step_1/)"
            + ("; to compare two dump.json files, use verl-pdbg-compare" if what != "a file" else "")))
        return ins
    if not os.path.isdir(save_path):
        ins.findings.append(_finding(
            "dump-missing", E, f"{save_path} does not exist: no dump directory was generated", save_path,
            "check global_profiler.tool=precision_debugger, that global_profiler.steps holds a step the run "
            "reached, that the role profiler (actor_rollout_ref.actor.profiler.enable) is enabled, that msprobe "
            "is installed in the workers, and that a relative save_path is looked up in the workers' directory"))
        return ins
    dumps, other = scan(save_path)
    ins.dumps = dumps
    cache: dict = {}
    for d in dumps:
        if d.exists:
            _records(d, cache)

    by_dir: dict[str, list[Dump]] = {}
    for d in dumps:
        by_dir.setdefault(f"step_{d.step}/{d.stage_dir}" if d.stage_dir else f"step_{d.step}", []).append(d)
    all_ranks = sorted({d.rank for d in dumps if d.rank and d.exists})
    want_ranks = None if plan is None or plan.ranks is None else [f"rank{r}" for r in plan.ranks
                                                                    if not plan.world_size or r < plan.world_size]
    for rel in expected:
        found = by_dir.get(rel, [])
        row = {"directory": rel, "expected": True, "status": "ok", "ranks": {}}
        ins.rows.append(row)
        full = os.path.join(save_path, rel)
        if not found:
            row["status"] = "missing"
            ins.findings.append(_finding(
                "dump-missing", E, f"{rel} was not written", full,
                "the stage did not run on this step, or its dump was skipped: look in the worker logs for "
                "'PrecisionDebugger model not resolved' or 'Unknown precision_debugger stage'"))
            continue
        _check_stage_dir(ins, rel, full, found, want_ranks or all_ranks, row)

    for rel, found in sorted(by_dir.items(), key=lambda kv: _dir_key(kv[0])):
        if rel in expected:
            continue
        row = {"directory": rel, "expected": plan is None, "status": "ok", "ranks": {}}
        ins.rows.append(row)
        full = os.path.join(save_path, rel)
        if plan is not None:
            stray = _stray(rel, full, plan)
            if stray is None:
                ins.rows.pop()
                continue
            row["status"] = "not expected"
            ins.findings.append(stray)
        else:
            _check_stage_dir(ins, rel, full, found, all_ranks, row)
    for name in other:
        if name in ("compare",):
            continue
        ins.findings.append(_finding("dump-stray", W, f"{name} in {save_path} is not a step_<N> directory of this "
                                     "layout", os.path.join(save_path, name),
                                     "left by another tool or run; keep each run's save_path apart"))
    _check_growth(ins, dumps, cache)
    return ins


def _dir_key(rel: str):
    m = re.match(r"step_(\d+)(?:/(.*))?", rel)
    return (int(m.group(1)), m.group(2) or "") if m else (0, rel)


def _check_stage_dir(ins: Inspection, rel: str, full: str, found: list[Dump], want_ranks, row: dict) -> None:
    ranked = [d for d in found if d.rank]
    if not ranked:
        row["status"] = "no dump.json"
        ins.findings.append(_finding(
            "dump-missing", E, f"{rel} holds no step*/rank*/dump.json", full,
            "msprobe started but wrote nothing: 'PrecisionDebugger model not resolved' in the worker log means "
            "verl could not bind msprobe to the stage's model"))
        return
    inners = sorted({d.inner for d in ranked})
    if inners != ["step0"]:
        ins.findings.append(_finding(
            "dump-layout", W, f"{rel} has msprobe step directories {', '.join(inners)}: each stage is one "
            "session and should land in step0 only", full,
            "debugger.step() was called inside the stage, or the directory also holds another run's dump"))
    for d in ranked:
        status = "ok"
        if not d.exists:
            status = "no dump.json"
            ins.findings.append(_finding("dump-missing", E, f"{d.rel} has no dump.json", os.path.dirname(d.path),
                                         "the session was started but never stopped (a crash inside the stage?)"))
        elif d.size == 0 or d.records == 0:
            status = "empty"
            ins.findings.append(_finding("dump-empty", E, f"{d.rel}/dump.json is empty: nothing was collected", d.path,
                                         "the stage ran no hooked API or module (check config.json scope/list "
                                         "and level, and that the stage's model was resolved)"))
        elif d.error:
            status = "unreadable"
            ins.findings.append(_finding(d.error_rule, E, f"{d.rel}/dump.json {d.error}", d.path,
                                         "the writer was interrupted (a killed worker, a full disk); collect this "
                                         "stage again"))
        for name in ("construct.json", "stack.json"):  # msprobe's files beside dump.json, as the compare reads them
            why = check_items(os.path.join(os.path.dirname(d.path), name))
            if why:
                ins.findings.append(_finding(
                    f"dump-{name.split('.')[0]}", W, f"{d.rel}/{name} {why}", os.path.join(os.path.dirname(d.path), name),
                    "the compare will not use it (module scopes, call sites): the writer was interrupted or the file "
                    "was edited; collect this stage again to have it"))
                if status == "ok":
                    status = f"{name} unreadable"
        if d.rank.startswith("proc"):
            ins.findings.append(_finding(
                "dump-layout", W, f"{d.rel}: msprobe wrote proc<pid>, not rank<R>: no torch.distributed process "
                "group was initialized, so config.json's rank filter cannot apply", os.path.dirname(d.path),
                "initialize the process group before the first profiled stage"))
        row["ranks"][d.rank] = {"status": status, "bytes": d.size, "records": d.records}
    have = {d.rank for d in ranked}
    for r in want_ranks:
        if r not in have and r.startswith("rank"):
            row["status"] = "missing ranks"
            ins.findings.append(_finding("dump-missing", E, f"{rel} has no {r}", full,
                                         "that rank did not run the stage, or its dump failed"))
    if row["status"] == "ok" and any(v["status"] != "ok" for v in row["ranks"].values()):
        row["status"] = "incomplete"


def _stray(rel: str, full: str, plan) -> Finding | None:
    m = re.match(r"step_(\d+)(?:/(.*))?$", rel)
    step, stage_dir = int(m.group(1)), m.group(2) or ""
    sm = STAGE_DIR.match(stage_dir) if stage_dir else None
    stage = sm.group("stage") if sm else ""
    if sm and sm.group("n"):
        return _finding("dump-stray", W, f"{rel}: another session of {stage} at step {step}; the runtime keeps "
                        f"step_{step}/{stage} and writes later sessions beside it, so one of them is from an earlier "
                        "run (or the stage ran twice)", full, "keep one run per save_path, or compare the two")
    if step not in plan.steps:
        return _finding("dump-stray", W, f"step_{step} is not a profiled step of this configuration "
                        f"(steps {plan.steps}): left by another run", full,
                        "use a fresh save_path per run, or remove the old directories before comparing")
    if stage_dir == "":
        return None  # an empty profiled step: its expected stage directories are reported missing
    return _finding("dump-stray", W, f"{rel}: {stage} is not collected by this configuration "
                    f"(stages {', '.join(plan.stages) or 'none'}): left by another run", full,
                    "use a fresh save_path per run")


def _check_growth(ins: Inspection, dumps: list[Dump], cache: dict) -> None:
    """The reset problem: without service.reset_status() after stop(), each dump.json also holds
    every earlier session's records. Per rank, in the order the dumps were written, a dump whose
    records begin with all of the previous dump's records (same names, same values) and go on
    holds that stage's data too; the same stage growing step after step is the visible sign."""
    from verl_pdbg_conf.run.plan import RUN_ORDER

    order = {s: i for i, s in enumerate(RUN_ORDER)}
    by_rank: dict[str, list[Dump]] = {}
    for d in dumps:
        if d.exists and d.size > 0 and d.rank:
            by_rank.setdefault(d.rank, []).append(d)
    flagged = set()
    for rank, ds in by_rank.items():
        ds.sort(key=lambda d: (d.mtime, d.step, order.get(d.stage, 99), d.stage_dir))
        for prev, cur in zip(ds, ds[1:]):
            a, b = _records(prev, cache), _records(cur, cache)
            if not a or not b or len(b) <= len(a):
                continue
            keys_b = list(b)
            if keys_b[:len(a)] == list(a) and all(b[k] == v for k, v in a.items()):
                flagged.add(cur.path)
                ins.findings.append(_finding(
                    "dump-growth", E, f"{cur.rel}/dump.json begins with all {len(a)} records of {prev.rel} "
                    f"(written before it) and has {len(b)}: msprobe was not reset between the two sessions, so "
                    "this dump.json holds the earlier stage's data too", cur.path,
                    "call debugger.service.reset_status() after stop() (verl does when msprobe supports it; this "
                    "package's runtime always does), then collect again"))
        by_stage: dict[str, list[Dump]] = {}
        for d in ds:
            by_stage.setdefault(d.stage_dir, []).append(d)
        for stage_dir, seq in by_stage.items():
            seq = sorted(seq, key=lambda d: d.step)
            if len(seq) < 2 or any(d.path in flagged for d in seq):
                continue
            sizes = [d.size for d in seq]
            if all(x < y for x, y in zip(sizes, sizes[1:])) and sizes[-1] >= GROWTH_RATIO * sizes[0]:
                ins.findings.append(_finding(
                    "dump-growth", W, f"{stage_dir} dump.json of {rank} grows step after step "
                    f"({', '.join(f'step_{d.step}: {d.size} B' for d in seq)}): the reset problem, or a growing "
                    "workload", seq[-1].path, "check that msprobe is reset after each stage (guide: dump.json keeps "
                    "growing unexpectedly)"))


# ----------------------------------------------------------------------------- compare

def resolve_dumps(spec: str, save_path: str | None) -> dict[str, str]:
    """`step_N/stage` under save_path, a stage/step/rank directory or a dump.json -> {rank: dump.json}."""
    candidates = [spec]
    if save_path and not os.path.isabs(spec):
        candidates.insert(0, os.path.join(save_path, spec))
    for c in candidates:
        if os.path.isfile(c):
            return {_rank_of(c): c}
        if os.path.isdir(c):
            found = {}
            for root, dirs, files in os.walk(c):
                dirs.sort()
                if "dump.json" in files:
                    found.setdefault(_rank_of(os.path.join(root, "dump.json")), os.path.join(root, "dump.json"))
            if found:
                return found
    return {}


def _rank_of(dump_json: str) -> str:
    name = os.path.basename(os.path.dirname(dump_json))
    return name if RANK_DIR.match(name) else "rank?"


def _slug(spec: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.normpath(spec).strip("/")).strip("-")
    return s[-80:] or "dump"


def compare_commands(target: str, golden: str, save_path: str | None, out_dir: str | None = None
                     ) -> tuple[list[str], list[Finding]]:
    """`msprobe compare -tp TARGET -gp GOLDEN -o OUT` for each rank both sides hold."""
    t, g = resolve_dumps(target, save_path), resolve_dumps(golden, save_path)
    findings = []
    for spec, found in ((target, t), (golden, g)):
        if not found:
            findings.append(_finding("dump-missing", E, f"--compare {spec}: no dump.json there", spec,
                                     "give step_N/stage (under the save path), a stage directory, or a dump.json"))
    if findings:
        return [], findings
    base = out_dir or os.path.join(save_path or ".", "compare", f"{_slug(target)}_vs_{_slug(golden)}")
    pairs = []
    if len(t) == 1 and len(g) == 1:
        pairs = [(next(iter(t.values())), next(iter(g.values())), "")]
    else:
        common = sorted(set(t) & set(g), key=lambda r: (len(r), r))
        for r in common:
            pairs.append((t[r], g[r], r))
        missing = sorted(set(t) ^ set(g))
        if missing:
            findings.append(_finding("dump-missing", W, f"--compare: ranks {', '.join(missing)} are on one side only",
                                     target, "compare the ranks both runs dumped"))
    cmds = []
    for tp, gp, r in pairs:
        out = os.path.join(base, r) if r else base
        cmds.append(" ".join(["msprobe", "compare", "-tp", shlex.quote(tp), "-gp", shlex.quote(gp),
                              "-o", shlex.quote(out)]))
    return cmds, findings


# ----------------------------------------------------------------------------- rendering

def as_dict(ins: Inspection) -> dict:
    return {
        "save_path": ins.save_path,
        "expected": ins.expected,
        "directories": ins.rows,
        "compare": ins.compare,
        "diagnostics": [f.to_dict() for f in sorted(set(ins.findings), key=Finding.sort_key)],
    }


def render_text(ins: Inspection) -> str:
    L = [f"inspect {ins.save_path}" + (f" against {len(ins.expected)} expected stage directories"
                                       if ins.expected else " (no configuration: layout checks only)")]
    for row in ins.rows:
        ranks = ", ".join(f"{r} {_size(v['bytes'])}" + (f" {v['records']} records" if v["records"] is not None
                                                          else "") + ("" if v["status"] == "ok" else f" {v['status']}")
                          for r, v in sorted(row["ranks"].items()))
        L.append(f"  {row['directory']:40} {row['status']:14} {ranks}")
    for f in sorted(set(ins.findings), key=Finding.sort_key):
        L.append(f"{f.file}: {f.severity.value} {f.rule} {f.message}")
        if f.hint:
            L.append(f"    hint: {f.hint}")
    for c in ins.compare:
        L.append(c)
    errors = sum(1 for f in set(ins.findings) if f.severity is E)
    warnings = sum(1 for f in set(ins.findings) if f.severity is W)
    L.append(f"{errors} error(s), {warnings} warning(s) in {ins.save_path}")
    return "\n".join(L) + "\n"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
