"""One hostile input through verl-pdbg-compare, and the promises checked on what comes out.

Shared by tests/fuzz/test_fuzz_compare.py (a few hundred cases) and bench/fuzz_compare.py (10,000 and more).
Seeds are real pairs (make_cross_impl_dumps.py), each stage cut to a few dozen records so a case takes
milliseconds, the same pair with every rank doubled, and real rollout save_paths (vLLM against the actor,
--rollout); a case replaces one file (dump.json, stack.json, construct.json or tokens.json of one stage of one
side) with mutated bytes. The promises: the CLI's main() returns one of its documented exit codes 0 same, 1
diverged, 2 usage, 3 incomplete (4, the compare's own fault, fails the case) and raises nothing; nothing says
"Traceback"; with 0, 1 or 3, stdout is one JSON document; no input file changes; a spoiled value the compare
reads never gives `same`; a pair's crash never exits as diverged; every pair not holding the spoiled file
keeps its status."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field

EXIT_CODES = (0, 1, 2, 3)  # all but 4 (ERROR): a hostile dump is the dumps' fault, never the tool's
FILES = ("dump.json", "stack.json", "construct.json", "tokens.json")
SEED_PAIRS = ("qwen2-mix-statistics/sdpa-weight", "qwen2-L1-statistics/same-weight", "qwen2-mix-statistics/split")


def _cut(stage_dir: str, dst: str, head: int, tail: int) -> None:
    """dst/{dump,stack,construct}.json: the stage's first `head` and last `tail` records (all when head is 0),
    and the stack
    groups and construct parents of those (the chains up to the root kept)."""
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(stage_dir, "dump.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    names = list(doc["data"])
    whole = head <= 0 or len(names) <= head + tail
    keep = names if whole else names[:head] + [n for n in names[-tail:] if n not in names[:head]]
    doc["data"] = {n: doc["data"][n] for n in keep}
    with open(os.path.join(dst, "dump.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    kept = set(keep)
    path = os.path.join(stage_dir, "stack.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            stack = json.load(fh)
        cut = {}
        for k, (group, frames) in stack.items():
            group = [n for n in group if n in kept]
            if group:
                cut[k] = [group, frames]
        with open(os.path.join(dst, "stack.json"), "w", encoding="utf-8") as fh:
            json.dump(cut, fh, indent=1)
    path = os.path.join(stage_dir, "construct.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            construct = json.load(fh)
        cut, todo = {}, [n for n in keep if n in construct]
        while todo:
            n = todo.pop()
            if n in cut or n not in construct:
                continue
            cut[n] = construct[n]
            if isinstance(construct[n], str):
                todo.append(construct[n])
        with open(os.path.join(dst, "construct.json"), "w", encoding="utf-8") as fh:
            json.dump({n: cut[n] for n in construct if n in cut}, fh, indent=1)


def make_seeds(pairs: list[dict], root: str, head: int = 40, tail: int = 20) -> list[str]:
    """One seed directory per SEED_PAIRS pair found, and the first one's golden against itself (a pair that
    agrees): root/<n>/{target,golden}/step_1/<stage>/step0/rank0/."""
    by = {p["name"]: p for p in pairs}
    chosen = [by[x] for x in SEED_PAIRS if x in by]
    if chosen:
        chosen.append({"target": chosen[0]["golden"], "golden": chosen[0]["golden"]})
    seeds = []
    for n, pair in enumerate(chosen):
        seed = os.path.join(root, str(n))
        for side in ("target", "golden"):
            for stage_dir in sorted(glob.glob(os.path.join(pair[side], "step_*", "*", "step0", "*"))):
                stage = stage_dir.split(os.sep)[-3]
                _cut(stage_dir, os.path.join(seed, side, "step_1", stage, "step0", "rank0"), head, tail)
        seeds.append(seed)
    return seeds


def seed_files(seed: str) -> list[str]:
    """The mutable files of a seed, relative to it: side/step_1/stage/step0/rank0/file (a run pair) or
    step_1/stage/stepK/rank0/file (a rollout save_path)."""
    return sorted(os.path.relpath(p, seed) for f in FILES for p in glob.glob(os.path.join(seed, "**", f),
                                                                                recursive=True))


@dataclass
class Seed:
    """A seed directory and how the compare reads it: two runs (target/, golden/), or one save_path whose
    rollout is compared with its actor (--rollout)."""

    path: str
    rollout: bool = False

    def argv(self, base: str) -> list[str]:
        return ["--rollout", base] if self.rollout else [os.path.join(base, "target"), os.path.join(base, "golden")]


def two_ranks(seed: str, dst: str) -> str:
    """A copy of a run pair with each rank0 doubled as rank1: two healthy pairs per stage, of which a case
    spoils one."""
    shutil.copytree(seed, dst)
    for rank0 in glob.glob(os.path.join(dst, "*", "*", "*", "*", "rank0")):
        shutil.copytree(rank0, os.path.join(os.path.dirname(rank0), "rank1"))
    return dst


@dataclass
class Outcome:
    name: str
    code: int | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _tree_state(root: str) -> dict[str, str]:
    out = {}
    for here, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(here, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def run_cli(argv: list[str], extra: tuple = ()) -> tuple[int | None, str, str, str]:
    """verl-pdbg-compare's main() in this process: (exit code, stdout, stderr, the traceback if one escaped)."""
    from verl_pdbg_conf.compare.cli import main

    out, err = io.StringIO(), io.StringIO()
    tb, code = "", None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*argv, "--format", "json", "-j", "1", *extra])  # every pair in this process
        except SystemExit as e:
            tb = f"SystemExit({e.code!r}) escaped main()"
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - the promise under test: nothing escapes
            tb = traceback.format_exc()
    return code, out.getvalue(), err.getvalue(), tb


def statuses(stdout: str) -> dict[tuple, str]:
    """Each pair's status in a JSON report, by (step, stage, rank)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return {}
    return {(p.get("step"), p.get("stage"), p.get("rank")): p.get("status") for p in doc.get("pairs") or []
            if isinstance(p, dict)}


def reasons(stdout: str) -> set:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return set()
    return {p.get("reason") for p in doc.get("pairs") or [] if isinstance(p, dict)}


def check(code, stdout: str, stderr: str, tb: str, reads: bool = False) -> list[str]:
    """The promises: a documented exit code, no traceback, one JSON document; with `reads` (a value the
    compare reads was spoiled), never `same`; a pair's own fault (status error) never exits as diverged."""
    problems = []
    if tb:
        problems.append("exception escaped:\n" + tb[-3000:])
    elif code not in EXIT_CODES:
        problems.append(f"exit code {code!r} is not one of {EXIT_CODES}: {stderr[-2000:]}")
    for where, text in (("stdout", stdout), ("stderr", stderr)):
        if "Traceback (most recent call last)" in text:
            problems.append(f"a traceback on {where}:\n{text[-3000:]}")
    if code in (0, 1, 3):
        try:
            doc = json.loads(stdout)
            if doc.get("exit_code") != code:
                problems.append(f"JSON exit_code {doc.get('exit_code')!r} but the command exited {code}")
        except ValueError as e:
            problems.append(f"exit {code} but stdout is not one JSON document ({e}): {stdout[:300]!r}")
    if reads and code == 0:
        problems.append("false same: a value the compare reads was spoiled and the verdict is same")
    if code == 1 and "compare-failed" in reasons(stdout):
        problems.append("a crash read as a divergence: a pair's compare failed and the exit code is 1 (diverged)")
    return problems


FALSE_SAME = "false same"
CRASH_AS_DIVERGENCE = "a crash read as a divergence"
FAULT_LEFT_PAIR = "a fault left its pair"


class Workspace:
    """A working copy of each seed; a case overwrites one file of it and the file is restored after. Each
    seed's pair statuses unmutated are its baseline: a case must leave every pair that does not hold the
    spoiled file as it was (a fault stays in its pair)."""

    def __init__(self, seeds: list):
        self.root = tempfile.mkdtemp(prefix="verl-pdbg-fuzz-compare-")
        self.seeds, self.kinds, self.baseline = [], [], {}
        for n, seed in enumerate(seeds):
            seed = seed if isinstance(seed, Seed) else Seed(seed)
            dst = os.path.join(self.root, f"seed{n}")
            shutil.copytree(seed.path, dst)
            self.seeds.append(dst)
            self.kinds.append(seed)

    def argv(self, seed: int) -> list[str]:
        return self.kinds[seed].argv(self.seeds[seed])

    def statuses(self, seed: int) -> dict[tuple, str]:
        if seed not in self.baseline:
            self.baseline[seed] = statuses(run_cli(self.argv(seed))[1])
        return self.baseline[seed]

    def run_case(self, seed: int, rel: str, name: str, data: bytes, extra: tuple = (), reads: bool = False) -> Outcome:
        base = self.seeds[seed]
        path = os.path.join(base, rel)
        before_status = self.statuses(seed) if not extra else {}
        with open(path, "rb") as fh:
            original = fh.read()
        o = Outcome(f"seed{seed}/{rel}:{name}")
        try:
            with open(path, "wb") as fh:
                fh.write(data)
            before = _tree_state(base)
            t0 = time.perf_counter()
            o.code, stdout, stderr, tb = run_cli(self.argv(seed), extra)
            o.seconds = time.perf_counter() - t0
            o.problems = check(o.code, stdout, stderr, tb, reads)
            after = _tree_state(base)
            if after != before:
                changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                o.problems.append(f"inputs changed: {changed[:5]}")
            held = _pair_of(rel, self.kinds[seed].rollout)
            moved = {k: (v, s) for k, v in before_status.items() if k != held
                     and (s := statuses(stdout).get(k, v)) != v and o.code in (0, 1, 3)}
            if held is not None and moved:
                o.problems.append(f"{FAULT_LEFT_PAIR}: {rel} spoiled, and pairs not holding it changed status "
                                  f"(was, now): {moved}")
        finally:
            with open(path, "wb") as fh:
                fh.write(original)
        return o

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _pair_of(rel: str, rollout: bool) -> tuple | None:
    """The (step, stage, rank) of the pair holding a run seed's file; None for a rollout save_path (one pair
    reads every file of its step)."""
    parts = rel.split(os.sep)
    if rollout or len(parts) != 6:
        return None
    _side, step, stage, _s0, rank, _f = parts
    return (int(step.split("_")[1]), stage, int(rank[4:]))


def write_reproducer(out_dir: str, ws: Workspace, seed: int, rel: str, data: bytes, o: Outcome) -> str:
    """A directory holding the whole failing pair (the mutated file in place) and the problem: rerun with
    `verl-pdbg-compare DIR/target DIR/golden` (a rollout seed: `verl-pdbg-compare --rollout DIR`)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in o.name)[:120]
    dst = os.path.join(out_dir, safe)
    shutil.copytree(ws.seeds[seed], dst, dirs_exist_ok=True)
    with open(os.path.join(dst, rel), "wb") as fh:
        fh.write(data)
    with open(os.path.join(dst, "PROBLEM.txt"), "w", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(o.name + "\n\n" + "\n".join(o.problems) + "\n")
    return dst


# ---------------------------------------------------------------- the cases

_GAP = object()


def interleave(sources):
    """One case from each source in turn (itertools' roundrobin), so a run cut short samples all."""
    import itertools
    return (c for c in itertools.chain.from_iterable(itertools.zip_longest(*sources, fillvalue=_GAP)) if c is not _GAP)


def corpus(ws: Workspace, root: str) -> dict:
    """Each mutable seed file copied under a unique name (mutations.py names cases by the file's stem; a
    rollout seed's say so):
    {corpus path: (seed index, path relative to the seed)}."""
    from pathlib import Path
    os.makedirs(root, exist_ok=True)
    out = {}
    for n, seed in enumerate(ws.seeds):
        for rel in seed_files(seed):
            p = Path(root, f"s{n}-{'rollout-' * ws.kinds[n].rollout}" + "-".join(rel.split(os.sep)))
            shutil.copyfile(os.path.join(seed, rel), p)
            out[p] = (n, rel)
    return out


def _structural(path, seed: int):
    import dump_mutations as D
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if path.name.endswith("-dump.json"):
        return D.dump_mutations(doc, path.stem, seed)
    if path.name.endswith("-stack.json"):
        dump = path.with_name(path.name.replace("-stack.json", "-dump.json"))
        with open(dump, encoding="utf-8") as fh:
            names = list(json.load(fh)["data"])
        return D.stack_mutations(doc, path.stem, names, seed)
    if path.name.endswith("-construct.json"):
        return D.construct_mutations(doc, path.stem, seed)
    return iter(())  # tokens.json: its fields (below) and the generic mutations


FIELD = "field"  # the source of cases that spoil a value the compare reads: `same` after one is false


def _fields(path, seed: int, limit: int):
    import field_mutations as F
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if path.name.endswith("-dump.json"):  # the rollout reads module calls' arguments and outputs only
        return F.dump_fields(doc, path.stem, seed, limit, args_only="-rollout-" in path.name)
    if path.name.endswith("-tokens.json"):
        return F.token_fields(doc, path.stem, seed, limit)
    return iter(())


def reads(source: str) -> bool:
    return source.startswith(FIELD + ":")


def cases(files: dict, seed: int = 0, hostile: bool = True, random_cases: bool = True, field_limit: int = 40):
    """(source, seed index, relative path, case name, bytes), endless when random_cases: per file its
    structural edits (dump_mutations.py), every read field given each JSON type it cannot hold
    (field_mutations.py, at most field_limit per file), then mutations.py's truncations, byte flips, whole-file text
    mutations and wrong values at key paths; the hostile inputs from nothing, each given to the files in
    turn; random stacked edits of all files."""
    import mutations as M

    def per_file(path):
        n, rel = files[path]
        size, kind = path.stat().st_size, rel.split(os.sep)[-1]
        gens = (("structural", _structural(path, seed)), (FIELD, _fields(path, seed, field_limit)),
                ("truncation", M.truncations(path, every=max(1, size // 60))), ("byte flip", M.byte_flips(path, count=60, seed=seed)), ("text", M.text_mutations(path)),
                ("wrong value", M.wrong_types(path, per_path=1, seed=seed, max_paths=120)))
        tagged = [_tagged(label, gen) for label, gen in gens]
        for label, name, data in interleave(tagged):
            yield f"{label}: {kind}", n, rel, name, data

    sources = [per_file(p) for p in files]
    targets = list(files.values())
    if hostile:
        sources.append(("(hostile)", *targets[i % len(targets)], name, data)
                       for i, (name, data) in enumerate(M.special_cases(full=False)))
    if random_cases:
        sources.append((f"(random, seed {seed})", *files[_by_name(files, src)], name, data)
                       for src, name, data in M.random_mutations(list(files), seed))
    return interleave(sources)


def _tagged(label: str, gen):
    for name, data in gen:
        yield label, name, data


def _by_name(files: dict, name: str):
    return next(p for p in files if p.name == name)
