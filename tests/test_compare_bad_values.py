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
from verl_pdbg_conf.compare.modes import as_dict, compare_runs
from verl_pdbg_conf.compare.options import CompareOptions

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


def test_a_run_against_itself_reads_each_side_whole():
    """Both sides the same files: each side streams its own copy (a shared stream would split the records).
    Through the API: the command refuses one folder twice (tests/test_compare_faults.py)."""
    cmp = compare_runs(str(EXAMPLE / "target"), str(EXAMPLE / "target"), CompareOptions(jobs=1))
    code, doc = cmp.exit_code, as_dict(cmp)
    assert code == 0 and {p["status"] for p in doc["pairs"]} == {"same"}
    assert all(p["coverage"]["target"]["records"] == p["coverage"]["golden"]["records"] > 30 for p in doc["pairs"])


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
    "dtype_null": (_set_key("dtype", None), "dtype is null"),  # a tensor without a dtype (was read as a value)
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


@pytest.mark.parametrize("sides", [("target",), ("target", "golden")])
def test_an_unreadable_row_is_never_judged(runs, sides):
    """A row that cannot be read is not held to any rule, on one side or both: it is not among the pair's nodes
    judged (the rest of its record still is), and its record is not compared."""
    code, before = run_json(*runs, "-j", "1")
    for side in sides:
        edit(runs[("target", "golden").index(side)] / STAGE / "dump.json", _set("Norm", "1.5"))
    code, after = run_json(*runs, "-j", "1")
    assert code == 3 and pair_of(before)["nodes"] > 1
    assert pair_of(after)["nodes"] == pair_of(before)["nodes"] - 1
    assert pair_of(after)["coverage"]["target"]["unreadable_records"] == 1


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


# ------------------------------------------------------------------ tokens.json (the rollout compare's token record)
# The real rollout dumps need the vLLM venv (test_compare_rollout.py spoils them the same ways); here the
# actor's record is written by the runtime's own ForwardTokens around a real torch forward, the engine's is
# built in the shape runtime/rollout.py's step_rows and _sampled write.

def _actor_record(tmp_path) -> Path:
    import torch

    from verl_pdbg_conf.runtime.rollout import ForwardTokens

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(11, 8), torch.nn.Linear(8, 11)

        def forward(self, input_ids=None, attention_mask=None):
            return self.head(self.embed(input_ids))

    model, rank = LM(), tmp_path / "actor"
    rank.mkdir()
    tokens = ForwardTokens(model).__enter__()
    model(input_ids=torch.tensor([[0, 3, 4, 5], [2, 3, 4, 6]]), attention_mask=torch.tensor([[0, 1, 1, 1], [1] * 4]))
    tokens.detach()
    tokens.write(str(rank))
    return rank / "tokens.json"


def _engine_record(tmp_path) -> Path:
    rank = tmp_path / "engine"
    rank.mkdir()
    doc = {"format": 1, "engine": "vllm", "dtype": "float32", "architectures": ["Qwen2ForCausalLM"], "engine_step": 0,
           "requests": [{"request": "0", "rows": [0, 3], "positions": [0, 1, 2], "token_ids": [3, 4, 5]},
                        {"request": "1", "rows": [3, 7], "positions": [0, 1, 2, 3], "token_ids": [2, 3, 4, 6]}],
           "sampling": {"0": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "logprobs": 0}},
           "sampled": {"0": {"token_ids": [6], "logprob": -2.5, "logprob_logits": -2.5},
                       "1": {"token_ids": [7], "logprob": -1.5, "logprob_logits": -1.5}}}
    (rank / "tokens.json").write_text(json.dumps(doc))
    return rank / "tokens.json"


TOKEN_SPOILS = {  # (record, change, the field the finding names)
    "record_text": ("engine", lambda d: "garbage", 'is the text "garbage", not a token record'),
    "requests_number": ("engine", lambda d: d.__setitem__("requests", 3), "requests is the number 3"),
    "request_list": ("engine", lambda d: d["requests"].__setitem__(1, [1]), "requests[1] is a list of 1"),
    "request_id_number": ("engine", lambda d: d["requests"][0].__setitem__("request", 0), "requests[0].request is"),
    "position_text": ("engine", lambda d: d["requests"][1]["positions"].__setitem__(2, "2"),
                      'requests[1] (request 1): positions[2] is the text "2"'),
    "position_negative": ("engine", lambda d: d["requests"][1]["positions"].__setitem__(2, -2),
                          "positions[2] is the number -2, not a position"),
    "rows_text": ("engine", lambda d: d["requests"][0].__setitem__("rows", "0:3"), 'rows is the text "0:3"'),
    "sampled_text": ("engine", lambda d: d.__setitem__("sampled", "x"), 'sampled is the text "x"'),
    "sampled_ids_list_of_text": ("engine", lambda d: d["sampled"]["0"].__setitem__("token_ids", ["6"]),
                                 'sampled["0"].token_ids[0] is the text "6"'),
    "logprob_text": ("engine", lambda d: d["sampled"]["1"].__setitem__("logprob", "-1.5"),
                     'sampled["1"].logprob is the text "-1.5"'),
    "architectures_text": ("engine", lambda d: d.__setitem__("architectures", "Qwen2"), "architectures is the text"),
    "calls_text": ("actor", lambda d: d.__setitem__("calls", "x"), 'calls is the text "x"'),
    "call_list": ("actor", lambda d: d["calls"].__setitem__(0, []), "calls[0] is a list of 0"),
    "input_ids_flat": ("actor", lambda d: d["calls"][0].__setitem__("input_ids", [1, 2]), "input_ids[0] is the number 1"),
    "mask_float": ("actor", lambda d: d["calls"][0]["attention_mask"][0].__setitem__(0, 0.5),
                   "attention_mask[0][0] is the number 0.5"),
    "logprobs_text": ("actor", lambda d: d["calls"][0]["next_logprobs"][1].__setitem__(2, "-3"),
                      'next_logprobs[1][2] is the text "-3"'),
}


def test_token_records_as_written_read_whole(tmp_path):
    from verl_pdbg_conf.compare.dumpread import read_tokens

    for path in (_engine_record(tmp_path), _actor_record(tmp_path)):
        doc, said = read_tokens(str(path))
        assert not said and doc, said
    engine, _ = read_tokens(str(tmp_path / "engine" / "tokens.json"))
    assert set(engine) == {"engine", "dtype", "architectures", "requests", "sampled"}  # only what the compare reads


@pytest.mark.parametrize("case", sorted(TOKEN_SPOILS))
def test_a_spoiled_token_record_names_the_field(tmp_path, case):
    from verl_pdbg_conf.compare.rollout import dumps as D
    from verl_pdbg_conf.compare.rollout import tokens as K

    which, change, said = TOKEN_SPOILS[case]
    path = _engine_record(tmp_path) if which == "engine" else _actor_record(tmp_path)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(change(doc) or doc))
    dump = D.read(str(path.parent))  # no dump.json here: only the token record is read
    (f,) = [f for f in dump.findings if f.rule == "compare-tokens"]
    assert f.file == str(path) and said in f.message, f.message
    if dump.tokens is None:
        return
    assert dump.unread >= 1
    # past the boundary every part is of its shape: the alignment takes what is left, without a traceback
    requests, _ = K.rollout_requests([(0, dump.tokens)])
    sequences = K.trainer_sequences(dump.tokens.get("calls") or [])
    if case == "logprob_text":
        assert requests["1"].sampled[4]["logprob"] is None and requests["0"].sampled[3]["logprob"] == -2.5
    if case in ("request_list", "position_text"):  # the other request keeps its rows, and its logits row
        assert set(requests) == {"0"} and requests["0"].sampled[3]["logits_row"] == 0
    if case == "logprobs_text":  # the call is left out, its place kept
        assert dump.tokens["calls"] == [None] and sequences == []
