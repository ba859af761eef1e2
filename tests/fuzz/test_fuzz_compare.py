"""A few hundred cases of bench/fuzz_compare.py's campaign in CI: real cross-implementation pairs
(fixture cross_impl_pairs), cut small, the golden against itself with every rank doubled, and real vLLM
rollouts against their actor (examples/rollout; the suite's `same` rollout where the vllm venv is built):
their dump.json, stack.json, construct.json and tokens.json mutated, every read field given each JSON type it
cannot hold. Every case ends in one of verl-pdbg-compare's exit codes 0 to 3 with no traceback; no input
changes; a spoiled read value never gives `same`; a crash never exits as diverged; the pairs that do not hold
the spoiled file keep their status."""

from __future__ import annotations

import os
from collections import Counter

import pytest

import compare_harness as H

pytestmark = pytest.mark.slow
CASES = 300
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_ROLLOUT = os.path.join(REPO, "examples", "rollout")


@pytest.fixture(scope="module")
def fuzz_workspace(cross_impl_pairs, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-compare-seeds")
    seeds = H.make_seeds(cross_impl_pairs, str(root))
    assert len(seeds) == len(H.SEED_PAIRS) + 1
    seeds.append(H.two_ranks(seeds[-1], str(root / "two-ranks")))  # the agreeing pair, two ranks a stage
    ws = H.Workspace([*seeds, H.Seed(EXAMPLE_ROLLOUT, rollout=True)])
    yield ws, H.corpus(ws, str(tmp_path_factory.mktemp("fuzz-compare-corpus")))
    ws.close()


def run_campaign(ws, files, cases, tmp_path, only=None):
    failures, codes, sources = [], Counter(), Counter()
    for src, n, rel, name, data in cases:
        if only and not only(src):
            continue
        if sum(codes.values()) >= CASES:
            break
        o = ws.run_case(n, rel, name, data, reads=H.reads(src))
        codes[o.code] += 1
        sources[src.split(":")[0]] += 1
        if not o.ok:
            failures.append(f"{o.name}: {H.write_reproducer(str(tmp_path), ws, n, rel, data, o)}\n"
                            + "\n".join(o.problems)[-1500:])
    print(f"{sum(codes.values())} cases, exit codes {dict(codes)}, sources {dict(sources)}")
    assert not failures, f"{len(failures)} cases failed:\n" + "\n\n".join(failures[:5])
    return codes, sources


def test_seeds_compare_cleanly(fuzz_workspace):
    """The unmutated seeds: the golden against itself agrees (one rank a stage or two), the planted pairs
    and the example rollout give a verdict, no problem."""
    ws, _files = fuzz_workspace
    codes = []
    for n in range(len(ws.seeds)):
        code, out, err, tb = H.run_cli(ws.argv(n))
        assert not H.check(code, out, err, tb), (n, H.check(code, out, err, tb))
        codes.append(code)
    assert codes[-3:] == [0, 0, 1]
    assert len(ws.statuses(len(ws.seeds) - 2)) == 4  # two stages, two ranks each


def test_hostile_dumps_never_raise(fuzz_workspace, tmp_path):
    ws, files = fuzz_workspace
    codes, sources = run_campaign(ws, files, H.cases(files, seed=0), tmp_path)
    assert set(codes) <= set(H.EXIT_CODES) and len(sources) >= 7


def test_every_read_field_of_every_type(fuzz_workspace, tmp_path):
    """dump.json's tensor fields and tokens.json's fields, each given the JSON types it cannot hold, on every
    seed: never `same` (the agreeing seeds would otherwise say it)."""
    ws, files = fuzz_workspace
    codes, _ = run_campaign(ws, files, H.cases(files, seed=1, hostile=False, random_cases=False, field_limit=12),
                            tmp_path, only=H.reads)
    assert sum(codes.values()) == CASES and 0 not in codes


def test_the_checks_fire(fuzz_workspace):
    """The promises are checked, not assumed: a read value spoiled into something the compare takes as equal
    is a false same; a spoiled file that moves another pair's status is caught."""
    assert H.FALSE_SAME in " ".join(H.check(0, '{"exit_code": 0, "pairs": []}', "", "", reads=True))
    assert not H.check(3, '{"exit_code": 3, "pairs": []}', "", "", reads=True)
    crash = '{"exit_code": 1, "pairs": [{"status": "error", "reason": "compare-failed"}]}'
    assert H.CRASH_AS_DIVERGENCE in " ".join(H.check(1, crash, "", ""))
    ws, _files = fuzz_workspace
    two = len(ws.seeds) - 2
    rel = next(r for r in H.seed_files(ws.seeds[two]) if r.endswith(os.path.join("rank1", "dump.json")))
    with open(os.path.join(ws.seeds[two], rel), "rb") as fh:
        unchanged = fh.read()
    assert not ws.run_case(two, rel, "unchanged", unchanged).problems
    saved = dict(ws.statuses(two))
    other = next(k for k in saved if k[2] == 0)
    try:  # as if another pair had been diverged before: the unchanged case now moves it
        ws.baseline[two][other] = "diverged"
        o = ws.run_case(two, rel, "unchanged", unchanged)
    finally:
        ws.baseline[two] = saved
    assert any(H.FAULT_LEFT_PAIR in p for p in o.problems), o.problems


@pytest.mark.venvs("vllm")
def test_a_same_rollout_never_turns_false_same(tmp_path):
    """The suite's real vLLM rollout that agrees with its actor (test_compare_rollout's `same` run): its
    tokens.json and dump.json mutated, every read field given each JSON type it cannot hold."""
    import release_venvs
    from test_compare_rollout import make_dumps

    made = release_venvs.job_root("rollout-dumps", "vllm", make_dumps)
    ws = H.Workspace([H.Seed(str(made / "runs" / "same"), rollout=True)])
    try:
        assert H.run_cli(ws.argv(0))[0] == 0
        files = H.corpus(ws, str(tmp_path / "corpus"))
        codes, sources = run_campaign(ws, files, H.cases(files, seed=2, field_limit=20), tmp_path)
        assert sources["field"] >= 20 and set(codes) <= set(H.EXIT_CODES)
    finally:
        ws.close()
