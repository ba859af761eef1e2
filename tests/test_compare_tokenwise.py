"""Two trainer runs whose calls hold other rows, compared token by token (compare/rollout/trainers.py), on real
msprobe tensor dumps of a tiny language model (make_token_dumps.py): one call of four padded rows against two
calls of two rows in another order, each padded to its own longest (world size 2 against 1 in verl), or packed
into one row (use_remove_padding); and one planted layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.compare.options import CompareOptions, PairOptions
from verl_pdbg_conf.compare.rollout import trainers
from verl_pdbg_conf.compare.rollout.walk import Walk
from verl_pdbg_conf.compare.modes import compare_runs
from verl_pdbg_conf.compare.pipeline.sides import stacks_of
from verl_pdbg_conf.compare.verdict import ExitCode

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
REPO = HERE.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
TOKENS = 17  # make_token_dumps.SEQS: 6 + 3 + 8 + 4 real tokens, each sequence's last left out
STAGES = ("actor_compute_log_prob", "actor_update")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tokens")
    maker = [sys.executable, str(HERE / "make_token_dumps.py")]
    # both levels at once (msprobe's debugger is one per process): L1 under out, mix under out/mix
    procs = [subprocess.Popen(maker + [str(out)], cwd=out, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT),
             subprocess.Popen(maker + [str(out / "mix"), "--level", "mix", "one", "packed", "plant"], cwd=out,
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)]
    for proc in procs:
        log, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, log.decode(errors="replace")[-3000:]
    return out


def rank(out: Path, run: str, stage: str) -> str:
    return str(out / run / "step_1" / stage / "step0" / "rank0" / "dump.json")


def side(out: Path, run: str, stage: str) -> trainers.Side:
    return trainers.read_side((rank(out, run, stage),), "L1", stacks_of)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("run", ["two", "packed"])
def test_every_token_pairs_and_agrees(dumps, run, stage):
    t, g = side(dumps, run, stage), side(dumps, "one", stage)
    assert not t.why and not g.why
    assert t.layout() != g.layout()  # the calls hold other rows: no record of one is the other's
    res = trainers.compare(t, g, Walk(1e-4))
    assert (res.tokens, res.sequences, res.target_alone, res.golden_alone) == (TOKENS, 4, 0, 0)
    assert res.first is None
    assert res.records > 20 and res.golden_compared > 10
    if run == "packed":  # the packed forward's own ops (where a sequence starts) have no counterpart
        assert "Tensor.cumsum (forward)" in res.unpaired and "Functional.linear (forward)" not in res.unpaired
    else:
        assert res.unpaired == {}
    # the attention mask's row of a token spans its call's columns: other sizes, never judged
    assert res.apart > 0 and res.skipped == 0 and res.unread_points == 0


@pytest.mark.parametrize("stage", STAGES)
def test_a_planted_layer_is_named_at_its_linear(dumps, stage):
    t, g = side(dumps, "plant", stage), side(dumps, "one", stage)
    res = trainers.compare(t, g, Walk(1e-4))
    order, rec, row, _grow, worst, over = res.first
    line = int(rec.site.split(":")[1].split()[0])  # make_token_dumps.py:40 in forward
    assert rec.op == "Functional.linear" and rec.layer == 1
    assert "self.down_proj(" in (HERE / "make_token_dumps.py").read_text().splitlines()[line - 1]
    assert row.state == "output" and row.direction == "forward"
    assert over == TOKENS and 0.005 < worst < 0.02
    # every point before it agreed at every token
    assert all(p[5] == 0 for p in res.points if p[0] < order)


def test_the_run_compare_says_how_much_it_compared(dumps, tmp_path):
    cmp = compare_runs(str(dumps / "packed"), str(dumps / "one"), CompareOptions(jobs=1))
    assert cmp.exit_code == ExitCode.SAME
    by = {p.stage: p for p in cmp.pairs}
    for stage in STAGES:
        p = by[stage]
        assert p.status.value == "same" and p.analysis.first is None
        counts = p.analysis.coverage["tokens"]
        assert counts["tokens"] == TOKENS and counts["sequences"] == 4
        # the records holding token rows, counted as the other compares count theirs, all compared
        for c in p.analysis.coverage["counts"].values():
            assert c["unit"] == "records" and c["total"] > 0 and c["compared"] == c["total"]
        said = [f.message for f in p.findings if f.rule == "compare-tokens"]
        assert len(said) == 1 and f"compared token by token, {TOKENS} token(s) of 4 sequence(s)" in said[0]
    # the same pair without the packed run's token records: record by record, never same (the update's loss
    # summed per call over other rows is even taken for a divergence)
    import shutil

    shutil.copytree(dumps / "packed", tmp_path / "packed")
    for stage in STAGES:
        os.remove(tmp_path / "packed" / "step_1" / stage / "step0" / "rank0" / "tokens.json")
    cmp = compare_runs(str(tmp_path / "packed"), str(dumps / "one"), CompareOptions(jobs=1))
    assert cmp.exit_code != ExitCode.SAME and all(p.status.value != "same" for p in cmp.pairs)
    assert not [f for p in cmp.pairs for f in p.findings if f.rule == "compare-tokens"]
    cmp = compare_runs(str(dumps / "plant"), str(dumps / "one"), CompareOptions(jobs=1))
    assert cmp.exit_code == ExitCode.DIVERGED
    first = {p.stage: p.analysis.first for p in cmp.pairs}["actor_update"]
    assert first.owner.startswith("Functional.linear.") and first.layer == 1 and first.kind == "output"


def test_the_token_compare_takes_the_pipelines_gap_rule(dumps, monkeypatch):
    """The packed run's gaps (its packing ops, between compared records) are compared at the record after them
    by the pipeline's rule (analysis.gap_compared): with its limit at 0 token records, none is."""
    from verl_pdbg_conf.compare.pipeline import analysis

    def not_compared(stage):
        cmp = compare_runs(str(dumps / "packed"), str(dumps / "one"), CompareOptions(jobs=1))
        return {p.stage: p for p in cmp.pairs}[stage].analysis.coverage["counts"]["target"]["not_compared"]

    assert not_compared("actor_compute_log_prob") == 0
    monkeypatch.setattr(analysis, "GAP_COMPARED", 0)
    assert not_compared("actor_compute_log_prob") > 0


def test_a_side_without_token_record_is_not_compared_token_by_token(dumps, tmp_path):
    import shutil

    shutil.copytree(dumps / "two", tmp_path / "two")
    os.remove(tmp_path / "two" / "step_1" / "actor_update" / "step0" / "rank0" / "tokens.json")
    s = trainers.read_side((rank(tmp_path, "two", "actor_update"),), "L1", stacks_of)
    assert "no readable trainer token record" in s.why


def test_an_unreadable_tensor_is_counted_and_keeps_the_pair_from_same(dumps, tmp_path):
    import shutil

    shutil.copytree(dumps / "two", tmp_path / "two")
    data = tmp_path / "two" / "step_1" / "actor_update" / "step0" / "rank0" / "dump_tensor_data"
    victim = sorted(p for p in data.iterdir() if p.name.startswith("Functional.linear.0.forward.output"))[0]
    victim.write_bytes(b"not a tensor")
    t, g = side(tmp_path, "two", "actor_update"), side(dumps, "one", "actor_update")
    res = trainers.compare(t, g, Walk(1e-4))
    assert res.unread_points == 1 and res.first is None
    an = trainers.analysis(res, t, g, "tensor", PairOptions())
    assert an.coverage["full"] is False and an.coverage["tokens"]["points_not_readable"] == 1
    t_counts = an.coverage["counts"]["target"]
    assert t_counts["unreadable"] == 1 and t_counts["compared"] + t_counts["not_compared"] + 1 == t_counts["total"]


def test_calls_of_the_same_tokens_are_compared_token_by_token_only_where_other_rows_were_claimed(dumps):
    """plant and two hold the same token ids per call: their record-by-record verdict stands, unless it claimed
    the runs were handed other rows (compare-data), which the token records then check."""
    from verl_pdbg_conf.compare.engine import PairJob
    from verl_pdbg_conf.compare.nodes import Analysis

    stage = "actor_compute_log_prob"
    job = PairJob(rank(dumps, "plant", stage), rank(dumps, "two", stage))
    assert trainers.instead(job, "tensor", "L1", Analysis("tensor"), []) is None
    an, notes = trainers.instead(job, "tensor", "L1", Analysis("tensor", fed="an input differs"), [])
    assert an.first.layer == 1 and an.first.kind == "output" and not an.fed
    assert "the same token ids" in notes[0].message
    # statistics only: never token by token
    assert trainers.instead(job, "statistics", "L1", Analysis("statistics", fed="an input differs"), []) is None


def test_at_mix_level_the_planted_module_is_named(dumps):
    """precision_debugger_rollout's level (module calls too): the API call is named by its module."""
    out = dumps / "mix"
    cmp = compare_runs(str(out / "packed"), str(out / "one"), CompareOptions(jobs=1))
    assert cmp.exit_code == ExitCode.SAME
    assert all(p.analysis.coverage["tokens"]["tokens"] == TOKENS for p in cmp.pairs)
    cmp = compare_runs(str(out / "plant"), str(out / "one"), CompareOptions(jobs=1))
    assert cmp.exit_code == ExitCode.DIVERGED
    for p in cmp.pairs:
        assert p.analysis.first.module == "layers.1.mlp.down_proj" and p.analysis.first.kind == "output", p.stage
