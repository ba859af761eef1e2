"""The streaming dump reader and the engine's memory bound, on dump.json text in msprobe 26.2's shape."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader, KeyCounter, iter_items, rows_of
from verl_pdbg_conf.compare.records import Reader
from verl_pdbg_conf.compare.engine import PairJob, compare_pair


def tensor(v: float, dtype="torch.float32", shape=(4, 16), **extra) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": v, "Min": -v, "Mean": v / 10,
            "Norm": 4 * v, "requires_grad": False, **extra}


def linear(i: int, v: float = 1.0) -> tuple[str, dict]:
    return f"Functional.linear.{i}.forward", {
        "input_args": [tensor(v), tensor(0.25 * v, shape=(16, 16))], "input_kwargs": {},
        "output": [tensor(1.5 * v)]}


def write_dump(path, records: list[tuple[str, dict]], indent=1, **head) -> None:
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, **head,
           "data": dict(records)}
    path.write_text(json.dumps(doc, indent=indent))


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_stream_equals_json_load(tmp_path, chunk):
    recs = [linear(i, 1.0 + i) for i in range(30)]
    recs.append(("Module.head.Linear.parameters_grad.0", {"weight": [tensor(2.0)], "bias": [tensor(3.0, shape=(4,))]}))
    write_dump(tmp_path / "dump.json", recs)
    reader = DumpReader(str(tmp_path / "dump.json"), chunk=chunk)
    got = list(reader.records())
    assert got == recs and reader.header["task"] == "statistics" and reader.header["level"] == "L1"
    assert dict(iter_items(str(tmp_path / "dump.json"), chunk=chunk))["framework"] == "pytorch"


def test_broken_files_are_dump_errors(tmp_path):
    write_dump(tmp_path / "dump.json", [linear(i) for i in range(5)])
    text = (tmp_path / "dump.json").read_text()
    for bad, said in ((text[: len(text) // 2], "not valid JSON"), ("[1, 2]", "not a JSON object"),
                      ('{"task": "statistics"}', 'no "data"'), ("", "not a JSON object")):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(DumpError, match=said):
            list(DumpReader(str(tmp_path / "bad.json"), chunk=16).records())


def test_rows_as_msprobe_names_and_orders_them():
    rec = {"input_args": [tensor(1.0), [tensor(2.0), None], {"type": "int", "value": 3}],
           "input_kwargs": {"mask": tensor(1, dtype="torch.bool")},
           "output": [tensor(4.0)], "parameters": {"weight": tensor(5.0)}}
    rows = rows_of("Module.fc.Linear.forward.0", rec)
    assert [(r.name, r.state) for r in rows] == [
        ("Module.fc.Linear.forward.0.input.0", "input"), ("Module.fc.Linear.forward.0.input.1.0", "input"),
        ("Module.fc.Linear.forward.0.input.1.1", "input"), ("Module.fc.Linear.forward.0.input.2", "input"),
        ("Module.fc.Linear.forward.0.input.mask", "input"),
        ("Module.fc.Linear.forward.0.parameters.weight", "parameters"),  # parameters before outputs
        ("Module.fc.Linear.forward.0.output.0", "output")]
    assert rows[2].stats == (None,) * 4 and rows[3].dtype == "<class 'int'>" and rows[3].stats == (3,) * 4
    grads = rows_of("Module.fc.Linear.parameters_grad.1", {"weight": [tensor(1.0)]})
    assert [(r.name, r.direction) for r in grads] == [("Module.fc.Linear.parameters_grad.1.weight", "parameters_grad")]


def test_a_call_as_both_compares_read_it(tmp_path):
    """One record model: a module call's tensors by state, positional then keyword inputs, values and nulls
    left out; an unreadable tensor keeps its place (a tensor entry with a null dtype too: not a scalar)."""
    rec = {"input_args": [tensor(1.0), None, {"type": "int", "value": 3}, tensor(2.0, dtype=None)],
           "input_kwargs": {"residual": tensor(3.0, data_name="Module.fc.Linear.forward.0.input.residual.pt")},
           "output": [tensor(4.0)]}
    write_dump(tmp_path / "dump.json", [("Module.fc.Linear.forward.0", rec)], task="tensor")
    (call,) = list(Reader(str(tmp_path / "dump.json")))
    assert [r.name.rsplit(".", 1)[-1] for r in call.inputs] == ["0", "3", "residual"]
    assert call.inputs[1].bad == "dtype is null, not text" and call.unread and call.file_of(call.inputs[1]) is None
    assert call.file_of(call.inputs[2]) == str(tmp_path / "dump_tensor_data" / "Module.fc.Linear.forward.0.input.residual.pt")
    assert [r.stats[0] for r in call.outputs] == [4.0] and call.module == "fc" and call.base == "Linear"


def test_backward_calls_pair_by_their_order():
    """msprobe renumbers a backward record by the count of backward calls of its op so far."""
    keys = KeyCounter()
    got = [keys.record_prefix(n)[0] for n in ("Torch.tanh.5.backward", "Torch.tanh.2.backward",
                                               "Torch.tanh.7.forward", "Module.a.Tanh.backward.3")]
    assert got == ["Torch.tanh.0.backward", "Torch.tanh.1.backward", "Torch.tanh.7.forward",
                   "Module.a.Tanh.backward.0"]


def _peak(tmp_path, n: int) -> tuple[int, int]:
    recs = [linear(i, 1.0 + (i % 97)) for i in range(n)]
    write_dump(tmp_path / f"g{n}.json", recs)
    recs[n // 2] = linear(n // 2, 7.0)
    write_dump(tmp_path / f"t{n}.json", recs)
    size = (tmp_path / f"t{n}.json").stat().st_size
    tracemalloc.start()
    out = compare_pair(PairJob(str(tmp_path / f"t{n}.json"), str(tmp_path / f"g{n}.json")))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.analysis.n_nodes == 3 * n and out.analysis.first.name == f"Functional.linear.{n // 2}.forward.input.0"
    return peak, size


def test_memory_does_not_grow_with_the_dump(tmp_path):
    small_peak, small = _peak(tmp_path, 4000)  # past the first read buffers (1 MiB each)
    big_peak, big = _peak(tmp_path, 20000)
    assert big > 4.5 * small
    # buffers, one record and the (nearly empty) pairing window, not the file: 5x the records, the same peak
    assert big_peak < 1.2 * small_peak + (1 << 20) and big_peak < 0.6 * big, (small_peak, big_peak, big)
