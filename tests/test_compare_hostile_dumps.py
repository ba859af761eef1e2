"""Reproducers found by bench/fuzz_compare.py on main at 49fadf8: 20 of 10,000 cases, three causes (3, 13, 4).
Each one makes verl-pdbg-compare print a traceback and exit 1, which is the code for "diverged":

- a dump.json nested deeper than Python's recursion limit (in its header, in one record, or as a whole):
  RecursionError out of dumpread's json scanner;
- an integer longer than 4,300 digits in dump.json or stack.json: ValueError ("Exceeds the limit ... for
  integer string conversion") out of the same scanner, which only catches DumpError;
- a stack.json group whose record names hold a list: TypeError (unhashable) in engine._locate.

The promise is one of the four exit codes and no traceback. A broken dump.json should get a dump-corrupt
finding, as a truncated one does today; a broken stack.json should only lose the call site. These tests
were marked xfail (strict) until the reader was fixed; now they hold: dumpread turns each into a
DumpError (dump-corrupt), and the pairing keeps a record whose stack.json entry is broken."""

from __future__ import annotations

import json

import pytest

from verl_pdbg_conf.compare.cli import main


def tensor(norm: float = 1.0) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
            "Norm": norm, "requires_grad": False}


def dump(norm: float = 1.0) -> dict:
    return {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
            "data": {"Functional.relu.0.forward": {"input_args": [tensor()], "input_kwargs": {},
                                                   "output": [tensor(norm)]}}}


DEPTH = 5000
BIG = "9" * 5000
BROKEN_DUMPS = {
    "deep_header": '{"task": "statistics", "x": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + ', "data": {}}',
    "deep_record": '{"task": "statistics", "level": "L1", "data": {"Functional.relu.0.forward": '
                   + "[" * DEPTH + "]" * DEPTH + "}}",
    "deep_whole": '{"a": ' * DEPTH + "1" + "}" * DEPTH,
}


def run(tmp_path, capsys, target: str, stack: str | None = None) -> tuple[int, dict]:
    for side, text in (("t", target), ("g", json.dumps(dump()))):
        (tmp_path / side).mkdir()
        (tmp_path / side / "dump.json").write_text(text)
    if stack is not None:
        (tmp_path / "t" / "stack.json").write_text(stack)
    code = main([str(tmp_path / "t" / "dump.json"), str(tmp_path / "g" / "dump.json"), "--format", "json", "-j", "1"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("case", sorted(BROKEN_DUMPS))
def test_unreadable_dump_is_a_finding(case, tmp_path, capsys):
    code, doc = run(tmp_path, capsys, BROKEN_DUMPS[case])
    # as a truncated dump.json is today: the pair not compared, a dump-corrupt finding naming the file
    assert code == 3 and doc["exit_code"] == code
    (pair,) = doc["pairs"]
    assert pair["status"] == "error" and pair["findings"][0]["rule"] == "dump-corrupt"
    assert pair["findings"][0]["file"].endswith("dump.json")


def test_huge_integer_in_a_record_is_no_traceback(tmp_path, capsys):
    """Valid JSON: read it as a number, or call the dump corrupt; either way one of the four codes."""
    code, doc = run(tmp_path, capsys, json.dumps(dump()).replace('"Max": 1.0', '"Max": ' + BIG, 1))
    assert code in (0, 1, 2, 3) and doc["exit_code"] == code


STACKS = {
    "list_in_names": json.dumps({"0": [["Functional.relu.0.forward", [None]], ["File a.py, line 1, in f, \n x"]]}),
    "bigint": '{"0": [["Functional.relu.0.forward"], ["File a.py, line 1, in f, \\n x"]], "1": ' + BIG + "}",
}


@pytest.mark.parametrize("case", sorted(STACKS))
def test_broken_stack_only_loses_the_call_site(case, tmp_path, capsys):
    code, doc = run(tmp_path, capsys, json.dumps(dump(norm=2.0)), STACKS[case])
    assert code == 1  # the pair is still compared: the output's Norm differs by 100%
    (pair,) = doc["pairs"]
    assert pair["status"] == "diverged"
    assert pair["first_divergence"]["name"] == "Functional.relu.0.forward.output.0"
