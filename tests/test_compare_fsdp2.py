"""verl-pdbg-compare on two identical runs of verl's real workers on 2 gloo ranks (FSDP2, L1
statistics; the session fixture fsdp2_runs in conftest.py): the records that differ between them are
exactly the FSDP2 all-gather buffer reads DEFAULT_IGNORES leaves out, so the runs compare "same" out of
the box and diverge there without the default; and rank against rank in one run (--ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_pdbg_conf.compare.cli import main
from verl_pdbg_conf.compare.ignores import DEFAULT_IGNORES, innermost_frames, match_ignore
from verl_pdbg_conf.compare.modes import as_dict, compare_ranks, compare_runs, worker_pool
from verl_pdbg_conf.compare.verdict import ExitCode
from verl_pdbg_conf.compare.options import CompareOptions

pytestmark = pytest.mark.slow

STAGES = {"actor_compute_log_prob", "ref_compute_log_prob", "critic_update", "actor_update"}
COPY_IN = "_fsdp_collectives.py"


@pytest.fixture(scope="module")
def pool():
    with worker_pool(2) as ex:
        yield ex


def _tensors(x, at=""):
    """(place, statistics) of every tensor in one dump.json record."""
    if isinstance(x, dict):
        if x.get("type") == "torch.Tensor":
            yield at, json.dumps({k: x.get(k) for k in ("dtype", "shape", "Max", "Min", "Mean", "Norm")})
            return
        for k, v in x.items():
            yield from _tensors(v, f"{at}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _tensors(v, f"{at}.{i}")


def _records(run: Path):
    """{relative dump dir: (records, {call: innermost frame})}."""
    out = {}
    for dump in sorted(run.glob("step_*/*/step0/rank*/dump.json")):
        stack = json.loads((dump.parent / "stack.json").read_text())
        out[str(dump.parent.relative_to(run))] = (json.loads(dump.read_text())["data"], innermost_frames(stack))
    return out


def test_identical_runs_differ_only_where_the_default_ignores(fsdp2_runs):
    """Every record of the two runs, read straight from dump.json: those whose tensor statistics differ are
    all matched by DEFAULT_IGNORES, and the default matches FSDP2's copy-in narrow only (not the other
    narrow calls of the run)."""
    a, b = map(_records, fsdp2_runs)
    assert a.keys() == b.keys() and {k.split("/")[1] for k in a} == STAGES and len(a) == 8
    differ, ignored, other_narrow = set(), set(), set()
    for where, (recs, frames) in a.items():
        recs_b = b[where][0]
        assert recs.keys() == recs_b.keys(), where
        for call, rec in recs.items():
            if dict(_tensors(rec)) != dict(_tensors(recs_b[call])):
                differ.add((where, call))
            if match_ignore(call, DEFAULT_IGNORES, frames.get(call)):
                ignored.add((where, call))
                assert call.startswith("Tensor.narrow.") and COPY_IN in frames[call] and \
                    "in all_gather_copy_in" in frames[call], (where, call, frames.get(call))
            elif "narrow" in call:
                other_narrow.add((where, call))
    assert differ, "two identical 2-rank runs are expected to differ in the all-gather buffer"
    assert differ <= ignored, sorted(differ - ignored)
    # the pattern is narrow: a narrow called elsewhere (torch's own ops.py here) is kept, by its caller
    assert other_narrow and all(match_ignore(c, DEFAULT_IGNORES, a[w][1].get(c)) is None for w, c in other_narrow)
    assert all(match_ignore(c, DEFAULT_IGNORES) is None for _, c in ignored)  # without its caller: kept


def test_identical_runs_compare_same_by_default(fsdp2_runs, pool, tmp_path):
    cmp = compare_runs(*map(str, fsdp2_runs), CompareOptions(out_dir=str(tmp_path)), pool=pool)
    doc = as_dict(cmp)
    assert cmp.exit_code == ExitCode.SAME, [(p.label, p.analysis and p.analysis.first) for p in cmp.pairs]
    assert len(cmp.pairs) == 8 and {p["rank"] for p in doc["pairs"]} == {0, 1}
    assert all(p["status"] == "same" and p["ignored"] for p in doc["pairs"])
    (summary,) = [s for s in doc["ignored"] if s["records"]]  # the FSDP2 default only; Megatron's leaves out none
    assert summary["default"] and summary["pairs"] == 8 and summary["records"] > 0 and "FSDP2" in summary["why"]
    assert summary["records"] == sum(sum(p["ignored"].values()) for p in doc["pairs"])


def test_without_the_default_they_diverge_at_the_buffer(fsdp2_runs, pool, tmp_path):
    cmp = compare_runs(*map(str, fsdp2_runs), CompareOptions(out_dir=str(tmp_path), default_ignores=False),
                       pool=pool)
    diverged = [p for p in cmp.pairs if p.status == "diverged"]
    assert cmp.exit_code == ExitCode.DIVERGED and diverged and as_dict(cmp)["ignored"] == []
    for p in diverged:
        frames = innermost_frames(json.loads(Path(p.target.path).with_name("stack.json").read_text()))
        first = p.analysis.first
        assert match_ignore(first.name, DEFAULT_IGNORES, frames[first.owner]), (p.label, first.name)


def test_cli_ignore_pattern_and_report(fsdp2_runs, tmp_path, capsys):
    """The user's own --ignore (name only) does what the default does for one stage, and is reported."""
    a, b = (str(r / "step_1" / "ref_compute_log_prob") for r in fsdp2_runs)
    code = main([a, b, "--no-default-ignores", "--ignore", "Tensor.narrow.*", "-o", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == ExitCode.SAME, out
    assert "left out (--ignore): " in out and "matching Tensor.narrow.*\n" in out and "left out (default)" not in out
    assert main([a, b, "--ignore", "@*"]) == ExitCode.USAGE  # no record pattern


def test_ranks_against_rank0(fsdp2_runs, pool, tmp_path, capsys):
    run = fsdp2_runs[0]
    cmp = compare_ranks(str(run), 0, CompareOptions(out_dir=str(tmp_path / "r0")), pool=pool)
    doc = as_dict(cmp)
    assert doc["reference_rank"] == 0 and len(cmp.pairs) == 4 and {p.stage for p in cmp.pairs} == STAGES
    for p in cmp.pairs:
        assert (p.target.rank_dir, p.golden.rank_dir, p.rank, p.step) == ("rank1", "rank0", 1, 1)
        assert p.target.key == p.golden.key
    # each rank holds its own half of the batch: the ranks were handed other rows (their token ids differ before
    # anything computed does), which is no numeric divergence (pipeline/feeding.py)
    assert cmp.exit_code == ExitCode.INCOMPLETE
    assert all((p.status, p.reason) == ("mismatch", "compare-data") for p in cmp.pairs)
    # the other way round, through the command, one stage: the output names the reference rank
    code = main([str(run / "step_1" / "actor_update"), "--ranks", "1", "-o", str(tmp_path / "r1"), "-f", "json",
                 "--html", str(tmp_path / "r1.html")])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.INCOMPLETE and doc["reference_rank"] == 1
    page = (tmp_path / "r1.html").read_text()  # the HTML says it too, and what the default left out
    assert "reference rank1" in page and "left out (default)" in page and "FSDP2" in page
    assert [(p["rank_dir"]["target"], p["rank_dir"]["golden"]) for p in doc["pairs"]] == [("rank0", "rank1")]
    assert main([str(run), "--ranks", "7"]) == ExitCode.USAGE  # no rank7 anywhere: nothing to compare against
    assert "no rank7 to compare rank0, rank1 against" in capsys.readouterr().err
    assert main([str(run), str(run), "--ranks"]) == ExitCode.USAGE
