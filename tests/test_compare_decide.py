"""verdict.decide: the one place both compares (runs and rollout) turn what a pair's comparison found into its
status and reason."""

from __future__ import annotations

import pytest

from verl_pdbg_conf.compare.verdict import Reason, Status, Verdict, decide

CASES = [
    (dict(refused=Reason.MISMATCH), Verdict(Status.MISMATCH, Reason.MISMATCH)),
    (dict(refused=Reason.DUMP_CORRUPT), Verdict(Status.ERROR, Reason.DUMP_CORRUPT)),
    (dict(refused=Reason.FAILED, diverged=True), Verdict(Status.ERROR, Reason.FAILED)),  # nothing was compared
    (dict(diverged=True, full=False), Verdict(Status.DIVERGED)),  # a divergence wins over coverage
    (dict(compared=False), Verdict(Status.MISMATCH, Reason.MISMATCH)),
    (dict(full=False), Verdict(Status.PARTIAL, Reason.COVERAGE)),
    (dict(), Verdict(Status.SAME)),
]


@pytest.mark.parametrize("found,verdict", CASES, ids=[str(c[0]) for c in CASES])
def test_decide(found, verdict):
    assert decide(**found) == verdict
