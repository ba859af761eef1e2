"""Reproducer found by bench/fuzz_compare.py (3 of its first 1,500 cases on main at 49fadf8): a dump.json
nested deeper than Python's recursion limit, in its header, in one record or as a whole, raises
RecursionError out of dumpread's json scanner; verl-pdbg-compare prints a traceback and exits 1, the code
for "diverged". The promise: a finding (dump-corrupt) and one of the four exit codes, no traceback.
Fixed: dumpread turns the RecursionError into a DumpError (dump-corrupt)."""

from __future__ import annotations

import json

import pytest

from verl_pdbg_conf.compare.cli import main

TENSOR = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
          "Norm": 1.0, "requires_grad": False}
GOOD = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
        "data": {"Functional.relu.0.forward": {"input_args": [TENSOR], "input_kwargs": {}, "output": [TENSOR]}}}
DEPTH = 5000
DEEP = {
    "header": '{"task": "statistics", "x": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + ', "data": {}}',
    "record": '{"task": "statistics", "level": "L1", "data": {"Functional.relu.0.forward": '
              + "[" * DEPTH + "]" * DEPTH + "}}",
    "whole": '{"a": ' * DEPTH + "1" + "}" * DEPTH,
}


@pytest.mark.parametrize("where", sorted(DEEP))
def test_deeply_nested_dump_is_a_finding(where, tmp_path, capsys):
    (tmp_path / "t").mkdir()
    (tmp_path / "g").mkdir()
    (tmp_path / "t" / "dump.json").write_text(DEEP[where])
    (tmp_path / "g" / "dump.json").write_text(json.dumps(GOOD))
    code = main([str(tmp_path / "t" / "dump.json"), str(tmp_path / "g" / "dump.json"), "--format", "json", "-j", "1"])
    doc = json.loads(capsys.readouterr().out)
    # as a truncated dump.json is today: the pair not compared, a dump-corrupt finding naming the file
    assert code in (2, 3) and doc["exit_code"] == code
    (pair,) = doc["pairs"]
    assert pair["status"] == "error" and pair["findings"][0]["rule"] == "dump-corrupt"
    assert pair["findings"][0]["file"].endswith("dump.json")


def test_integer_past_the_digit_limit_is_a_finding(tmp_path, capsys):
    """bench/fuzz_compare.py's bigint case: a 5,000-digit integer (past Python's int_max_str_digits) raised
    ValueError out of json's scanner."""
    (tmp_path / "t").mkdir()
    (tmp_path / "g").mkdir()
    (tmp_path / "t" / "dump.json").write_text('{"task": "statistics", "level": "L1", "x": ' + "7" * 5000 + ', "data": {}}')
    (tmp_path / "g" / "dump.json").write_text(json.dumps(GOOD))
    code = main([str(tmp_path / "t" / "dump.json"), str(tmp_path / "g" / "dump.json"), "--format", "json", "-j", "1"])
    doc = json.loads(capsys.readouterr().out)
    assert code in (2, 3) and doc["pairs"][0]["findings"][0]["rule"] == "dump-corrupt"
