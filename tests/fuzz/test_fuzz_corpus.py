"""The mutated corpus: real configs (tests/examples/verl/positive/*.yaml, the config.json files
they point to, msprobe's positive examples) truncated, bit-flipped, re-encoded, given a wrong
type at every key path, and a fixed list of hostile inputs (nesting, size, aliases, tags,
binary, empty files). Every case must end in findings or a clean result within the bounds
(see fuzz_harness). CI runs a sample; bench/fuzz_campaign.py runs all of it and more."""

from __future__ import annotations

import pytest

from fuzz_harness import Workspace, corpus_files, describe, run_case, via_config_path
from mutations import byte_flips, special_cases, text_mutations, truncations, wrong_types

CORPUS = corpus_files()
SPECIAL = list(special_cases(full=False))  # the campaign runs special_cases(full=True)
LONG_LINE_FILES = {next(p for p in CORPUS if p.suffix == s) for s in (".yaml", ".json")}


def _ids(p):
    return p.name


def _large(path) -> bool:
    return path.stat().st_size >= 8192


def _budget(path, n: int) -> int:
    """Cases per mutation kind in CI: the composed 35 KB config takes about half a second per case
    (most of it resolving its interpolations), so large files get a few; the campaign runs all."""
    return 3 if _large(path) else n


def _run_all(cases, workspace: Workspace, via_conf: bool = False, memory_every: int = 1):
    """Run each case; the tracemalloc pass (2-3x slower) on every memory_every-th case."""
    outcomes = []
    for i, (name, data) in enumerate(cases):
        memory = i % memory_every == 0
        outcomes.append(run_case(name, data, workspace, memory=memory))
        if via_conf and name.endswith(".json"):
            outcomes.append(via_config_path(name, data, workspace, memory=memory))
    return outcomes


def test_corpus_is_not_empty():
    assert any(p.suffix == ".yaml" for p in CORPUS) and any(p.suffix == ".json" for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=_ids)
def test_truncated_at_every_nth_byte(path, workspace):
    outcomes = _run_all(truncations(path, max_cases=_budget(path, 12)), workspace, via_conf=True)
    assert all(o.ok for o in outcomes), describe(outcomes)


@pytest.mark.parametrize("path", CORPUS, ids=_ids)
def test_bytes_flipped(path, workspace):
    outcomes = _run_all(byte_flips(path, count=_budget(path, 12)), workspace, via_conf=True,
                        memory_every=3)
    assert all(o.ok for o in outcomes), describe(outcomes)


@pytest.mark.parametrize("path", CORPUS, ids=_ids)
def test_reencoded_bom_tabs_duplicates_long_lines(path, workspace):
    cases = list(text_mutations(path, max_dupkeys=_budget(path, 6)))
    if _large(path):  # CI: one in five, keeping the BOM, tab and long-line cases
        keep = (".bom.", ".tabs.", ".longline.")
        cases = [c for i, c in enumerate(cases) if i % 5 == 0 or any(k in c[0] for k in keep)]
    elif path not in LONG_LINE_FILES:  # CI: the 1 MB long line for one conf and one config.json
        cases = [c for c in cases if ".longline." not in c[0]]
    outcomes = _run_all(cases, workspace, memory_every=4 if _large(path) else 1)
    assert all(o.ok for o in outcomes), describe(outcomes)


@pytest.mark.parametrize("path", CORPUS, ids=_ids)
def test_wrong_type_at_key_paths(path, workspace):
    """CI: up to 10 key paths per file, one wrong value each (chosen per path); the campaign does
    every path with every value."""
    outcomes = _run_all(wrong_types(path, per_path=1, max_paths=2 if _large(path) else 10), workspace,
                        memory_every=2)
    assert all(o.ok for o in outcomes), describe(outcomes)


@pytest.mark.parametrize("name,data", SPECIAL, ids=[n for n, _ in SPECIAL])
def test_hostile_input(name, data, workspace):
    out = run_case(name, data, workspace)
    assert out.ok, describe([out])
