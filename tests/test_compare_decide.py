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


def test_tally_counts_each_pair_once_and_the_failed_among_errors():
    from verl_pdbg_conf.compare.verdict import tally

    got = tally([Verdict(Status.SAME), Verdict(Status.DIVERGED), Verdict(Status.DIVERGED),
                 Verdict(Status.ERROR, Reason.FAILED), Verdict(Status.ERROR, Reason.DUMP_MISSING),
                 Verdict(Status.PARTIAL, Reason.COVERAGE), Verdict(Status.MISMATCH, Reason.MISMATCH)])
    assert got == {"same": 1, "diverged": 2, "partial": 1, "mismatch": 1, "error": 2, "failed": 1}


def test_coverage_counts_must_add_up():
    """Counts are checked where built: a broken sum is a fault of the compare (CoverageBug), not a verdict."""
    from verl_pdbg_conf.compare.pipeline.coverage import Counts, CoverageBug

    c = Counts("records", 10, 7, 2, 1)
    assert c.share == 0.7 and c.as_dict() == {"unit": "records", "total": 10, "compared": 7, "not_compared": 2,
                                              "unreadable": 1}
    assert Counts("tokens", 0, 0, 0).share == 1.0
    for bad in ((10, 7, 2, 0), (10, 11, 0, 0), (10, 12, -2, 0)):
        with pytest.raises(CoverageBug, match="does not add up"):
            Counts("records", *bad)


def test_a_broken_coverage_sum_is_its_pair_failed(monkeypatch):
    """Fault injection: a Tally whose counts do not add up fails its pair (compare-failed), never a traceback."""
    from pathlib import Path

    from compare_cli import run_json
    from verl_pdbg_conf.compare.pipeline import coverage

    real = coverage.Tally.settle

    def broken(self):
        self.paired += 1
        return real(self)

    monkeypatch.setattr(coverage.Tally, "settle", broken)
    examples = Path(__file__).resolve().parents[1] / "examples" / "compare"
    code, doc = run_json(examples / "target", examples / "golden", "-j", "1")
    assert code == 4 and {p["reason"] for p in doc["pairs"]} == {"compare-failed"}
    assert all("CoverageBug: coverage of" in p["findings"][0]["message"] for p in doc["pairs"])
    assert doc["statuses"]["failed"] == doc["statuses"]["error"] == len(doc["pairs"])


def test_the_one_finding_builder_names_a_file_not_a_line():
    """Both compares' findings are about a dump file (data, not text a user edits): line and column 1, no
    config path; the hint as given, none by default."""
    from verl_pdbg_conf.compare.verdict import finding
    from verl_pdbg_conf.core.findings import Severity

    f = finding("compare-data", Severity.WARNING, "the runs handed this stage other rows", "run/dump.json",
                "feed both runs the same rows")
    assert f.to_dict() == {"rule": "compare-data", "severity": "warning",
                           "message": "the runs handed this stage other rows", "file": "run/dump.json",
                           "line": 1, "column": 1, "path": "", "hint": "feed both runs the same rows"}
    assert finding("compare-tokens", Severity.INFO, "m", "f").hint == ""
