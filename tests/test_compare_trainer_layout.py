"""What verl's real FSDP trainer writes, read for its layout (docs/compare-trainer-runs.md): its actor sums each
rank's token count and all-reduces it at the start of every stage (an integer scalar, inputs that differ, one
output), which is no evidence of tensor parallelism; its L1 dumps hold API calls only, and a data-parallel
run's ranks start with calls whose inputs read alike (msprobe keeps only max/min of a mask). Hand-written
dumps in msprobe's layout, shaped as the trainer's."""

from __future__ import annotations

import json
from pathlib import Path

from verl_pdbg_conf.compare.parallel import probe
from verl_pdbg_conf.compare.parallel.kinds import DATA, TENSOR
from verl_pdbg_conf.compare.options import CompareOptions
from verl_pdbg_conf.compare.modes import compare_runs


def t(dtype: str, shape: list, mx, mn, mean=None, norm=None) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": mx, "Min": mn, "Mean": mean, "Norm": norm,
            "requires_grad": False}


def count(n: int) -> dict:
    return t("torch.int64", [], n, n, n, n)


def rank_records(tokens: int, total: int, x: float, rows: int) -> dict:
    """A stage's first calls as verl's FSDP actor makes them: the mask summed, the count all-reduced, then the
    model's first linear on this rank's rows (its activations' statistics its own)."""
    mask = t("torch.int64", [rows, 8], 1, 0)
    hidden = t("torch.float32", [rows, 8, 4], x, -x, 0.01 * x, 3 * x)
    weight = t("torch.float32", [4, 4], 0.5, -0.5, 0.0, 1.0)
    return {
        "Tensor.sum.0.forward": {"input_args": [mask], "input_kwargs": {}, "output": [count(tokens)]},
        "Distributed.all_reduce.0.forward": {"input_args": [count(tokens)], "input_kwargs": {},
                                             "output": [count(total)]},
        "Functional.linear.0.forward": {"input_args": [hidden, weight], "input_kwargs": {},
                                        "output": [t("torch.float32", [rows, 8, 4], x / 2, -x / 2, 0.0, x)]},
    }


def write(root: Path, rank: int, data: dict) -> str:
    d = root / "step_1" / "actor_compute_log_prob" / "step0" / f"rank{rank}"
    d.mkdir(parents=True)
    (d / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                             "dump_data_dir": None, "data": data}))
    return str(d / "dump.json")


def test_an_all_reduced_count_is_no_tensor_parallel_evidence(tmp_path):
    paths = [write(tmp_path, r, rank_records(30 - 2 * r, 58, 1.0 + r, 4)) for r in (0, 1)]
    heads = [probe.head(p) for p in paths]
    assert not probe.reduced_alike(heads)  # an integer scalar: a count
    assert TENSOR.from_dumps(paths)[0] == 1
    # a float activation all-reduced to one result from differing parts is evidence (a row-parallel layer's)
    def partial(x: float) -> dict:
        part, whole = t("torch.float32", [4, 8], x, -x, 0.0, x), t("torch.float32", [4, 8], 4.0, -4.0, 0.0, 4.0)
        return {"Distributed.all_reduce.0.forward": {"input_args": [part], "input_kwargs": {}, "output": [whole]}}
    rows = [write(tmp_path / "tp", r, partial(1.0 + r)) for r in (0, 1)]
    assert probe.reduced_alike([probe.head(p) for p in rows])


def test_ranks_of_an_l1_run_with_their_own_rows_are_data_parallel(tmp_path):
    # the first call's inputs read alike (a mask's max and min), the ranks' rows differ after
    paths = [write(tmp_path / "ws2", r, rank_records(30, 60, 1.0 + r, 4)) for r in (0, 1)]
    size, why = DATA.from_dumps(paths)
    assert size == 2 and "inputs of its own" in why
    # two ranks fed the same rows are no data-parallel group
    same = [write(tmp_path / "copy", r, rank_records(30, 60, 1.0, 4)) for r in (0, 1)]
    assert DATA.from_dumps(same)[0] == 1
    write(tmp_path / "ws1", 0, rank_records(60, 60, 2.0, 8))
    cmp = compare_runs(str(tmp_path / "ws2"), str(tmp_path / "ws1"), CompareOptions(jobs=1))
    said = " ".join(f.message for f in cmp.findings)
    assert "data-parallel size 2" in said and "tensor-parallel" not in said, said
    (pair,) = cmp.pairs
    assert pair.target.members == ("rank0", "rank1")
