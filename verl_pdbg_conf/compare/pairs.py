"""Pairing of two runs: the dumps of each (collect, through inspect_run.scan, the layout's one reader),
paired by (step, stage, rank) (pair_up), and what a comparison is made of (RankDump, Pair, Comparison)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.compare.nodes import Analysis
from verl_pdbg_conf.compare.parallel.replica import Replica
from verl_pdbg_conf.compare.options import RUNS, CompareOptions
from verl_pdbg_conf.compare.verdict import ExitCode, Reason, Status, Verdict, exit_code, finding, tally
from verl_pdbg_conf.run.inspect_run import INNER_DIR, RANK_DIR, STAGE_DIR, STEP_DIR, scan

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO


@dataclass
class RankDump:
    """One rank directory of one run."""
    key: tuple  # path parts between the given root and the rank directory, e.g. (step_1, actor_update, step0)
    rank_dir: str  # rank0 or proc<pid> ("" for a dump.json given directly)
    path: str  # its dump.json (may not exist)
    members: tuple = ()  # the rank directories of a replica put together (parallel/layout.py); path is the first's
    replica: Replica = Replica()  # how: its dumps and the parallelism levels that join them

    @property
    def label(self) -> str:
        return "/".join(p for p in (*self.key, self.shown_rank) if p) or os.path.basename(self.path)

    @property
    def shown_rank(self) -> str:
        return "+".join(self.members) if self.members else self.rank_dir

    @property
    def file_label(self) -> str:
        return f"{self.label}/dump.json" if self.rank_dir or self.key else self.path


@dataclass
class Pair:
    target: RankDump
    golden: RankDump
    step: int | None
    stage: str | None
    rank: int | None
    out_dir: str = ""
    note: str = ""
    status: Status = Status.PENDING
    reason: Reason | None = None  # why partial, mismatch or error
    analysis: Analysis | None = None
    result_file: str | None = None
    log_file: str | None = None
    findings: list[Finding] = field(default_factory=list)
    ran_on: str = ""  # the Ray node that compared it (--ray)
    name: str = ""  # its name where it is no (step, stage, rank) of two runs: the rollout compare's step_N

    @property
    def rank_label(self) -> str:
        t, g = self.target.shown_rank, self.golden.shown_rank
        return (t if t == g else f"{t or 'dump'}_vs_{g or 'dump'}") or "dump"

    @property
    def label(self) -> str:
        return self.name or "/".join((*self.target.key, self.rank_label))


@dataclass
class Comparison:
    target: str
    golden: str
    out_dir: str
    options: CompareOptions = CompareOptions()
    temporary: bool = False  # out_dir was made here (no -o): remove_output() deletes it
    reference_rank: int | None = None  # rank against rank in one run (compare_ranks): the golden side's rank
    mode: str = RUNS  # options.MODES: two runs, --ranks or --rollout (its pairs are steps, token by token)
    pairs: list[Pair] = field(default_factory=list)
    only_in_target: list[RankDump] = field(default_factory=list)
    only_in_golden: list[RankDump] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # not tied to a pair

    # what the report reads of the options
    metric = property(lambda self: self.options.metric)
    threshold = property(lambda self: self.options.threshold)
    top = property(lambda self: self.options.top)
    min_coverage = property(lambda self: self.options.min_coverage)
    msprobe_csv = property(lambda self: self.options.msprobe_csv)
    ignores = property(lambda self: self.options.patterns, doc="the patterns in force (the default's, then --ignore's)")
    ray = property(lambda self: self.options.ray)

    @property
    def all_findings(self) -> list[Finding]:
        return self.findings + [f for p in self.pairs for f in p.findings]

    @property
    def statuses(self) -> dict[str, int]:
        """verdict.tally of the pairs."""
        return tally(Verdict(p.status, p.reason) for p in self.pairs)

    @property
    def exit_code(self) -> ExitCode:
        """verdict.exit_code of the pairs (a (step, stage, rank) in one run only: incomplete)."""
        return exit_code((Verdict(p.status, p.reason) for p in self.pairs),
                         one_sided=bool(self.only_in_target or self.only_in_golden))


def collect(root: str) -> list[RankDump]:
    """Every rank directory under root (root itself may be one, or a dump.json).
    A save_path goes through inspect_run.scan, the layout's one reader."""
    root = os.path.abspath(root)
    if os.path.isfile(root):
        parent = os.path.basename(os.path.dirname(root))
        return [RankDump((), parent if RANK_DIR.match(parent) else "", root)]
    if not os.path.isdir(root):
        return []
    if RANK_DIR.match(os.path.basename(root)) or os.path.isfile(os.path.join(root, "dump.json")):
        return [RankDump((), os.path.basename(root) if RANK_DIR.match(os.path.basename(root)) else "",
                     os.path.join(root, "dump.json"))]
    dumps, _ = scan(root)
    ranked = [d for d in dumps if d.rank]
    if ranked:
        return [RankDump((f"step_{d.step}", d.stage_dir, d.inner), d.rank, d.path) for d in ranked]
    sides = []
    for here, dirs, _files in os.walk(root):
        dirs.sort()
        for d in list(dirs):
            if RANK_DIR.match(d):
                rel = os.path.relpath(here, root)
                key = () if rel == "." else tuple(rel.split(os.sep))
                sides.append(RankDump(key, d, os.path.join(here, d, "dump.json")))
                dirs.remove(d)
    return sides


def layout_of(path: str) -> tuple[int | None, str | None]:
    """step and stage directory read off a rank directory's path (.../step_N/<stage>/stepM/rankR)."""
    parts = os.path.abspath(path).split(os.sep)
    if parts and parts[-1] == "dump.json":
        parts = parts[:-1]
    if len(parts) >= 4 and RANK_DIR.match(parts[-1]) and INNER_DIR.match(parts[-2]) and STAGE_DIR.match(parts[-3]):
        m = STEP_DIR.match(parts[-4])
        return (int(m.group(1)) if m else None), parts[-3]
    return None, None


def rank_number(rank_dir: str) -> int | None:
    m = RANK_DIR.match(rank_dir or "")
    return int(m.group(2)) if m and m.group(2) is not None else None


def sort_key(p: Pair):
    from verl_pdbg_conf.run.plan import RUN_ORDER

    order = {s: i for i, s in enumerate(RUN_ORDER)}
    stage = STAGE_DIR.match(p.stage or "")
    return (p.step if p.step is not None else -1, order.get(stage.group("stage") if stage else "", 99),
            p.stage or "", p.target.key, p.rank if p.rank is not None else 1 << 30, _pid(p.target.rank_dir),
            p.target.rank_dir)


def pair_up(target: list[RankDump], golden: list[RankDump]) -> tuple[list[Pair], list[RankDump], list[RankDump], list[Finding]]:
    """Pair rank directories by their place in the layout; rank<N> by name, proc<pid> by sorted pid
    when both sides hold the same number of them (pids differ between runs)."""
    by_t: dict[tuple, dict[str, RankDump]] = {}
    by_g: dict[tuple, dict[str, RankDump]] = {}
    for sides, into in ((target, by_t), (golden, by_g)):
        for s in sides:
            into.setdefault(s.key, {})[s.rank_dir] = s
    # Two stage (or rank) directories or two files: one place each, compared whatever its name (step_2
    # against step_1 is a question the guide asks). Two save_paths pair by step and stage, strictly.
    single = len(by_t) == 1 and len(by_g) == 1 and not any(k and STEP_DIR.match(k[0]) for k in (*by_t, *by_g))
    if single:
        (kt, t), (kg, g) = next(iter(by_t.items())), next(iter(by_g.items()))
        by_t, by_g = {(): t}, {(): g}
    pairs, only_t, only_g, notes = [], [], [], []
    for key in sorted(set(by_t) | set(by_g)):
        t, g = by_t.get(key, {}), by_g.get(key, {})
        named = sorted(set(t) & set(g) - {""} - {r for r in t if r.startswith("proc")},
                       key=lambda r: (rank_number(r) is None, rank_number(r) or 0, r))
        matched = [(t[r], g[r]) for r in named]
        rest_t = [r for r in t if r not in named]
        rest_g = [r for r in g if r not in named]
        if rest_t and len(rest_t) == len(rest_g) and all(_is_proc(r) for r in rest_t + rest_g):
            rest_t.sort(key=_pid)
            rest_g.sort(key=_pid)
            for rt, rg in zip(rest_t, rest_g):
                matched.append((t[rt], g[rg]))
            where = "/".join(key) or "the given directories"
            if len(rest_t) == 1:
                msg = (f"{where}: {rest_t[0]} paired with {rest_g[0]} (msprobe writes proc<pid> without a process "
                       "group; one on each side)")
                notes.append(finding("compare-pairing", I, msg, t[rest_t[0]].path))
            else:
                msg = (f"{where}: {len(rest_t)} proc<pid> directories on each side paired in sorted pid order "
                       f"({', '.join(f'{a}~{b}' for a, b in zip(rest_t, rest_g))}): pids say nothing of ranks, "
                       "check the pairing")
                notes.append(finding("compare-pairing", W, msg, t[rest_t[0]].path,
                                      "initialize a torch.distributed process group so msprobe writes rank<N>"))
            rest_t, rest_g = [], []
        elif len(rest_t) == 1 and len(rest_g) == 1 and not named and "rank0" in (rest_t[0], rest_g[0]) and \
                (_is_proc(rest_t[0]) or _is_proc(rest_g[0])):
            # one run without a process group (proc<pid>), the other on a one-rank group (rank0)
            matched.append((t[rest_t[0]], g[rest_g[0]]))
            where = "/".join(key) or "the given directories"
            notes.append(finding("compare-pairing", I, f"{where}: {rest_t[0]} paired with {rest_g[0]} (a run "
                                  "without a process group writes proc<pid>, a one-rank run rank0)",
                                  t[rest_t[0]].path))
            rest_t, rest_g = [], []
        elif single and len(rest_t) == 1 and len(rest_g) == 1 and not named:
            matched.append((t[rest_t[0]], g[rest_g[0]]))  # two rank dirs or two dump.json files given
            rest_t, rest_g = [], []
        only_t += [t[r] for r in rest_t]
        only_g += [g[r] for r in rest_g]
        for st, sg in matched:
            step, stage = layout_of(st.path)
            rank = rank_number(st.rank_dir) if st.rank_dir == sg.rank_dir else None
            pairs.append(Pair(st, sg, step, stage, rank))
    pairs.sort(key=sort_key)
    return pairs, only_t, only_g, notes


def _is_proc(r: str) -> bool:
    return r.startswith("proc")


def _pid(r: str) -> int:
    return int(r[4:]) if r[4:].isdigit() else 0


def pair_dir(out_dir: str, p: Pair) -> str:
    return os.path.join(out_dir, p.name) if p.name else os.path.join(out_dir, *p.target.key, p.rank_label)
