"""A compare that never lies (issue 34): what the compare cannot read is never counted as compared and equal.
Real dumps (examples/compare/, made by examples/make_compare_example.py with real torch + msprobe) are copied
and one thing is spoiled at a time: a statistic, a record, an argument, a data_name, construct.json,
stack.json. Each gives a finding naming the file and the record, no traceback, and a pair that is never
"same": what could not be read is counted as not compared (partial), a file that is not JSON is corrupt."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from compare_cli import run, run_json
from verl_pdbg_conf.compare.dumpread import DumpReader, check_items, rows_of

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "compare"
STAGE = "step_1/actor_compute_log_prob/step0/rank0"
RECORD = "Functional.linear.0.forward"  # the first linear's call: a float32 output of 4 statistics


@pytest.fixture
def runs(tmp_path):
    """(target, golden): the same real run twice, so that unspoiled they are "same" at 100%."""
    for side in ("target", "golden"):
        shutil.copytree(EXAMPLE / "target", tmp_path / side)
    return tmp_path / "target", tmp_path / "golden"


def edit(path: Path, change) -> None:
    """Rewrite a JSON file with change(doc) applied, as json.dump writes it (NaN stays a literal)."""
    doc = json.loads(path.read_text())
    doc = change(doc) or doc
    path.write_text(json.dumps(doc, indent=1))


def output0(doc) -> dict:
    return doc["data"][RECORD]["output"][0]


def pair_of(doc) -> dict:
    (pair,) = [p for p in doc["pairs"] if p["stage"] == "actor_compute_log_prob"]
    return pair


def test_unspoiled_copies_are_same(runs):
    code, doc = run_json(*runs)
    assert code == 0 and {p["status"] for p in doc["pairs"]} == {"same"}
    assert not [f for f in doc["diagnostics"] if f["rule"].startswith("dump-")]


def _set(stat, value):
    def change(doc):
        output0(doc)[stat] = value
    return change


def _set_key(key, value):
    def change(doc):
        output0(doc)[key] = value
    return change


def _record(value):
    def change(doc):
        doc["data"][RECORD] = value
    return change


def _output(value):
    def change(doc):
        doc["data"][RECORD]["output"] = value
    return change


# each: a spoiled value and the words its finding says
SPOILED = {
    "norm_text": (_set("Norm", "1.5"), 'Norm is the text "1.5"'),
    "norm_mapping": (_set("Norm", {"v": 1.5}), "Norm is a mapping"),
    "max_list": (_set("Max", [1.5]), "Max is a list"),
    "min_bool": (_set("Min", True), "Min is the boolean True"),
    "mean_nan_text": (_set("Mean", "nan"), "JSON literal NaN"),
    "norm_inf_text": (_set("Norm", "inf"), 'Norm is the text "inf"'),
    "dtype_number": (_set_key("dtype", 32), "dtype is the number 32"),
    "shape_text": (_set_key("shape", "[4, 16]"), "shape is the text"),
    "data_name_int": (_set_key("data_name", 7), "data_name is the number 7"),
    "record_text": (_record("garbage"), 'is the text "garbage", not a record'),
    "record_list": (_record([1, 2]), "is a list of 2, not a record"),
    "output_text": (_output("garbage"), 'output is the text "garbage"'),
    "output_number": (_output(12345), "output is the number 12345"),
}


@pytest.mark.parametrize("case", sorted(SPOILED))
@pytest.mark.parametrize("side", ["target", "golden"])
def test_an_unreadable_value_is_not_compared(runs, case, side):
    change, said = SPOILED[case]
    target, golden = runs
    spoiled = (target if side == "target" else golden) / STAGE / "dump.json"
    edit(spoiled, change)
    code, out = run([target, golden, "--format", "json"])
    doc = json.loads(out)
    pair = pair_of(doc)
    assert pair["status"] == "partial" and code == 3, (case, pair["status"])
    (f,) = [f for f in pair["findings"] if f["rule"] == "dump-value"]
    assert f["file"] == str(spoiled) and f["severity"] == "warning"
    assert RECORD in f["message"] and said in f["message"], f["message"]
    cov = pair["coverage"][side]
    assert cov["unreadable_records"] == 1 and cov["compared_records"] < cov["records"]
    assert any(f["rule"] == "compare-coverage" and "could not be read" in f["message"] for f in pair["findings"])
    # the unspoiled stage is still same: the finding stays with its pair
    assert {p["status"] for p in doc["pairs"] if p is not pair} == {"same"}


def test_text_report_says_it_without_a_traceback(runs, capsys):
    target, golden = runs
    edit(target / STAGE / "dump.json", _record("garbage"))
    code, out = run([target, golden])
    assert code == 3 and "Traceback" not in out + capsys.readouterr().err
    assert "partial" in out and "dump-value" in out and f"{RECORD}: the record is the text" in out


def test_a_statistic_one_run_lost_is_not_compared(runs):
    """null is what msprobe writes where it computed none (an integer's Mean and Norm): readable, but one run's
    null against the other's number for the same dtype and shape is a value lost, not an equal one."""
    target, golden = runs
    edit(target / STAGE / "dump.json", _set("Norm", None))
    code, doc = run_json(target, golden)
    pair = pair_of(doc)
    assert pair["status"] == "partial" and code == 3
    (f,) = [f for f in pair["findings"] if f["rule"] == "dump-value"]
    assert f"Norm of {RECORD}.output.0 is null in the target" in f["message"]
    assert pair["coverage"]["target"]["unreadable_records"] == 1


def test_nan_as_msprobe_writes_it_is_read(runs):
    """msprobe's json.dump writes a NaN statistic as the literal NaN: a float, judged (here a divergence)."""
    target, golden = runs
    edit(target / STAGE / "dump.json", _set("Max", math.nan))
    assert "NaN" in (target / STAGE / "dump.json").read_text()
    code, doc = run_json(target, golden)
    pair = pair_of(doc)
    assert pair["status"] == "diverged" and pair["first_divergence"]["reason"] == "nan" and code == 1
    assert not [f for f in pair["findings"] if f["rule"] == "dump-value"]


def test_a_garbage_file_stays_corrupt(runs):
    target, golden = runs
    dump = target / STAGE / "dump.json"
    dump.write_text(dump.read_text()[:5000] + "#garbage")
    code, doc = run_json(target, golden)
    pair = pair_of(doc)
    assert pair["status"] == "error" and code == 3
    assert [f["rule"] for f in pair["findings"]] == ["dump-corrupt"] and pair["findings"][0]["file"] == str(dump)


@pytest.mark.parametrize("key,value", [("task", 5), ("level", ["mix"])])
def test_a_header_of_the_wrong_type_is_corrupt(runs, key, value):
    target, golden = runs
    edit(target / STAGE / "dump.json", lambda doc: doc.__setitem__(key, value))
    code, doc = run_json(target, golden)
    pair = pair_of(doc)
    assert pair["status"] == "error" and pair["findings"][-1]["rule"] == "dump-corrupt"
    assert f"has a {key} that is" in pair["findings"][-1]["message"]


# ------------------------------------------------------------------ construct.json and stack.json

def _truncate(path: Path):
    text = path.read_text()
    path.write_text(text[:len(text) // 2])


CORRUPT_FILES = {
    "construct_truncated": ("construct.json", _truncate, "not valid JSON"),
    "construct_list": ("construct.json", lambda p: p.write_text("[1, 2]"), "is not a JSON object"),
    "construct_parent_number": ("construct.json", lambda p: edit(p, lambda d: d.__setitem__(RECORD, 3)),
                                f"{RECORD}: its enclosing call is the number 3"),
    "stack_truncated": ("stack.json", _truncate, "not valid JSON"),
    "stack_entry_text": ("stack.json", lambda p: edit(p, lambda d: d.__setitem__("0", "x")), "entry 0 is the text"),
    "stack_frame_number": ("stack.json", lambda p: edit(p, lambda d: d["1"][1].append(7)),
                           "entry 1 holds a frame that is the number 7"),
}


def _said(pair) -> tuple:
    """What a pair's verdict is: its status and first divergence (name, module, layer)."""
    f = pair["first_divergence"] or {}
    return pair["status"], f.get("name"), f.get("kind")


@pytest.mark.parametrize("case", sorted(CORRUPT_FILES))
def test_a_corrupt_construct_or_stack_is_said_and_not_used(case, tmp_path):
    """Against the diverged golden run: the first divergence stays where the whole files put it, and no
    structure line contradicts itself (a half-read file once gave "target runs linear where golden runs
    linear" and moved the first divergence onto a module's weight)."""
    name, spoil, said = CORRUPT_FILES[case]
    target, golden = tmp_path / "target", tmp_path / "golden"
    shutil.copytree(EXAMPLE / "target", target)
    shutil.copytree(EXAMPLE / "golden", golden)
    _, whole = run_json(target, golden)
    for stage in target.glob("step_1/*/step0/rank0"):
        spoil(stage / name)
        assert check_items(str(stage / name))
    code, doc = run_json(target, golden)
    assert code == 1
    for before, after in zip(whole["pairs"], doc["pairs"]):
        assert _said(after)[:2] == _said(before)[:2], (before["first_divergence"], after["first_divergence"])
        (f,) = [f for f in after["findings"] if f["rule"] == f"dump-{name.split('.')[0]}"]
        assert f["file"].endswith(f"/rank0/{name}") and said in f["message"] and "not used" in f["message"]
        for s in [f["message"] for f in after["findings"] if f["rule"] == "compare-structure"]:
            assert "target runs" not in s or s.split("target runs ")[1].split(" where golden runs ")[0] != \
                s.split(" where golden runs ")[1].split(";")[0], s


def test_inspect_says_a_corrupt_construct_or_stack(tmp_path):
    from verl_pdbg_conf.run.inspect_run import inspect_run

    run_dir = tmp_path / "target"
    shutil.copytree(EXAMPLE / "target", run_dir)
    assert not [f for f in inspect_run(str(run_dir)).findings if f.rule in ("dump-construct", "dump-stack")]
    _truncate(run_dir / STAGE / "construct.json")
    edit(run_dir / STAGE / "stack.json", lambda d: d.__setitem__("0", "x"))
    found = {f.rule: f for f in inspect_run(str(run_dir)).findings}
    assert found["dump-construct"].file == str(run_dir / STAGE / "construct.json")
    assert found["dump-stack"].file == str(run_dir / STAGE / "stack.json")
    assert "entry 0 is the text" in found["dump-stack"].message


# ------------------------------------------------------------------ the reader itself

def test_rows_carry_why_they_cannot_be_read():
    """The boundary keeps an unreadable value in its place with the reason, never a type past it."""
    reader = DumpReader(str(EXAMPLE / "target" / STAGE / "dump.json"))
    name, rec = next((n, r) for n, r in reader.records() if n == RECORD)
    assert not any(r.bad for r in rows_of(name, rec))
    rec["output"][0]["Norm"] = "1.5"
    rec["input_args"][0]["data_name"] = 3
    bad = {r.name: r.bad for r in rows_of(name, rec) if r.bad}
    assert bad == {f"{RECORD}.output.0": 'Norm is the text "1.5", not a number',
                   f"{RECORD}.input.0": "data_name is the number 3, not a file name"}
    (row,) = rows_of(name, "garbage")
    assert row.bad and row.stats == (None,) * 4 and row.dtype == ""
