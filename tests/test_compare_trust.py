"""The divergences users hunt most, on real CPU runs (make_compare_dumps.py): a NaN in one block's weight,
one block's output gradient scaled during an update of two mini-batches with an optimizer step between,
one token id changed, and runs collected at different levels or tasks. The block is chosen at random per
test run, seeded from the test id and a per-session salt (PDBG_TEST_SEED reproduces a run), and printed."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.compare import modes
from verl_pdbg_conf.compare.cli import main
from verl_pdbg_conf.compare.modes import as_dict, compare_runs
from verl_pdbg_conf.compare.verdict import ExitCode

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
REPO = HERE.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
SALT = os.environ.get("PDBG_TEST_SEED") or str(random.SystemRandom().randrange(1 << 30))
BLOCKS = 6


@pytest.fixture
def block(request) -> int:
    seed = f"{request.node.nodeid}:{SALT}"
    b = random.Random(seed).randrange(BLOCKS)
    print(f"block {b} (seed {seed!r}; PDBG_TEST_SEED={SALT} reproduces it)")
    return b


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make(out: Path, jobs: list[tuple]) -> None:
    """Run make_compare_dumps.py once per (name, task, level, args...) in parallel: out/name/<variant>."""
    procs = []
    for name, task, level, *args in jobs:
        cfg = out / f"{name}.json"
        cfg.write_text(json.dumps({"task": task, "level": level, "rank": [], "step": [], "async_dump": False,
                                   task: {"scope": [], "list": [], "data_mode": ["all"]}}))
        cmd = [sys.executable, str(HERE / "make_compare_dumps.py"), str(out / name), str(cfg), "0", "1",
               str(_port()), "--steps", "1", *args]
        procs.append(subprocess.Popen(cmd, cwd=out, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    for p in procs:
        log, _ = p.communicate(timeout=600)
        assert p.returncode == 0, log[-3000:]


def text_of(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def test_nan_in_a_weight_is_the_first_divergence(tmp_path, block, capsys, monkeypatch):
    make(tmp_path, [("mix", "statistics", "mix", "--variants", "golden,nan", "--block", str(block),
                     "--stages", "actor_compute_log_prob,actor_update", "--minibatches", "2")])
    run = tmp_path / "mix"
    cmp = compare_runs(str(run / "nan"), str(run / "golden"))
    assert cmp.exit_code == ExitCode.DIVERGED and len(cmp.pairs) == 2
    for p in cmp.pairs:
        f = p.analysis.first
        # F.linear's weight input: the NaN itself, before any metric (msprobe's CSV says "nan" there)
        assert (f.name, f.reason, f.module) == (f"Functional.linear.{block}.forward.input.1", "nan",
                                                f"blocks.{block}.fc"), p.label
        assert f.golden_nonfinite == "" and f.minibatch == 0
    code, out = text_of([str(run / "nan"), str(run / "golden")], capsys)
    assert code == ExitCode.DIVERGED and out.count(f"first NaN: Functional.linear.{block}.forward.input.1") == 2
    assert "golden is finite there" in out
    # the golden run NaN too, at the same place: not a divergence, and said so
    shutil.copytree(run / "nan", run / "nan_again")  # the same run twice (one folder twice is refused)
    code, out = text_of([str(run / "nan"), str(run / "nan_again")], capsys)
    assert code == ExitCode.SAME and "both NaN" in out and "golden run is non-finite there too" in out
    # a fault in one pair (fault injection: modes.compare_pair is looked up per call) stays in that pair: the
    # other keeps its first NaN, and the exit code is the error code, never the "diverged" one
    real = modes.compare_pair

    def flaky(job):
        if "actor_update" in job.target:
            raise RuntimeError("injected")
        return real(job)

    monkeypatch.setattr(modes, "compare_pair", flaky)
    code, out = text_of([str(run / "nan"), str(run / "golden"), "-j", "1", "--format", "json"], capsys)
    by = {p["stage"]: p for p in json.loads(out)["pairs"]}
    assert code == ExitCode.ERROR and (by["actor_update"]["status"], by["actor_update"]["reason"]) == ("error",
                                                                                                   "compare-failed")
    assert "RuntimeError: injected" in by["actor_update"]["findings"][0]["message"]
    first = by["actor_compute_log_prob"]["first_divergence"]
    assert by["actor_compute_log_prob"]["status"] == "diverged" and first["reason"] == "nan", first


def test_scaled_gradient_is_a_backward_node_of_the_first_minibatch(tmp_path, block, capsys):
    make(tmp_path, [("mix", "statistics", "mix", "--variants", "golden,grad", "--block", str(block),
                     "--stages", "actor_update", "--minibatches", "2"),
                    ("l1", "statistics", "L1", "--variants", "golden,grad", "--block", str(block),
                     "--stages", "actor_update", "--minibatches", "2", "--hook-op", "visible")])
    run = tmp_path / "mix"
    cmp = compare_runs(str(run / "grad"), str(run / "golden"))
    (p,) = cmp.pairs
    f = p.analysis.first
    assert p.analysis.minibatches == 2
    # the gradient reaching blocks[block]'s Tanh is the first thing that differs: its backward input
    assert (f.direction, f.minibatch, f.module) == ("backward", 0, f"blocks.{block}.act"), f
    assert f.name in (f"Torch.tanh.{block}.backward.input.0", f"Module.blocks.{block}.act.Tanh.backward.0.input.0")
    assert f.value == pytest.approx(0.01, rel=1e-3)
    code, out = text_of([str(run / "grad"), str(run / "golden")], capsys)
    assert "mini-batch 1 of 2" in out and f.name in out
    # L1, the hook's multiplication recorded (a forward-named call inside the backward pass): still the
    # backward pass of the first mini-batch, at the block's line and layer
    cmp = compare_runs(str(tmp_path / "l1" / "grad"), str(tmp_path / "l1" / "golden"))
    (p,) = cmp.pairs
    f = p.analysis.first
    assert (f.direction, f.minibatch) == ("backward", 0) and "backward pass" in f.note, f
    assert f.name.startswith("Tensor.__mul__.") and f.kind == "input"  # the factor, then its output
    assert "make_compare_dumps.py:" in f.where and f.layer == block


def test_changed_token_id_is_runs_fed_other_data(tmp_path, block, capsys):
    make(tmp_path, [("l1", "statistics", "L1", "--variants", "golden,token", "--stages",
                     "actor_compute_log_prob,actor_update", "--minibatches", "2"),
                    ("l0", "tensor", "L0", "--variants", "golden,token", "--stages", "actor_compute_log_prob")])
    # other token ids handed to a stage are not a numeric divergence: a mismatch naming the ids (pipeline/feeding.py)
    # L1: msprobe keeps only max/min of an int tensor (its norm reads 0): the ids are found because the
    # embedding's output differs while its weight is equal; L0 tensor: the ids element by element
    for run, ids in (("l1", "Functional.embedding.0.forward.input.0"),
                     ("l0", "Module.embed.Embedding.forward.0.input.0")):
        cmp = compare_runs(str(tmp_path / run / "token"), str(tmp_path / run / "golden"))
        for p in cmp.pairs:
            assert (p.status, p.reason) == ("mismatch", "compare-data"), p.label
            (f,) = [f for f in p.findings if f.rule == "compare-data"]
            assert "other rows" in f.message and ids in f.message and p.analysis.first is None
            assert "trainer.use_v1=False" in f.hint
        code, out = text_of([str(tmp_path / run / "token"), str(tmp_path / run / "golden")], capsys)
        assert code == ExitCode.INCOMPLETE and "other rows" in out and "diverged" not in out, out
    # the same dumps, fed alike: same (the rule fires on the fed data, not on every integer input)
    assert compare_runs(str(tmp_path / "l1" / "golden"), str(tmp_path / "l1" / "golden")).pairs[0].status == "same"
    # --ignore leaves the ids and the embedding out: the first float that differs is named, a divergence
    code, out = text_of([str(tmp_path / "l1" / "token"), str(tmp_path / "l1" / "golden"), "--ignore",
                         "Functional.embedding.*", "--format", "json"], capsys)
    doc = json.loads(out)
    assert code == ExitCode.DIVERGED and doc["ignore_patterns"][-1] == "Functional.embedding.*"
    for p in doc["pairs"]:
        assert p["ignored"]["Functional.embedding.*"] >= 3 * p["minibatches"]  # ids, weight, output per call
        assert p["first_divergence"]["name"] == "Functional.linear.0.forward.input.0"
    code, out = text_of([str(tmp_path / "l1" / "token"), str(tmp_path / "l1" / "golden"), "--ignore",
                         "Functional.embedding.*"], capsys)
    assert "left out (--ignore): " in out and "pair(s) matching Functional.embedding.*\n" in out


def test_level_and_task_mismatch_is_one_finding_per_pair(tmp_path, capsys, monkeypatch):
    make(tmp_path, [("l0", "statistics", "L0", "--variants", "golden", "--stages", "actor_compute_log_prob,actor_update"),
                    ("l1", "statistics", "L1", "--variants", "golden", "--stages", "actor_compute_log_prob,actor_update"),
                    ("l1t", "tensor", "L1", "--variants", "golden", "--stages", "actor_compute_log_prob,actor_update")])
    for other, said in (("l0", "level L0 against L1"), ("l1t", "task tensor against statistics")):
        code, out = text_of([str(tmp_path / other / "golden"), str(tmp_path / "l1" / "golden")], capsys)
        # nothing comparable, because of how the dumps were collected: incomplete, not a usage error
        assert code == ExitCode.INCOMPLETE and "diverged" not in out, out
        assert out.count(said) == 2 * 2 and "2 collected differently" in out  # row and finding, per pair
        cmp = compare_runs(str(tmp_path / other / "golden"), str(tmp_path / "l1" / "golden"))
        assert [p.status for p in cmp.pairs] == ["mismatch"] * 2
        assert all(len(p.findings) == 1 and p.findings[0].rule == "compare-mismatch" for p in cmp.pairs)
        assert all(d["first_divergence"] is None for d in as_dict(cmp)["pairs"])
    # a metric statistics dumps cannot give is refused before any pair is compared
    compared = []
    real = modes.compare_pair

    def counted(job):  # fault injection: modes.compare_pair is looked up per call, so every pair passes here
        compared.append(job.target)
        return real(job)

    monkeypatch.setattr(modes, "compare_pair", counted)
    golden, same = str(tmp_path / "l1" / "golden"), str(tmp_path / "l1" / "again")
    shutil.copytree(golden, same)  # the same run twice (one folder twice is refused)
    assert main([same, golden, "--metric", "Cosine", "-j", "1"]) == ExitCode.USAGE and compared == []
    assert "--metric Cosine cannot be computed" in capsys.readouterr().err
    assert main([same, golden, "-j", "1"]) == ExitCode.SAME and len(compared) == 2  # the injection does reach pairs
