"""The rollout engine's facts are chosen by tokens.json's `engine`: a known one is compared with its table
(and named in the pair), an unknown one is refused in one line, its pair `mismatch`, nothing judged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compare_cli import run_json
from verl_pdbg_conf.compare.dumpread import read_tokens
from verl_pdbg_conf.compare.rollout.engines import ENGINES, UNNAMED, UnknownEngine, engine_named
from verl_pdbg_conf.compare.verdict import ExitCode

ROLLOUT = Path(__file__).resolve().parents[1] / "examples" / "rollout"
pytest.importorskip("torch")


def _engine_records(root: Path) -> list[Path]:
    return sorted(root.glob("step_*/rollout_generate/step*/rank*/tokens.json"))


def test_the_reader_keeps_the_engine():
    doc, said = read_tokens(str(_engine_records(ROLLOUT)[0]))
    assert doc["engine"] == "vllm" and not said


def test_a_known_engine_is_named_in_its_pair():
    code, doc = run_json("--rollout", ROLLOUT)
    assert code == ExitCode.DIVERGED and [p["engine"] for p in doc["pairs"]] == ["vllm"]


def test_an_unknown_engine_is_refused_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(ROLLOUT, run)
    for f in _engine_records(run):
        rec = json.loads(f.read_text())
        rec["engine"] = "sglang"
        f.write_text(json.dumps(rec))
    code, doc = run_json("--rollout", run)
    (pair,) = doc["pairs"]
    said = [f["message"] for f in pair["findings"] if f["rule"] == "compare-rollout-engine"]
    assert code == ExitCode.INCOMPLETE and pair["status"] == "mismatch" and pair["first_divergence"] is None
    assert said == [f"{run / 'step_1' / 'rollout_generate'}: the rollout engine 'sglang' has no table here "
                    f"(known: {', '.join(ENGINES)})"]


def test_engine_table():
    assert engine_named(None) is ENGINES[UNNAMED]  # a token record from before it named its engine
    with pytest.raises(UnknownEngine, match="'sglang'"):
        engine_named("sglang")
    for e in ENGINES.values():  # each row's table is there and read by its reader
        assert e.facts["classes"] and e.extractor
