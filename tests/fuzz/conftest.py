"""Fixtures for the fuzz tests: one scratch workspace per session, the validator warmed up
(so import-time allocations are not counted against the first case), Hypothesis profiles,
and a check that the shipped examples the corpus is built from are never changed."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_harness import Workspace, corpus_files, warm_up  # noqa: E402

# ci: the whole tests/fuzz directory in well under a minute on 2 cores.
# long: HYPOTHESIS_PROFILE=long python -m pytest tests/fuzz (bench/fuzz_campaign.py is the long run).
_common = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=30, **_common)
settings.register_profile("long", max_examples=2000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def workspace():
    ws = Workspace()
    warm_up(ws)
    yield ws
    ws.close()


def _hashes() -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in corpus_files()}


@pytest.fixture(scope="session", autouse=True)
def examples_unchanged():
    """The corpus is read from tests/examples; validating mutations of it must not touch it."""
    before = _hashes()
    yield
    after = _hashes()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"tests/examples changed during the fuzz run: {changed[:10]}"
