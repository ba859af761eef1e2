"""A few hundred cases of bench/fuzz_compare.py's campaign in CI: real cross-implementation pairs
(fixture cross_impl_pairs), cut small, their dump.json, stack.json and construct.json mutated; every case
ends in one of verl-pdbg-compare's four exit codes with no traceback, and no input changes."""

from __future__ import annotations

from collections import Counter

import pytest

import compare_harness as H

pytestmark = pytest.mark.slow
CASES = 300


@pytest.fixture(scope="module")
def fuzz_workspace(cross_impl_pairs, tmp_path_factory):
    seeds = H.make_seeds(cross_impl_pairs, str(tmp_path_factory.mktemp("fuzz-compare-seeds")))
    assert len(seeds) == len(H.SEED_PAIRS) + 1
    ws = H.Workspace(seeds)
    yield ws, H.corpus(ws, str(tmp_path_factory.mktemp("fuzz-compare-corpus")))
    ws.close()


def test_seeds_compare_cleanly(fuzz_workspace):
    """The unmutated seeds: the golden against itself agrees, the planted pairs give a verdict, no problem."""
    ws, _files = fuzz_workspace
    codes = []
    for n, seed in enumerate(ws.seeds):
        code, out, err, tb = H.run_cli(f"{seed}/target", f"{seed}/golden")
        assert not H.check(code, out, err, tb), (n, H.check(code, out, err, tb))
        codes.append(code)
    assert codes[-1] == 0


def test_hostile_dumps_never_raise(fuzz_workspace, tmp_path):
    ws, files = fuzz_workspace
    failures, codes, sources = [], Counter(), Counter()
    for i, (src, n, rel, name, data) in enumerate(H.cases(files, seed=0)):
        if i >= CASES:
            break
        o = ws.run_case(n, rel, name, data)
        codes[o.code] += 1
        sources[src.split(":")[0]] += 1
        if not o.ok:
            failures.append(f"{o.name}: {H.write_reproducer(str(tmp_path), ws, n, rel, data, o)}\n"
                            + "\n".join(o.problems)[-1500:])
    print(f"{CASES} cases, exit codes {dict(codes)}, sources {dict(sources)}")
    assert not failures, f"{len(failures)} of {CASES} cases failed:\n" + "\n\n".join(failures[:5])
    assert set(codes) <= set(H.EXIT_CODES) and len(sources) >= 6
