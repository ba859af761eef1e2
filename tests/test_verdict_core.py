"""The verdict's core held to its rules directly (issue 42, item 6): exit codes, the judge's rules in their
order, coverage's counts, the record model and the dump reader's rows. Each test names the behaviour a
surviving mutant broke (bench/mutation.py); they run in milliseconds, so mutation testing can run them."""

from __future__ import annotations

import json
import locale
import math
import tracemalloc
from types import SimpleNamespace

import pytest

from verl_pdbg_conf.compare import judge as J
from verl_pdbg_conf.compare.dumpread import Row
from verl_pdbg_conf.compare.judge import Decision, Judge, Rule
from verl_pdbg_conf.compare.pipeline.coverage import Coverage, coverage_text, kind, short
from verl_pdbg_conf.compare.verdict import ExitCode, Reason, Status, Verdict, exit_code, failure

F32, BF16, I64 = "torch.float32", "torch.bfloat16", "torch.int64"


def row(stats=(1.0, -1.0, 0.0, 2.0), dtype=F32, shape=(2, 3), name="Functional.linear.0.forward.output.0",
        data_name="-1", **kw):
    return Row(name, name, name.rsplit(".", 2)[0], "output", "forward", dtype, list(shape), tuple(stats), data_name,
               **kw)


# ----------------------------------------------------------------------------- verdict.py

S, D = Verdict(Status.SAME), Verdict(Status.DIVERGED)
P, E = Verdict(Status.PARTIAL, Reason.COVERAGE), Verdict(Status.ERROR, Reason.FAILED)
BAD = Verdict(Status.ERROR, Reason.DUMP_CORRUPT)


@pytest.mark.parametrize("verdicts,one_sided,code", [
    ([S, S], False, ExitCode.SAME),
    ([S, D], False, ExitCode.DIVERGED),
    ([D, P], False, ExitCode.DIVERGED),  # a divergence wins over anything not compared whole
    ([D, E], False, ExitCode.ERROR),  # a fault of the compare wins over a divergence
    ([E, D], False, ExitCode.ERROR),
    ([S, E], False, ExitCode.ERROR),
    ([S, P], False, ExitCode.INCOMPLETE),
    ([S, BAD], False, ExitCode.INCOMPLETE),  # a bad dump is no fault of the compare
    ([D, BAD], False, ExitCode.DIVERGED),
    ([S, Verdict(Status.MISMATCH, Reason.MISMATCH)], False, ExitCode.INCOMPLETE),
    ([Verdict(Status.PENDING)], False, ExitCode.INCOMPLETE),
    ([S, S], True, ExitCode.INCOMPLETE),  # a (step, stage, rank) in one run only
    ([D], True, ExitCode.DIVERGED),
    ([], False, ExitCode.INCOMPLETE),  # nothing compared is never "same"
])
def test_exit_code_priority(verdicts, one_sided, code):
    assert exit_code(iter(verdicts), one_sided) == code  # any iterable, read once


def test_exit_code_is_not_one_sided_unless_told():
    assert exit_code([S]) == ExitCode.SAME


def test_exit_code_values_and_words():
    assert [int(c) for c in (ExitCode.SAME, ExitCode.DIVERGED, ExitCode.USAGE, ExitCode.INCOMPLETE,
                             ExitCode.ERROR)] == [0, 1, 2, 3, 4]
    assert [str(s) for s in Status] == ["pending", "same", "diverged", "partial", "mismatch", "error"]
    assert [str(r) for r in Reason] == ["dump-missing", "dump-empty", "dump-corrupt", "compare-mismatch",
                                        "compare-data", "compare-metric", "compare-coverage", "compare-failed"]
    assert f"{Status.SAME}/{Reason.FAILED}" == "same/compare-failed"


def test_failure_is_one_line():
    assert failure(RuntimeError("  first line\nsecond")) == "RuntimeError: first line"
    assert failure(KeyError()) == "KeyError"
    assert failure(ValueError("   ")) == "ValueError"


# ----------------------------------------------------------------------------- judge.py: the small rules

def test_against_the_limit():
    assert J.against(None, 0.1) == Rule.AGREE
    assert J.against(math.nan, 0.1) == Rule.NAN
    assert J.against(0.1, 0.1) == Rule.AGREE  # at the limit is no divergence
    assert J.against(0.1000001, 0.1) == Rule.THRESHOLD
    assert J.against(0.0, 0.0) == Rule.AGREE


def test_counts_and_sizes():
    assert J.counts_agree(None, 3) and J.counts_agree(3, None) and J.counts_agree(4, 4)
    assert not J.counts_agree(3, 4)
    assert J.sizes_agree(row(shape=(2, 3)), row(shape=(3, 2)))
    assert not J.sizes_agree(row(shape=(2, 3)), row(shape=(2, 4)))


def test_dtype_limit():
    assert J.dtype_limit(0.5, (F32, BF16)) == 0.5
    assert J.dtype_limit(1e-9, (F32, BF16)) == 2.0 ** -7
    assert J.dtype_limit(1e-9, (F32, BF16), roundings=3) == 3 * 2.0 ** -7
    assert J.dtype_limit(1e-9, ("torch.int64",)) == 1e-9


def test_point_rules():
    assert J.point(3, 4, 0.0, 0.1) == Decision(Rule.APART, None)
    assert J.point(3, 3, 0.0, 0.1, ("", "nan")) == Decision(Rule.NAN, J.point(3, 3, 0.0, 0.1, ("", "nan")).value,
                                                           "nan")
    d = J.point(3, 3, 0.0, 0.1, ("inf", ""))
    assert d.reason == Rule.INF and math.isnan(d.value) and d.golden_nonfinite == ""
    d = J.point(3, 3, 0.0, 0.1, ("nan", "inf"))
    assert d.reason == Rule.NAN and d.golden_nonfinite == "inf"
    assert J.point(3, 3, 5.0, 0.1, ("nan", "nan")) == Decision(Rule.AGREE, None, "", "nan")
    assert J.point(3, 3, 0.2, 0.1) == Decision(Rule.THRESHOLD, 0.2)
    assert J.point(3, 3, 0.05, 0.1) == Decision(Rule.AGREE, 0.05)
    assert J.point(3, None, 0.05, 0.1).reason == Rule.AGREE  # an unknown count is no difference


def test_rule_words():
    assert [str(r) for r in Rule] == ["", "unmatched", "apart", "nan", "inf", "shape", "dtype", "exact", "threshold"]
    assert J.NOT_JUDGED == (Rule.UNMATCHED, Rule.APART)


# ----------------------------------------------------------------------------- judge.py: Judge.row

def judge(metric="NormRelativeErr", threshold=0.01, task="statistics", **kw) -> Judge:
    return Judge(metric, threshold, task, "/t/step_1/dump.json", "/g/step_1/dump.json", **kw)


def test_row_agrees_and_diverges_on_the_metric():
    j = judge()
    assert j.row(row(), row()) == Decision(Rule.AGREE, 0.0, "", "")
    d = j.row(row((1.0, -1.0, 0.0, 2.1)), row())
    assert d.reason == Rule.THRESHOLD and d.value == pytest.approx(0.05)
    assert j.row(row((1.0, -1.0, 0.0, 2.01)), row()).reason == Rule.AGREE  # 0.5% under 1%
    # another statistic than the metric's does not count
    assert j.row(row((9.0, -1.0, 0.0, 2.0)), row()).reason == Rule.AGREE
    assert judge("MaxRelativeErr").row(row((9.0, -1.0, 0.0, 2.0)), row()).reason == Rule.THRESHOLD


def test_cosine_is_a_badness():
    """Cosine is higher-is-better: its value is turned into 1 - cosine, so a cosine of 1 is no error."""
    j = judge("Cosine", task="tensor")
    assert not j.spec.higher_is_worse and j.arrays
    assert j.value(row(), row(shape=(3, 3))) is None  # no arrays without tensor files: nothing computed


def test_unmatched_and_apart():
    j = judge()
    assert j.row(row(), None) == Decision(Rule.UNMATCHED, None)
    assert j.row(row(dtype="torch.bool"), row(dtype=I64)) == Decision(Rule.UNMATCHED, None)
    assert j.row(row(shape=(2, 3)), row(shape=(2, 4))) == Decision(Rule.APART, None)
    assert j.like(row(dtype="torch.bool"), row(dtype=I64))  # not paired: holds nothing of the call apart
    assert not j.like(row(shape=(2, 3)), row(shape=(7,)))


def test_one_sided_nan_or_inf_is_a_divergence_both_alike_is_not():
    j = judge()
    nan, inf = (1.0, -1.0, math.nan, math.nan), (math.inf, -1.0, math.inf, math.inf)
    d = j.row(row(nan), row())
    assert d.reason == Rule.NAN and math.isnan(d.value) and d.golden_nonfinite == ""
    d = j.row(row(), row(nan))
    assert d.reason == Rule.NAN and d.golden_nonfinite == "nan"
    d = j.row(row(inf), row())
    assert d.reason == Rule.INF and d.golden_nonfinite == ""
    d = j.row(row(nan), row(inf))  # non-finite otherwise on each side
    assert d.reason == Rule.NAN and d.golden_nonfinite == "inf"
    d = j.row(row(nan), row(nan))  # NaN alike on both sides: no error measured, no divergence (said apart)
    assert d.reason == Rule.AGREE and d.both_nonfinite == "nan"
    d = j.row(row(inf), row(inf))
    assert d.reason == Rule.AGREE and d.both_nonfinite == "inf"


def test_shape_then_dtype():
    j = judge()
    assert j.row(row(shape=(2, 3)), row(shape=(3, 2))).reason == Rule.SHAPE
    assert judge(layout_free=True).row(row(shape=(2, 3)), row(shape=(3, 2))).reason == Rule.AGREE
    assert j.row(row(dtype=BF16), row()).reason == Rule.DTYPE
    # shape is said before dtype
    assert j.row(row(dtype=BF16, shape=(3, 2)), row()).reason == Rule.SHAPE
    assert judge(ignore_dtype=True).row(row(dtype=BF16), row()).reason == Rule.AGREE


def test_dtype_suggestion_and_dtype_aware_limit():
    j = judge()
    j.row(row(dtype=BF16), row())
    assert j.suggest.startswith(f"{BF16} against {F32}: --dtype-aware") and "0.00781" in j.suggest
    assert j.suggest.endswith(f"of {BF16}")  # the lower precision named, whichever side holds it
    j.row(row(dtype="torch.float16"), row())
    assert j.suggest.startswith(BF16)  # said once
    j2 = judge()
    j2.row(row(), row(dtype="torch.float16"))
    assert "of torch.float16" in j2.suggest and j2.lowp_eps == 0.0
    aware = judge(threshold=1e-4, dtype_aware=True)
    assert aware.limit == 1e-4
    off = (1.0, -1.0, 0.0, 2.0 * (1 + 2 ** -8))  # half a bf16 rounding step off
    assert aware.row(row(off, dtype=BF16), row()).reason == Rule.AGREE
    assert aware.limit == 2.0 ** -7 and aware.suggest == ""
    assert judge(threshold=1e-4).row(row(off), row()).reason == Rule.THRESHOLD
    aware.row(row(dtype="torch.float16"), row())
    assert aware.limit == 2.0 ** -7  # the largest step learned stays
    ints = judge()
    ints.row(row(dtype=I64), row(dtype=I64))
    assert ints.suggest == "" and ints.lowp_eps == 0.0


def test_exact_dtypes_differ_at_all():
    j = judge(threshold=0.5)
    a, b = row((5, 0, 2.5, 0), dtype=I64), row((5, 0, 2.5000001, 0), dtype=I64)
    d = j.row(a, b)
    assert d.reason == Rule.EXACT and d.value == pytest.approx(0.1 / 2.5e6, rel=1e-3)
    assert j.row(a, a).reason == Rule.AGREE
    bools = row((True, False, None, None), dtype="torch.bool")
    assert j.row(bools, row((True, True, None, None), dtype="torch.bool")).reason == Rule.EXACT
    assert j.row(row((1.0, 0.0, 0.5, 2.0)), row((1.0, 0.0, 0.5000001, 2.0))).reason == Rule.AGREE  # a float


def test_parts_raise_the_limit_to_the_rounding_step():
    j = judge(threshold=1e-4)
    off = (1.0, -1.0, 0.0, 2.0 * (1 + 2 ** -9))
    assert j.row(row(off, dtype=BF16), row(dtype=BF16)).reason == Rule.THRESHOLD
    assert j.row(row(off, dtype=BF16, parts=2), row(dtype=BF16)).reason == Rule.AGREE
    assert j.row(row(off, dtype=BF16), row(dtype=BF16, parts=2)).reason == Rule.AGREE


def test_a_constant_replicated_tensor_takes_its_counterparts_size():
    j = judge(layout_free=True)
    zero = row((0.0, 0.0, 0.0, 0.0), shape=(4,), alike=2)
    whole = row((0.0, 0.0, 0.0, 0.0), shape=(8,))
    assert j.like(zero, whole) and j.row(zero, whole).reason == Rule.AGREE
    assert not judge().like(zero, whole)  # only where layouts are known to differ
    assert not j.like(row((0.0, 0.0, 0.0, 0.0), shape=(4,)), whole)  # held by one rank
    assert not j.like(row((1.0, 0.0, 0.5, 1.0), shape=(4,), alike=2), whole)  # not constant
    ones = row((1.0, 1.0, 1.0, 2.0), shape=(4,), alike=2)
    grown = J._resized(ones, row((1.0, 1.0, 1.0, 1.0), shape=(8,)))
    assert grown.shape == [8] and grown.stats == (1.0, 1.0, 1.0, pytest.approx(math.sqrt(8)))
    neg = J._resized(row((-2.0, -2.0, -2.0, 4.0), shape=(4,), alike=2), row(shape=(8,)))
    assert neg.stats[3] == pytest.approx(2 * math.sqrt(8))
    assert J._resized(ones, row(shape=(12,))) is ones  # not a whole number per rank
    assert J._resized(row(("a", "a", 1.0, 1.0), shape=(4,), alike=2), row(shape=(8,))).shape == [4]
    empty = row((1.0, 1.0, 1.0, 2.0), shape=(0,), alike=2)
    assert J._resized(empty, row(shape=(0,))) is empty
    ramp = row((1.0, 0.0, 1.0, 2.0), shape=(4,), alike=2)  # Max == Mean, but not constant
    assert J._resized(ramp, row(shape=(8,))) is ramp


def test_tensor_task_without_files_judges_statistics():
    """The tensor task's NormRelativeErr is the l2norms' relative error, from the statistics."""
    j = judge(task="tensor")
    assert not j.arrays and j.stat_i == 3
    assert j.row(row((1.0, 0.0, 0.0, 2.1)), row()).reason == Rule.THRESHOLD
    assert j.t_dir == "/t/step_1/dump_tensor_data" and j.g_dir == "/g/step_1/dump_tensor_data"


def test_tensor_task_reads_the_arrays(tmp_path):
    np = pytest.importorskip("numpy")
    t_dir, g_dir = tmp_path / "t" / "dump_tensor_data", tmp_path / "g" / "dump_tensor_data"
    t_dir.mkdir(parents=True)
    g_dir.mkdir(parents=True)
    np.save(t_dir / "a.npy", np.array([1, 2, 3], dtype=np.int64))
    np.save(g_dir / "a.npy", np.array([1, 2, 4], dtype=np.int64))
    np.save(g_dir / "b.npy", np.array([1, 2, 3], dtype=np.int64))
    # NormRelativeErr comes from the statistics; an integer tensor is still held to its values, element by element
    j = Judge("NormRelativeErr", 0.5, "tensor", str(tmp_path / "t" / "dump.json"), str(tmp_path / "g" / "dump.json"))
    same_stats = (3, 1, None, None)
    t = row(same_stats, dtype=I64, shape=(3,), data_name="a.npy")
    assert j.row(t, row(same_stats, dtype=I64, shape=(3,), data_name="a.npy")).reason == Rule.EXACT
    assert j.row(t, row(same_stats, dtype=I64, shape=(3,), data_name="b.npy")).reason == Rule.AGREE
    # a missing file or none written: nothing to hold against (the statistics decide)
    assert j.row(t, row(same_stats, dtype=I64, shape=(3,), data_name="gone.npy")).reason == Rule.AGREE
    assert j.arrays_of(t, row(data_name="-1")) is None and j.arrays_of(row(data_name=""), t) is None


# ----------------------------------------------------------------------------- coverage.py

def rec(name, module=None, scope="", unread=(), **extra):
    return SimpleNamespace(name=name, module=module, scope=scope, unread=list(unread), extra=dict(extra))


def test_full_coverage_and_its_minimum():
    c = Coverage()
    for i in range(99):
        c.pair(rec(f"a{i}"), rec(f"a{i}"))
    c.pair(rec("alone"), None)
    cov = c.finish()
    assert cov["full"] and cov["target"]["share"] == 0.99 and cov["golden"]["share"] == 1.0
    assert cov["target"]["records"] == 100 and cov["target"]["paired_records"] == 99
    assert cov["target"]["uncompared_records"] == {"(outside any module)": 1}
    # the same figures as Counts, keyed alike in both compares' documents
    assert cov["counts"] == {"target": {"unit": "records", "total": 100, "compared": 99, "not_compared": 1,
                                        "unreadable": 0},
                             "golden": {"unit": "records", "total": 99, "compared": 99, "not_compared": 0,
                                        "unreadable": 0}}
    assert not c.finish(minimum=0.995)["full"]
    assert short(cov) == "99%/100%" and short(None) == "-"


def test_an_unreadable_record_keeps_the_pair_from_full():
    c = Coverage()
    for i in range(500):
        c.pair(rec(f"a{i}"), rec(f"a{i}"))
    c.pair(rec("bad", unread=["output.0 is null"]), rec("bad"))
    cov = c.finish()
    assert not cov["full"] and cov["target"]["share"] >= 0.99
    assert cov["target"]["unreadable_records"] == 1 and cov["golden"]["unreadable_records"] == 0
    assert cov["golden"]["paired_records"] == 500  # its counterpart is not compared either
    assert "1 record of the target could not be read (dump-value): not compared" in coverage_text(cov)


def test_modules_paired_inside_and_uncompared():
    c = Coverage()
    c.pair(rec("m", module="model.layers.0.mlp"), rec("m", module="model.layers.0.mlp"))
    c.pair(rec("w", module="model"), None)  # wraps a paired module
    c.pair(rec("act", module="model.layers.0.mlp.act_fn"), None)  # inside a paired one
    c.pair(rec("op", scope="Module.model.layers.0.mlp.Qwen2MLP.forward.0"), None)  # ran inside a paired module
    c.pair(rec("x", module="lm_head"), None)  # none of that
    t = c.finish()["target"]
    assert t["modules"] == 4 and t["paired_modules"] == 1 and t["accounted_modules"] == 2
    assert t["uncompared_modules"] == {"lm_head": 1}
    assert t["compared_records"] == 4 and t["records"] == 5
    assert not c.finish()["full"]
    text = coverage_text(c.finish())
    assert "not compared in target: lm_head (1 module)" in text and "target 80% of 5 records" in text


def test_loose_records_outside_paired_modules_are_regions():
    c = Coverage()
    c.pair(rec("m", module="model.layers.0"), rec("m", module="model.layers.0"))
    for i in range(3):
        c.pair(rec(f"o{i}", scope="Module.optimizer.Adam.forward.0"), None)
    t = c.finish()["target"]
    assert t["uncompared_records"] == {"optimizer (3 records)".split(" (")[0]: 3}
    assert "optimizer (3 records)" in coverage_text(c.finish())


def test_boundary_gap_counts_as_compared():
    c = Coverage()
    c.pair(rec("a"), rec("a"))
    c.pair(rec("fused"), None)
    c.golden_only([rec("x1"), rec("x2")])
    c.boundary(SimpleNamespace(target=[rec("fused")], golden=[rec("x1"), rec("x2")]))
    cov = c.finish()
    assert cov["full"] and cov["target"]["compared_records"] == 2 and cov["golden"]["compared_records"] == 3


def test_late_pairing_counts_once():
    c = Coverage()
    late = [rec("m", module="model.layers.0", local=["partial sum"])]
    c.golden_only(late)
    c.late(late)
    assert late == []
    c.pair(rec("m", module="model.layers.0", local=["partial sum"]), rec("m", module="model.layers.0",
                                                                         local=["partial sum"]))
    g = c.finish()["golden"]
    assert g["records"] == 1 and g["paired_records"] == 1 and g["rank_own_records"] == {"partial sum": 1}


def test_sharded_or_rank_local_records_are_not_compared():
    c = Coverage()
    c.pair(rec("a", sharded=True), rec("a"))
    c.pair(rec("b", local=["partial sum"]), rec("b"))
    c.pair(rec("c", local=["partial sum"]), rec("c", local=["partial sum"]))
    c.pair(rec("d"), rec("d"), compared=False)
    t = c.finish()["target"]
    assert t["paired_records"] == 1 and t["rank_own_records"] == {"partial sum": 2}
    assert "2 records of the target hold a partial sum of each rank's own" in coverage_text(c.finish())


def test_fused_parts_count_each():
    c = Coverage()
    c.pair(rec("qkv", module="model.layers.0.self_attn.qkv", parts=["model.layers.0.self_attn.qkv",
                                                                   "model.layers.0.self_attn.k"]),
           rec("q", module="model.layers.0.self_attn.q"))
    t = c.finish()["target"]
    assert t["records"] == 2 and t["paired_records"] == 2 and t["paired_modules"] == 2


def test_kind_names_the_module_family():
    assert kind("") == "(outside any module)"
    assert kind("model.layers.3.mlp") == "model.layers.*.mlp"


def test_json_of_coverage_is_plain_data():
    c = Coverage()
    c.pair(rec("a"), rec("a"))
    json.dumps(c.finish())


def test_an_empty_dtype_pairs_as_msprobe_writes_none():
    """A dtype-less row (an argument of None) is msprobe's dtype "None": it pairs with one written so."""
    for t, g in ((row(dtype=""), row(dtype="None")), (row(dtype="None"), row(dtype=""))):
        assert judge().row(t, g).reason == Rule.DTYPE  # paired (not unmatched), and said to differ
        assert judge().like(t, row(dtype=I64)) and judge().row(t, row(dtype=I64)).reason == Rule.UNMATCHED
        # paired, so held to its size: other element counts are apart
        assert not judge().like(row(dtype=t.dtype, shape=(2,)), row(dtype=g.dtype, shape=(3,)))


def test_exact_rows_with_no_number_to_measure():
    d = judge().row(row(("a", "b", None, None), dtype=I64), row(("c", "d", None, None), dtype=I64))
    assert d.reason == Rule.EXACT and d.value == 0.0
    d = judge().row(row(("a", "b", "e", "f"), dtype=I64), row(("c", "d", "g", "h"), dtype=I64))
    assert d.reason == Rule.EXACT and d.value is None


def test_tensor_task_norm_is_the_l2norms_relative_error():
    """The tensor task's NormRelativeErr (norm_rel): an l2norm of 0 against 0.0 is equal, where the statistics
    task's relative error (msprobe's column, typed) says infinitely far."""
    zero_int, zero = row((0.0, 0.0, 0.0, 0)), row((0.0, 0.0, 0.0, 0.0))
    assert judge(task="tensor").row(zero_int, zero) == Decision(Rule.AGREE, 0.0, "", "")
    assert judge().row(zero_int, zero).reason == Rule.THRESHOLD
    assert judge(task="tensor").value(zero_int, zero) == 0.0 and judge().value(zero_int, zero) == math.inf


def save(d, name, values):
    np = pytest.importorskip("numpy")
    d.mkdir(parents=True, exist_ok=True)
    with open(d / name, "wb") as fh:  # the exact name, "-1" too
        np.save(fh, np.array(values))


def tensor_judge(tmp_path, metric, threshold=0.01, task="tensor") -> Judge:
    return Judge(metric, threshold, task, str(tmp_path / "t" / "dump.json"), str(tmp_path / "g" / "dump.json"))


def test_tensor_task_metrics_from_the_arrays(tmp_path):
    t_dir, g_dir = tmp_path / "t" / "dump_tensor_data", tmp_path / "g" / "dump_tensor_data"
    save(t_dir, "x.npy", [1.0, 2.0, 3.0])
    save(g_dir, "x.npy", [1.0, 2.0, 3.0])
    save(g_dir, "y.npy", [-1.0, -2.0, -3.0])
    save(g_dir, "z.npy", [1.0, 2.0, 3.3])
    t = row(shape=(3,), data_name="x.npy")
    cos = tensor_judge(tmp_path, "Cosine")
    assert cos.arrays and cos.stat_i is None
    assert cos.row(t, row(shape=(3,), data_name="x.npy")) == Decision(Rule.AGREE, pytest.approx(0.0, abs=1e-12))
    d = cos.row(t, row(shape=(3,), data_name="y.npy"))  # cosine -1: a badness of 2
    assert d.reason == Rule.THRESHOLD and d.value == pytest.approx(2.0)
    assert cos.value(t, row(shape=(3,), data_name="y.npy")) == pytest.approx(2.0)
    assert cos.value(t, row(shape=(3,), data_name="x.npy")) == pytest.approx(0.0, abs=1e-12)
    # without a file on either side there is no value, and none is made up
    assert cos.row(t, row(shape=(3,))) == Decision(Rule.AGREE, None, "", "")
    assert cos.value(t, row(shape=(3,))) is None
    mx = tensor_judge(tmp_path, "MaxRelativeErr")
    z = row(shape=(3,), data_name="z.npy")
    assert mx.value(t, z) == pytest.approx(0.3 / 3.3) and mx.row(t, z).value == pytest.approx(0.3 / 3.3)
    assert mx.value(z, t) is None  # each row's file is read from its own run: z.npy is the golden's only
    assert mx.value(row(shape=(1, 3), data_name="x.npy"), z) is None  # another shape: no element-wise value
    assert mx.row(row(shape=(3, 1), data_name="x.npy"), z).reason == Rule.SHAPE
    # the statistics' metric where the task keeps no arrays for it
    norm = tensor_judge(tmp_path, "MaxRelativeErr", task="statistics")
    assert norm.value(row((1.1, 0.0, 0.0, 0.0)), row((1.0, 0.0, 0.0, 0.0))) == pytest.approx(0.1)


def test_no_file_is_named_minus_one(tmp_path):
    """"-1" and "" are msprobe's "no tensor file", even where a file of that name happens to exist."""
    for name in ("-1", ""):
        t_dir, g_dir = tmp_path / name / "t" / "dump_tensor_data", tmp_path / name / "g" / "dump_tensor_data"
        save(t_dir, "a.npy", [1.0])
        save(g_dir, "a.npy", [1.0])
        if name:
            save(t_dir, name, [1.0])
            save(g_dir, name, [1.0])
        j = tensor_judge(tmp_path / name, "Cosine")
        a = row(shape=(1,), data_name="a.npy")
        assert j.arrays_of(a, a) is not None
        assert j.arrays_of(row(shape=(1,), data_name=name), a) is None
        assert j.arrays_of(a, row(shape=(1,), data_name=name)) is None


def test_integer_values_read_only_by_the_tensor_task(tmp_path):
    t_dir, g_dir = tmp_path / "t" / "dump_tensor_data", tmp_path / "g" / "dump_tensor_data"
    save(t_dir, "a.npy", [1, 2, 3])
    save(g_dir, "a.npy", [1, 2, 4])
    stats = (3, 1, None, None)
    t, g = row(stats, dtype=I64, shape=(3,), data_name="a.npy"), row(stats, dtype=I64, shape=(3,), data_name="a.npy")
    assert tensor_judge(tmp_path, "NormRelativeErr", task="statistics").row(t, g).reason == Rule.AGREE
    assert tensor_judge(tmp_path, "NormRelativeErr").row(t, g).reason == Rule.EXACT
    # a shape difference is said as such, not overridden by the values
    g13 = row(stats, dtype=I64, shape=(1, 3), data_name="a.npy")
    assert tensor_judge(tmp_path, "NormRelativeErr").row(t, g13).reason == Rule.SHAPE


# ----------------------------------------------------------------------------- records.py

from verl_pdbg_conf.compare import records as R  # noqa: E402


def tensor(v=1.0, dtype=F32, shape=(2,), data_name=None):
    d = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": v, "Min": v, "Mean": v, "Norm": v}
    if data_name:
        d["data_name"] = data_name
    return d


def write_dump(d, data: dict, construct: dict | None = None, level="mix"):
    d.mkdir(parents=True, exist_ok=True)
    (d / "dump.json").write_text(json.dumps({"task": "statistics", "level": level, "framework": "pytorch",
                                             "dump_data_dir": None, "data": data}))
    if construct is not None:
        (d / "construct.json").write_text(json.dumps(construct))
    return str(d / "dump.json")


def test_layer_of_path():
    assert R.layer_of_path("model.layers.3.mlp") == 3
    assert R.layer_of_path("blocks.2.fc") == 2
    assert R.layer_of_path("0.module.decoder.layers.3.mlp") == 3  # a model chunk's leading index
    assert R.layer_of_path("2.0") == 2  # an nn.Sequential's
    assert R.layer_of_path("0.module") is None
    assert R.layer_of_path("lm_head") is None and R.layer_of_path("") is None and R.layer_of_path(None) is None
    assert R.layer_of_path("model.layers.12") == 12
    assert R.layer_of_path("layers.7") == 7 and R.layer_of_path("1.layers.2") == 2


def test_a_gap_is_compared_at_the_pair_after_it_up_to_the_limit(tmp_path):
    """Records of one side with no counterpart, between two pairs, are judged at the pair after them up to
    GAP_COMPARED of them; one more and none of them was compared; a gap with no pair after it never was."""
    from verl_pdbg_conf.compare.engine import PairJob, compare_pair
    from verl_pdbg_conf.compare.pipeline.analysis import GAP_COMPARED

    def linear(i, v=1.0):
        return f"Functional.linear.{i}.forward", {"input_args": [tensor(v)], "output": [tensor(2 * v)]}

    def tanh(k):
        return f"Torch.tanh.{k}.forward", {"input_args": [tensor(1.0)], "output": [tensor(0.5)]}

    def target_counts(name, before, after=0):
        recs = [linear(0), *map(tanh, range(before)), linear(1, 3.0), *map(tanh, range(before, before + after))]
        t = write_dump(tmp_path / name / "t", dict(recs), level="L1")
        g = write_dump(tmp_path / name / "g", dict([linear(0), linear(1, 3.0)]), level="L1")
        cov = compare_pair(PairJob(t, g)).analysis.coverage
        return cov["full"], cov["counts"]["target"]

    full, counts = target_counts("at", GAP_COMPARED)
    assert full and counts == {"unit": "records", "total": GAP_COMPARED + 2, "compared": GAP_COMPARED + 2,
                               "not_compared": 0, "unreadable": 0}
    full, counts = target_counts("past", GAP_COMPARED + 1)
    assert not full and counts["compared"] == 2 and counts["not_compared"] == GAP_COMPARED + 1
    full, counts = target_counts("end", 0, after=1)
    assert not full and counts["compared"] == 2 and counts["not_compared"] == 1


def test_reader_counts_minibatches_passes_and_names(tmp_path):
    """A mini-batch starts where the opening op runs forward again after a backward; the optimizer step stays
    with the mini-batch whose gradients it applies; backward call numbers are renumbered per op."""
    data = {
        "Functional.embedding.0.forward": {"input_args": [tensor(1, I64)], "output": [tensor()]},
        "Module.model.layers.1.mlp.MLP.forward.0": {"input": [tensor()], "output": [tensor()]},
        "Functional.embedding.1.forward": {"input_args": [tensor(1, I64)], "output": [tensor()]},  # a 2nd pass
        "Functional.linear.5.backward": {"input": [tensor()], "output": [tensor()]},
        "Functional.linear.9.backward": {"input": [tensor()], "output": [tensor()]},
        "Torch.optimizer_step.0.forward": {"input_args": [tensor()]},
        "Functional.embedding.2.forward": {"input_args": [tensor(1, I64)], "output": [tensor()]},
        "no_direction_here": {"output": [tensor()]},
        "Functional.linear.6.backward": {"input": [tensor()], "output": [tensor()]},
        "Functional.embedding.3.forward": {"input_args": [tensor(1, I64)], "output": [tensor()]},
        "Module.model.layers.1.mlp.MLP.parameters_grad": {"weight": [tensor()]},
    }
    reader = R.Reader(write_dump(tmp_path / "r", data))
    recs = list(reader)
    by = {r.name: r for r in recs}
    assert "no_direction_here" not in by and reader.records == len(data)
    assert [r.minibatch for r in recs] == [0, 0, 0, 0, 0, 0, 1, 1, 2, 2]
    assert [r.passes for r in recs] == [0, 0, 1, 1, 1, 1, 2, 2, 3, 3]
    assert [r.after_backward for r in recs] == [False, False, False, True, True, True, False, True, False, True]
    assert [r.order for r in recs] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]
    assert by["Functional.linear.5.backward"].key == "Functional.linear.0.backward"
    assert by["Functional.linear.9.backward"].key == "Functional.linear.1.backward"
    assert [row.key for row in by["Functional.linear.9.backward"].rows] == \
        ["Functional.linear.1.backward.input.0", "Functional.linear.1.backward.output.0"]
    assert by["Functional.embedding.0.forward"].key == "Functional.embedding.0.forward"
    m = by["Module.model.layers.1.mlp.MLP.forward.0"]
    assert m.module == "model.layers.1.mlp" and m.layer == 1 and m.is_module and m.base == "MLP"
    assert by["Functional.linear.5.backward"].base == "linear" and not by["Functional.linear.5.backward"].is_module
    assert by["Functional.embedding.0.forward"].layer is None and by["Functional.embedding.0.forward"].module is None
    assert by["Module.model.layers.1.mlp.MLP.parameters_grad"].direction == "parameters_grad"
    assert reader.tensor_dir == str(tmp_path / "r" / "dump_tensor_data")


def test_reader_scopes_from_construct_json(tmp_path):
    data = {
        "Functional.linear.0.forward": {"input_args": [tensor()], "output": [tensor()]},
        "Functional.relu.0.forward": {"input_args": [tensor()], "output": [tensor()]},
        "Torch.add.0.forward": {"input_args": [tensor()], "output": [tensor()]},
    }
    construct = {"Torch.add.0.forward": "optimizer", "Functional.relu.0.forward": "Cell.net.2.ReLU.forward.0",
                 "Functional.linear.0.forward": "Module.model.layers.4.mlp.MLP.forward.0"}
    path = write_dump(tmp_path / "c", data, construct)
    by = {r.name: r for r in R.Reader(path, level="mix")}
    assert by["Functional.linear.0.forward"].scope == "Module.model.layers.4.mlp.MLP.forward.0"
    assert by["Functional.linear.0.forward"].layer == 4
    assert by["Functional.relu.0.forward"].scope == "Cell.net.2.ReLU.forward.0"
    assert by["Torch.add.0.forward"].scope == "" and by["Torch.add.0.forward"].layer is None
    for level, construct_on in (("L1", True), ("mix", False)):  # L1 has none; or not asked for
        assert {r.scope for r in R.Reader(path, level=level, construct=construct_on)} == {""}
    assert {r.scope for r in R.Reader(path, level="L0")} != {""}


def test_construct_reads_ahead_in_a_bounded_window(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "WINDOW", 2)
    p = tmp_path / "construct.json"
    p.write_text(json.dumps({f"k{i}": f"p{i}" for i in range(6)}))
    c = R.Construct(str(p))
    assert c.get("k3") == "p3" and c.get("k2") == "p2"  # k2 waited in the window
    assert c.get("k0") is None  # fell out of the window of 2 (the oldest goes first)
    assert c.get("k5") == "p5" and c.get("k4") == "p4" and c.get("k1") is None
    assert R.Construct(str(tmp_path / "none.json")).get("k1") is None


def test_a_broken_construct_json_is_not_used(tmp_path):
    p = tmp_path / "construct.json"
    p.write_text('{"a": "Module.x.X.forward.0", "b": 5}')
    assert R.Construct(str(p)).get("a") is None
    p.write_text('{"a": "Module.x.X.forward.0", "b": "Module.y')
    assert R.Construct(str(p)).get("a") is None


def test_record_tensors_and_files(tmp_path):
    data = {"Functional.linear.0.forward": {
        "input_args": [tensor(data_name="Functional.linear.0.forward.input.0.pt"), {"type": "int", "value": 3}],
        "input_kwargs": {"bias": tensor(dtype=None)},
        "output": [tensor()]}}
    (r,) = list(R.Reader(write_dump(tmp_path / "f", data)))
    ins = r.inputs
    assert [x.name for x in ins] == ["Functional.linear.0.forward.input.0", "Functional.linear.0.forward.input.bias"]
    assert [x.name for x in r.outputs] == ["Functional.linear.0.forward.output.0"]
    assert r.file_of(ins[0]) == str(tmp_path / "f" / "dump_tensor_data" / "Functional.linear.0.forward.input.0.pt")
    assert r.file_of(r.outputs[0]) is None  # statistics only
    assert ins[1].bad and r.file_of(ins[1]) is None and r.unread == [f"input.bias {ins[1].bad}"]
    assert R._part("Functional.linear.0.forward", "Functional.linear.0.forward") == "the record"
    assert R._part("Other.row", "Functional.linear.0.forward") == "Other.row"


def test_reader_names_the_file_of_a_broken_dump(tmp_path):
    p = tmp_path / "dump.json"
    p.write_text('{"task": "statistics", "data": {"Functional.linear.0.forward": {"output": [')
    reader = R.Reader(str(p))
    with pytest.raises(R.DumpError) as e:
        list(reader)
    assert e.value.path == str(p)


# ----------------------------------------------------------------------------- coverage.py, in detail

from verl_pdbg_conf.compare.pipeline.coverage import MAX_REGIONS, Tally  # noqa: E402


def scope(path: str) -> str:
    return f"Module.{path}.M.forward.0"


def settle(records, family=None) -> dict:
    """One side's coverage from (record, paired) pairs."""
    t = Tally()
    t.family = family or {}
    for r, paired in records:
        t.record(r, paired)
    return t.settle()


def test_own_scope_and_own_module_name_a_record_by_its_own_run():
    s = settle([(rec("op", scope=scope("golden.name"), own_scope=scope("own.name")), False),
                (rec("m", module="other.name", own_module="own.mod"), True)])
    assert s["uncompared_records"] == {"own.name": 1} and s["paired_modules"] == 1
    assert s["uncompared_modules"] == {}


def test_unreadable_records_are_counted_and_never_paired():
    s = settle([(rec("a", unread=["x"]), True), (rec("b", unread=["y"]), True),
                (rec("m", module="model.layers.0", unread=["z"]), True)])
    assert s["unreadable_records"] == 3 and s["paired_records"] == 0 and s["paired_modules"] == 0
    assert s["uncompared_records"] == {}  # said as unreadable, not as a region
    assert s["uncompared_modules"] == {"model.layers.*": 1}


def test_calls_of_a_fused_module_and_its_parts():
    """A fused record counts each part; calls of a paired module with none in the other run are a region."""
    qkv = dict(module="model.layers.0.attn.qkv", parts=["model.layers.0.attn.qkv", "model.layers.0.attn.k"])
    s = settle([(rec("a", **qkv), True), (rec("b", **qkv), False), (rec("c", **qkv), True)])
    assert s["records"] == 6 and s["paired_records"] == 4 and s["paired_modules"] == 2
    assert s["uncompared_records"] == {"model.layers.*.attn.qkv (its calls)": 1, "model.layers.*.attn.k (its calls)": 1}
    assert s["uncompared_modules"] == {} and s["compared_records"] == 4
    s = settle([(rec("b", **qkv), False), (rec("x", module="model.layers.0.attn.k.inner"), False)])
    assert s["paired_modules"] == 0 and s["uncompared_modules"] == {"model.layers.*.attn.qkv": 1,
                                                                    "model.layers.*.attn.k": 1,
                                                                    "model.layers.*.attn.k.inner": 1}
    # paired once, then a call unpaired: still paired
    s = settle([(rec("a", **qkv), True), (rec("b", **qkv), False)])
    assert s["paired_modules"] == 2 and s["uncompared_modules"] == {}


def test_a_module_record_is_never_a_loose_record():
    s = settle([(rec("m", module="lm_head"), False)])
    assert s["uncompared_records"] == {} and s["uncompared_modules"] == {"lm_head": 1}


def test_wrappers_and_the_nearest_recorded_module():
    # FSDP's wrapper two levels up of a paired module: accounted for, its records enclosed
    s = settle([(rec("w", module="model.layers.0"), False), (rec("w2", module="model.layers.0"), False),
                (rec("m", module="model.layers.0.mlp"), True)])
    assert s["accounted_modules"] == 1 and s["uncompared_modules"] == {} and s["compared_records"] == 3
    # inside: the nearest recorded module enclosing it is paired, however far up
    s = settle([(rec("l", module="model.layers.0"), True), (rec("x", module="model.layers.0.mlp.act"), False)])
    assert s["uncompared_modules"] == {} and s["accounted_modules"] == 1 and s["compared_records"] == 2
    s = settle([(rec("l", module="model"), True), (rec("x", module="model.x"), False)])
    assert s["uncompared_modules"] == {} and s["accounted_modules"] == 1
    # the nearest recorded one decides, not one further up
    s = settle([(rec("l", module="model"), True), (rec("u", module="model.layers"), False),
                (rec("x", module="model.layers.x.y"), False), (rec("z", module="model.layers.z"), False)])
    assert s["uncompared_modules"] == {"model.layers.x.y": 1, "model.layers.z": 1}  # model.layers: inside model
    assert s["accounted_modules"] == 1 and s["modules"] == 4 and s["compared_records"] == 2


def test_a_family_module_runs_where_the_other_runs_one_module_does():
    recs = [(rec("e0", module="a.experts.0"), False), (rec("a", module="a"), False),
            (rec("b", module="b"), True), (rec("e1", module="a.experts.1"), False)]
    s = settle(recs, family={"a.experts.0": "b.experts", "a.experts.1": "b.experts"})
    assert s["uncompared_modules"] == {"a": 1} and s["accounted_modules"] == 2 and s["compared_records"] == 3
    s = settle(recs, family={"a.experts.0": "c.experts"})  # the one module's enclosing one is not paired
    assert s["uncompared_modules"] == {"a": 1, "a.experts.*": 2}
    s = settle([(rec("e0", module="b.experts.0"), True)], family={"b.experts.0": "x"})
    assert s["paired_modules"] == 1 and s["accounted_modules"] == 0


def test_a_module_whose_calls_all_lie_in_compared_gaps_is_accounted_for():
    def side(bracketed_calls: int, own_module=False):
        c = Coverage()
        c.pair(rec("p", module="model"), rec("p", module="model"))
        extra = {"own_module": "decoder.core"} if own_module else {}
        core = [rec(f"c{i}", module="decoder.x" if own_module else "decoder.core", **extra) for i in range(2)]
        for r in core:
            c.pair(r, None)
        c.boundary(SimpleNamespace(target=core[:bracketed_calls], golden=[]))
        return c.finish()["target"]
    assert side(2)["uncompared_modules"] == {} and side(2)["accounted_modules"] == 1
    assert side(1)["uncompared_modules"] == {"decoder.core": 1}
    assert side(2, own_module=True)["uncompared_modules"] == {}


def test_gap_records_count_once_each():
    c = Coverage()
    c.pair(rec("a"), rec("a"))
    loose = [rec(f"x{i}", scope=scope("lm_head")) for i in range(3)]
    for r in loose:
        c.pair(r, None)
    c.pair(rec("fused"), None)
    c.boundary(SimpleNamespace(target=[rec("fused")], golden=[]))
    t = c.finish()["target"]
    assert t["compared_records"] == 2 and t["records"] == 5
    assert t["uncompared_records"] == {"lm_head": 3}  # the gap's record taken off the loose ones
    c.boundary(SimpleNamespace(target=[loose[0]], golden=[]))
    assert c.finish()["target"]["uncompared_records"] == {"lm_head": 2}


def test_regions_emptied_by_gaps_are_not_said():
    c = Coverage()
    c.pair(rec("a"), rec("a"))
    c.pair(rec("o", scope=scope("first")), None)
    c.pair(rec("p", scope=scope("second")), None)
    c.boundary(SimpleNamespace(target=[rec("o", scope=scope("first"))], golden=[]))
    assert c.finish()["target"]["uncompared_records"] == {"second": 1}


def test_loose_records_inside_compared_modules_are_enclosed():
    s = settle([(rec("m", module="model.mlp"), True), (rec("a", module="model.mlp.act"), False),
                (rec("op", scope=scope("model.mlp.act")), False),  # in an accounted module
                (rec("op2", scope=scope("model.mlp.unrecorded")), False),  # in no recorded module, under a paired one
                (rec("op3", scope=scope("model.mlp")), False)])
    assert s["uncompared_records"] == {} and s["compared_records"] == 5
    s = settle([(rec("m", module="model.mlp"), False), (rec("op2", scope=scope("model.mlp.unrecorded")), False)])
    assert s["uncompared_records"] == {"model.mlp.unrecorded": 1}


def test_regions_and_modules_off_are_counted_per_kind_most_first():
    s = settle([(rec("a", scope=scope("model.layers.0.foo")), False), (rec("b", scope=scope("model.layers.1.foo")), False),
                (rec("c", scope=scope("a_first")), False),
                (rec("m", module="model.layers.0.bar"), False), (rec("n", module="model.layers.1.bar"), False)])
    assert list(s["uncompared_records"].items()) == [("model.layers.*.foo", 2), ("a_first", 1)]
    assert s["uncompared_modules"] == {"model.layers.*.bar": 2}
    many = settle([(rec(f"r{i}", scope=scope(f"region{i:03d}")), False) for i in range(MAX_REGIONS + 5)])
    assert len(many["uncompared_records"]) == MAX_REGIONS


def test_nothing_recorded_is_all_compared():
    cov = Coverage().finish()
    assert cov["target"]["share"] == 1.0 and cov["golden"]["share"] == 1.0 and cov["full"]
    assert cov["minimum"] == 0.99 and Coverage().finish(0.5)["minimum"] == 0.5


def test_a_sharded_golden_record_is_not_compared():
    c = Coverage()
    c.pair(rec("a"), rec("a", sharded=True))
    assert c.finish()["target"]["paired_records"] == 0 and c.finish()["golden"]["paired_records"] == 0


def test_late_pairing_undoes_golden_only_exactly():
    def golden():
        return rec("g", module="model.qkv", own_module="model.qkv", unread=["bad"], local=["partial sum"],
                   parts=["model.qkv", "model.k"])

    direct = Coverage()
    direct.pair(rec("t", module="model.qkv"), golden())
    late = Coverage()
    held = [golden()]
    late.golden_only(held)
    late.late(held)
    late.pair(rec("t", module="model.qkv"), golden())
    assert late.finish() == direct.finish()
    assert direct.finish()["golden"]["records"] == 2 and direct.finish()["golden"]["unreadable_records"] == 2


def test_coverage_text_says_each_side():
    c = Coverage()
    c.pair(rec("m", module="model.mlp"), rec("m", module="model.mlp"))
    c.pair(rec("x", module="lm_head"), None)
    c.pair(rec("b", unread=["bad"]), rec("b"))
    c.pair(rec("l", local=["partial sum"]), rec("l", local=["partial sum"]))
    c.golden_only([rec(f"g{i}", scope=scope(f"only{i}")) for i in range(10)])
    c.golden_only([rec("u", unread=["x"]), rec("v", unread=["y"])])
    c.golden_only([rec("w", local=["rank-local index"]), rec("w2", local=["rank-local index"])])
    text = coverage_text(c.finish())
    assert text == (
        "target 50% of 4 records compared, 1/2 modules paired; golden 11.8% of 17 records compared, 1/1 modules "
        "paired; 1 record of the target could not be read (dump-value): not compared; 1 record of the target "
        "holds a partial sum of each rank's own (compared only with the same of a run split alike); "
        "not compared in target: lm_head (1 module); "
        "2 records of the golden could not be read (dump-value): not compared; "
        "1 record of the golden holds a partial sum of each rank's own (compared only with the same of a run split "
        "alike); 2 records of the golden hold a rank-local index of each rank's own (compared only with the same of "
        "a run split alike); "
        "not compared in golden: (outside any module) (3 records), only0 (1 record), only1 (1 record), "
        "only2 (1 record), only3 (1 record), only4 (1 record)"), text


def test_coverage_text_counts_regions_past_eight():
    c = Coverage()
    for i in range(10):
        c.pair(rec(f"m{i}", module=f"mod{i}"), None)
    c.pair(rec("r", scope=scope("lm_head")), None)
    c.pair(rec("s", scope=scope("lm_head")), None)
    text = coverage_text(c.finish())
    assert text == ("target 0% of 12 records compared, 0/10 modules paired; golden 100% of 0 records compared; "
                    "not compared in target: " + ", ".join(f"mod{i} (1 module)" for i in range(8)) + " and 2 more")
    c = Coverage()
    c.pair(rec("r", scope=scope("lm_head")), None)
    c.pair(rec("s", scope=scope("lm_head")), None)
    assert coverage_text(c.finish()).endswith("not compared in target: lm_head (2 records)")


# ----------------------------------------------------------------------------- dumpread.py: what a reader is told

from verl_pdbg_conf.compare import dumpread as DR  # noqa: E402


@pytest.mark.parametrize("value,said", [
    (None, "null"), ([1, 2], "a list of 2"), ({"a": 1}, "a mapping of 1"), ("x", 'the text "x"'),
    (True, "the boolean True"), (1.5, "the number 1.5"), ("y" * 50, 'the text "' + "y" * 39 + '...'),
    (10 ** 45, "the number " + str(10 ** 45)[:40] + "..."),
])
def test_show(value, said):
    assert DR.show(value) == said


def test_said_of_is_bounded():
    assert DR.said_of(["a", "b"]) == "a; b"
    assert DR.said_of(list("abcd")) == "a; b; c; d"
    assert DR.said_of(list("abcdef"), sep=" | ") == "a | b | c | d | and 2 more"


@pytest.mark.parametrize("stat,value,dtype,said", [
    ("Max", 1.5, F32, ""), ("Max", 3, I64, ""), ("Mean", None, I64, ""),
    ("Max", True, "torch.bool", ""), ("Min", False, "torch.bool", ""),
    ("Mean", True, "torch.bool", "Mean is the boolean True, not a number"),
    ("Max", True, F32, "Max is the boolean True, not a number"),
    ("Norm", "1.5", F32, 'Norm is the text "1.5", not a number'),
    ("Norm", " NaN ", F32, 'Norm is the text " NaN ", not a number (msprobe writes a non-finite statistic as the '
                          "JSON literal NaN or Infinity, not as text)"),
    ("Max", "-Infinity", F32, 'Max is the text "-Infinity", not a number (msprobe writes a non-finite statistic as '
                              "the JSON literal NaN or Infinity, not as text)"),
    ("Max", [1], F32, "Max is a list of 1, not a number"),
])
def test_stat_problem(stat, value, dtype, said):
    assert DR.stat_problem(stat, value, dtype) == said


def test_tensor_problem_names_the_first_field():
    good = tensor()
    assert DR.tensor_problem(good) == ""
    assert DR.tensor_problem({**good, "dtype": 3}) == "dtype is the number 3, not text"
    assert DR.tensor_problem({**good, "shape": [2, -1]}) == "shape is a list of 2, not a list of sizes"
    assert DR.tensor_problem({**good, "shape": [2.0]}) == "shape is a list of 1, not a list of sizes"
    assert DR.tensor_problem({**good, "Min": "x", "Norm": "y"}) == 'Min is the text "x", not a number'
    assert DR.tensor_problem({**good, "md5": 5}) == "md5 is the number 5, not text"
    assert DR.tensor_problem({**good, "md5": "ab12"}) == ""
    assert DR.tensor_problem({**good, "data_name": 7}) == "data_name is the number 7, not a file name"
    assert DR.tensor_problem({**good, "data_name": "a.pt"}) == ""
    assert DR.tensor_problem({**good, "shape": []}) == ""


@pytest.mark.parametrize("name,split", [
    ("Functional.linear.3.forward", ("Functional.linear", "3.forward", "forward")),
    ("Module.blocks.3.fc.Linear.forward.0", ("Module.blocks.3.fc.Linear", "forward.0", "forward")),
    ("Functional.linear.3.backward", ("Functional.linear", "3.backward", "backward")),
    ("Module.fc.Linear.parameters_grad", ("Module.fc.Linear", "parameters_grad", "parameters_grad")),
    ("Module.fc.Linear.parameters_grad.2", ("Module.fc.Linear.parameters_grad", "parameters_grad",
                                            "parameters_grad")),
    ("parameters_grad", ("", "parameters_grad", "parameters_grad")),
    ("forward", ("", ".forward", "forward")), ("x.forward", ("", "x.forward", "forward")), ("a.b.c", ("", "", "")),
])
def test_split_record(name, split):
    assert DR.split_record(name) == split


def test_rows_of_each_kind_of_argument():
    rec = {
        "input_args": [tensor(2.0), {"type": "torch.Size", "value": [2, 3]}, {"type": "slice", "value": [0, 4, None]},
                       {"type": "ellipsis", "value": "..."}, [tensor(3.0), None], {"type": "int", "value": 5}],
        "input_kwargs": {"group": {"type": "torch.ProcessGroup", "group_ranks": [0, 1]},
                         "src": {"type": "int", "value": 1}, "flag": {"type": "bool", "value": True}},
        "output": [tensor(1.0)],
        "parameters": {"weight": tensor(4.0)},
    }
    rows = DR.rows_of("Functional.op.0.forward", rec)
    got = [(r.name.split("forward.")[1], r.state, r.dtype, r.shape, r.stats) for r in rows]
    assert got == [
        ("input.0", "input", F32, [2], (2.0,) * 4),
        ("input.1", "input", "torch.Size", "[2, 3]", (None,) * 4),
        ("input.2", "input", "slice", "[0, 4, None]", (None,) * 4),
        ("input.3", "input", "ellipsis", "[]", ("...",) * 4),
        ("input.4.0", "input", F32, [2], (3.0,) * 4),
        ("input.4.1", "input", None, None, (None,) * 4),
        ("input.5", "input", "<class 'int'>", "[]", (5,) * 4),
        ("input.group", "input", "torch.ProcessGroup", "[]", ("[0, 1]",) * 4),
        ("input.src", "input", "int", "[]", ("1",) * 4),
        ("input.flag", "input", "<class 'bool'>", "[]", (True,) * 4),
        ("parameters.weight", "parameters", F32, [2], (4.0,) * 4),
        ("output.0", "output", F32, [2], (1.0,) * 4),
    ]
    assert all(r.direction == "forward" and r.record == "Functional.op.0.forward" and not r.bad for r in rows)
    assert [r.data_name for r in rows][:2] == ["-1", "-1"]


def test_rows_of_gradients_files_and_odd_records():
    g = DR.rows_of("Module.fc.Linear.parameters_grad", {"weight": [tensor(1.0)], "bias": [tensor(2.0)]})
    assert [(r.name, r.state, r.direction) for r in g] == [
        ("Module.fc.Linear.parameters_grad.weight", "parameters_grad", "parameters_grad"),
        ("Module.fc.Linear.parameters_grad.bias", "parameters_grad", "parameters_grad")]
    f = DR.rows_of("Functional.op.0.forward", {"output": [tensor(data_name="Functional.op.0.forward.output.0.pt")]})
    assert f[0].name == "Functional.op.0.forward.output.0" and f[0].data_name == "Functional.op.0.forward.output.0.pt"
    (bad,) = DR.rows_of("Functional.op.0.forward", "garbage")
    assert bad.bad == 'is the text "garbage", not a record (a mapping of inputs and outputs)' and bad.state == "input"
    (bad,) = DR.rows_of("Functional.op.0.forward", {"output": 12})
    assert bad.bad == "is the number 12, not a tensor, a value or a list of them"
    (bad,) = DR.rows_of("Functional.op.0.forward", {"output": [{"type": "int", "data_name": 3}]})
    assert bad.bad == "data_name is the number 3, not a file name" and bad.name == "Functional.op.0.forward.output.0"
    p2p = DR.rows_of("Distributed.isend.0.forward", {"input_args": [{"class_type": "torch.distributed.P2POp",
                                                                     "tensor": tensor(7.0)}]})
    assert [(r.name, r.stats) for r in p2p] == [("Distributed.isend.0.forward.input.0", (7.0,) * 4)]
    (empty,) = DR.rows_of("Distributed.isend.0.forward", {"input_args": [{"class_type": "torch.distributed.P2POp",
                                                                          "tensor": 5}]})
    assert empty.dtype == "<class 'NoneType'>" and empty.stats == (None,) * 4
    (null_dtype,) = DR.rows_of("Functional.op.0.forward", {"output": [{**tensor(), "dtype": None}]})
    assert null_dtype.bad == "dtype is null, not text"
    deep = {"output": [[[[1]]]]}
    for _ in range(DR.MAX_DEPTH):
        deep = {"output": [deep["output"]]}
    with pytest.raises(DR.DumpError, match="deeper than 50"):
        DR.rows_of("Functional.op.0.forward", deep)
    assert DR.rows_of("Functional.op.0.backward", {"input": [tensor()]})[0].direction == "backward"
    assert DR.rows_of("Functional.op.0.forward", {"input": [tensor()]}, "backward")[0].direction == "backward"


def test_summary_mode():
    assert DR.summary_mode("F.x.0.forward", {"output": [tensor()]}) == "statistics"
    assert DR.summary_mode("F.x.0.forward", {"output": [{**tensor(), "md5": "ab"}]}) == "md5"
    assert DR.summary_mode("F.x.0.forward", {"output": [{"type": "int", "value": 1}]}) is None
    assert DR.summary_mode("F.x.0.forward", {"output": [{**tensor(), "Max": "x"}, tensor()]}) == "statistics"


def test_key_counter_renumbers_backward_calls_per_op():
    k = DR.KeyCounter()
    assert k.record_prefix("Functional.linear.7.backward") == ("Functional.linear.0.backward", "backward")
    assert k.record_prefix("Functional.relu.3.backward") == ("Functional.relu.0.backward", "backward")
    assert k.record_prefix("Functional.linear.2.backward") == ("Functional.linear.1.backward", "backward")
    assert k.record_prefix("Module.fc.Linear.backward.4") == ("Module.fc.Linear.backward.0", "backward")
    assert k.record_prefix("Functional.linear.9.forward") == ("Functional.linear.9.forward", "forward")
    assert k.record_prefix("backward") == ("backward", "backward") and k.backward == {"Functional.linear": 2,
                                                                                     "Functional.relu": 1,
                                                                                     "Module.fc.Linear": 1}


@pytest.mark.parametrize("key,parent,said", [
    ("a", None, ""), ("a", "Module.x.X.forward.0", ""), ("megatron_micro_step_number", 3, ""),
    ("opt", [None, 2], ""), ("opt", ["ok", 2], ""),
    ("a", 3, "a: its enclosing call is the number 3, not a call name or null"),
    ("opt", [1, 2], "opt: its enclosing call is a list of 2, not a call name or null"),
    ("opt", ["ok", "2"], "opt: its enclosing call is a list of 2, not a call name or null"),
    ("opt", ["ok", 2, 3], "opt: its enclosing call is a list of 3, not a call name or null"),
    ("other", 3, "other: its enclosing call is the number 3, not a call name or null"),
])
def test_construct_entry(key, parent, said):
    assert DR._construct_entry(key, parent) == said


@pytest.mark.parametrize("entry,said", [
    ([["F.a.0.forward"], ["File x.py, line 1, in f"]], ""), ([[], "File x.py, line 1, in f"], ""),
    ([["a"]], "entry k is a list of 1, not [[call names], [frames]]"),
    (["a", ["f"]], "entry k is a list of 2, not [[call names], [frames]]"),
    ([["a"], 3], "entry k is a list of 2, not [[call names], [frames]]"),
    ([[1], ["f"]], "entry k holds a call name that is the number 1, not text"),
    ([["a"], [None]], "entry k holds a frame that is null, not text"),
])
def test_stack_entry(entry, said):
    assert DR._stack_entry("k", entry) == said


def test_check_items_reads_each_file_once(tmp_path):
    p = tmp_path / "construct.json"
    p.write_text('{"a": null, "b": 3}')
    assert DR.check_items(str(p)) == "b: its enclosing call is the number 3, not a call name or null"
    s = tmp_path / "odd.json"
    s.write_text('{"k": [["a"], [1]]}')
    assert DR.check_items(str(s), "stack.json") == "entry k holds a frame that is the number 1, not text"
    assert DR.check_items(str(tmp_path / "none.json"), "stack.json") == ""
    bad = tmp_path / "stack.json"
    bad.write_bytes(b'{"k": "\xff"}')
    assert DR.check_items(str(bad)) == "is not UTF-8 text"
    bad.write_text('[1]')
    assert DR.check_items(str(bad)) == "is not a JSON object"
    bad.write_text('{"k": [[], []] "j": 1}')
    assert DR.check_items(str(bad)).startswith("is not valid JSON (expected ',' or '}' near byte")
    d = tmp_path / "dir" / "stack.json"
    d.mkdir(parents=True)
    assert DR.check_items(str(d)).startswith("cannot be read (")


def test_dump_reader_head_and_stream(tmp_path):
    data = {f"Functional.x.{i}.forward": {"output": [{"type": "int", "value": i}]} for i in range(3)}
    data["Functional.y.0.forward"] = {"output": [tensor()]}
    p = write_dump(tmp_path / "h", data)
    r = DR.DumpReader(p, chunk=7)
    head = r.head()
    assert head == {"summary_mode": "statistics", "task": "statistics", "level": "mix", "framework": "pytorch",
                    "dump_data_dir": None}
    assert [n for n, _ in r.records()] == list(data)
    r = DR.DumpReader(p)
    assert r.head(limit=2) == {"summary_mode": None, "task": "statistics", "level": "mix", "framework": "pytorch",
                               "dump_data_dir": None}
    assert len(list(r.records())) == 4
    broken = tmp_path / "b.json"
    broken.write_text('{"task": 3, "data": {}}')
    r = DR.DumpReader(str(broken))
    assert r.head() == {}
    with pytest.raises(DR.DumpError, match="has a task that is the number 3, not text"):
        list(r.records())
    for text, said in (('[]', "is not a JSON object"), ('{"task": "x"}', 'has no "data" mapping'),
                       ('{"data": {"a": 1} "b": 2}', "expected ',' or '}'"), ('{"data": {"a" 1}}', "expected ':'"),
                       ('{"data": {"a"', "expected ':', found 'end of file'"),
                       ('{"data": {"a": [1, 2', "truncated"), ('{"data": {"a": 1' + "0" * 5000 + "}}",
                                                                 "JSON cannot give Python"),
                       ('{"data": {"a": ' + "[" * 100000 + "}}", "recursion")):
        broken.write_text(text)
        with pytest.raises(DR.DumpError) as e:
            list(DR.DumpReader(str(broken), chunk=5).records())
        assert said in str(e.value), (text[:30], str(e.value))
    broken.write_text('{"data": {"a": 12345678901234567890}}')
    assert list(DR.DumpReader(str(broken), chunk=3).records()) == [("a", 12345678901234567890)]
    broken.write_text('{"data": {"a": 1}, "tail": true}')
    r = DR.DumpReader(str(broken), chunk=2)
    assert list(r.records()) == [("a", 1)] and r.header == {"tail": True}


def tokens(tmp_path, doc) -> tuple:
    p = tmp_path / "tokens.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return DR.read_tokens(str(p))


REQ = {"request": "r1", "positions": [0, 1], "token_ids": [5, 6], "rows": [0, 2]}


def test_read_tokens_keeps_what_is_of_the_runtimes_shape(tmp_path):
    doc = {"dtype": "torch.bfloat16", "error": None, "architectures": ["Qwen2ForCausalLM"],
           "hf_config": {"num_hidden_layers": 2, "n_routed_experts": 4, "x": None, "scoring_func": "softmax"},
           "requests": [{**REQ, "routed_experts": [[[0, 3], [1, 2]], [[3, 0], [2, 1]]]}],
           "sampled": {"r1": {"token_ids": [7], "logprob": -0.5, "logprob_logits": None}},
           "calls": [{"input_ids": [[1, 2]], "attention_mask": [[1, True]], "position_ids": [[0, 1]],
                      "next_logprobs": [[-0.1, None]]}], "ignored": 1}
    out, said = tokens(tmp_path, doc)
    assert said == []
    assert out == {"dtype": "torch.bfloat16", "architectures": ["Qwen2ForCausalLM"],
                   "hf_config": {"num_hidden_layers": 2, "n_routed_experts": 4, "scoring_func": "softmax"},
                   "requests": doc["requests"], "sampled": doc["sampled"], "calls": doc["calls"]}


@pytest.mark.parametrize("doc,said", [
    ({"dtype": 3, "error": ["e"]}, ["dtype is the number 3, not text", "error is a list of 1, not text"]),
    ({"architectures": "Qwen2"}, ['architectures is the text "Qwen2", not a list of class names']),
    ({"architectures": ["A", 1]}, ["architectures is a list of 2, not a list of class names"]),
    ({"hf_config": [1]}, ["hf_config is a list of 1, not a mapping"]),
    ({"hf_config": {"a": [1], "b": 1}}, ["hf_config's a is not a scalar"]),
    ({"hf_config": {"a": [1], "c": {}, "b": 1}}, ["hf_config's a, c are not a scalar"]),
    ({"requests": "x"}, ['requests is the text "x", not a list: none of it is compared']),
    ({"requests": [3]}, ["requests[0] is the number 3, not a request (a mapping): not compared"]),
    ({"requests": [{**REQ, "request": 1}]}, ["requests[0].request is the number 1, not a request id (text): "
                                             "not compared"]),
    ({"requests": [{**REQ, "positions": [0, -1]}]}, ["requests[0] (request r1): positions[1] is the number -1, not a "
                                                     "position: not compared"]),
    ({"requests": [{**REQ, "token_ids": "ab"}]}, ['requests[0] (request r1): token_ids is the text "ab", not a list '
                                                  "of integers: not compared"]),
    ({"requests": [{**REQ, "token_ids": [5]}]}, ["requests[0] (request r1): 2 positions but 1 token ids: not "
                                                 "compared"]),
    ({"requests": [{**REQ, "rows": [0]}]}, ["requests[0] (request r1): rows is a list of 1, not [first row, end]: "
                                            "not compared"]),
    ({"requests": [{**REQ, "rows": [0, -2]}]}, ["requests[0] (request r1): rows is a list of 2, not [first row, "
                                                "end]: not compared"]),
    ({"sampled": [1]}, ["sampled is a list of 1, not a mapping of requests: no sampled token is compared"]),
    ({"sampled": {"r": 1}}, ['sampled["r"] is the number 1, not a mapping: its sampled token is not compared']),
    ({"sampled": {"r": {"token_ids": [1.5]}}}, ['sampled["r"].token_ids[0] is the number 1.5, not a position: its '
                                                "sampled token is not compared"]),
    ({"sampled": {"r": {"token_ids": [1], "logprob": "x"}}}, ['sampled["r"].logprob is the text "x", not a number: '
                                                              "not compared"]),
    ({"calls": [1]}, ["calls[0] is the number 1, not a forward's record (a mapping): not compared"]),
    ({"calls": [{"input_ids": 1}]}, ["calls[0].input_ids is the number 1, not rows of token ids: not compared"]),
    ({"calls": [{"input_ids": [1]}]}, ["calls[0].input_ids[0] is the number 1, not a row of token ids: not "
                                       "compared"]),
    ({"calls": [{"input_ids": [[-1]]}]}, ["calls[0].input_ids[0][0] is the number -1, not token ids: not compared"]),
    ({"calls": [{"input_ids": [[1]], "attention_mask": [[0.5]]}]}, ["calls[0].attention_mask[0][0] is the number 0.5, "
                                                                    "not 0 or 1: not compared"]),
    ({"calls": [{"input_ids": [[1]], "position_ids": [[-1]]}]}, ["calls[0].position_ids[0][0] is the number -1, not "
                                                                 "positions: not compared"]),
    ({"calls": [{"input_ids": [[1]], "next_logprobs": [["x"]]}]}, ['calls[0].next_logprobs[0][0] is the text "x", '
                                                                   "not log-probs: not compared"]),
])
def test_read_tokens_says_what_it_left_out(tmp_path, doc, said):
    assert tokens(tmp_path, doc)[1] == said


def test_read_tokens_of_no_token_record(tmp_path):
    assert tokens(tmp_path, "[1]") == (None, ["is a list of 1, not a token record (a mapping)"])
    assert tokens(tmp_path, '{"a": ') == (None, ["is not valid JSON (Expecting value): truncated or overwritten"])
    assert tokens(tmp_path, "[" * 100000) == (None, ["is not valid JSON (RecursionError): truncated or overwritten"])
    (tmp_path / "tokens.json").write_bytes(b"\xff")
    assert DR.read_tokens(str(tmp_path / "tokens.json")) == (None, ["is not UTF-8 text"])
    with pytest.raises(FileNotFoundError):
        DR.read_tokens(str(tmp_path / "none.json"))
    out, said = tokens(tmp_path, {"requests": [REQ, 3]})
    assert out["requests"] == [REQ, None]


@pytest.mark.parametrize("routed,experts,layers,said", [
    ([[[0, 1]], [[1, 0]]], 4, 1, ""),
    ([[[0, 1]]], 4, 1, "is a list of 1, not one entry per position (2)"),
    ("x", 4, 1, 'is the text "x", not one entry per position (2)'),
    ([[[0, 1]], []], 4, 1, "[1] is a list of 0, not [layers][top_k] expert numbers"),
    ([[[0, 1]], [[]]], 4, 1, "[1] is a list of 1, not [layers][top_k] expert numbers"),
    ([[[0, 1]], [3]], 4, 1, "[1] is a list of 1, not [layers][top_k] expert numbers"),
    ([[[0, 1]], [[1]]], 4, 1, "[1] is not [1 layers][2], the shape of its first entry"),
    ([[[0, 1]], [[1, 0], [1, 0]]], 4, 1, "[1] is not [1 layers][2], the shape of its first entry"),
    ([[[0, 4]], [[1, 0]]], 4, 1, "[0][0] holds the number 4, not an expert number below the model's 4"),
    ([[[0, -1]], [[1, 0]]], None, 1, "[0][0] holds the number -1, not an expert number"),
    ([[[0, 1.0]], [[1, 0]]], None, None, "[0][0] holds the number 1.0, not an expert number"),
    ([[[0, 9]], [[1, 0]]], None, None, ""),
    ([[[0, 1]], [[1, 0]]], 4, 2, "holds 1 layers, the model 2: routing records for some layers only"),
])
def test_routed_experts(routed, experts, layers, said):
    assert DR._routed(routed, 2, experts, layers) == said


def test_routing_that_is_not_of_its_shape_is_left_out(tmp_path):
    req = {**REQ, "routed_experts": [[[0, 9]], [[1, 0]]]}
    out, said = tokens(tmp_path, {"hf_config": {"num_local_experts": 4, "num_hidden_layers": 1}, "requests": [req]})
    assert said == ["requests[0] (request r1): routed_experts [0][0] holds the number 9, not an expert number below "
                    "the model's 4: its routing is read from the router logits"]
    assert out["requests"] == [REQ]
    out, said = tokens(tmp_path, {"hf_config": {"num_local_experts": 4, "num_hidden_layers": "1"}, "requests": [
        {**REQ, "routed_experts": [[[0, 1]], [[1, 0]]]}]})
    assert said == [] and "routed_experts" in out["requests"][0]


def test_reader_hands_unreadable_records_to_its_caller(tmp_path):
    data = {"Functional.linear.0.forward": {"output": [{**tensor(), "Max": "x"}]},
            "Functional.relu.0.forward": {"output": [tensor()]}}
    path = write_dump(tmp_path / "u", data)
    said: list = []
    reader = R.Reader(path, unread=said)
    assert len(list(reader)) == 2 and reader.unread is said
    assert said == [(path, "Functional.linear.0.forward", ['output.0 Max is the text "x", not a number'])]


def test_reader_places_api_calls_by_their_stack(tmp_path):
    from verl_pdbg_conf.compare.pipeline.stacks import Stacks

    data = {"Module.model.M.forward.0": {"output": [tensor()]},
            "Functional.linear.0.forward": {"output": [tensor()]}}
    path = write_dump(tmp_path / "s", data)
    frame = "File /src/model.py, line 12, in forward, y = self.fc(x)"
    (tmp_path / "s" / "stack.json").write_text(json.dumps({
        "0": [["Functional.linear.0.forward"], [frame]], "1": [["Module.model.M.forward.0"], [frame]]}))
    by = {r.name: r for r in R.Reader(path, stacks=Stacks(str(tmp_path / "s" / "stack.json")))}
    assert "model.py:12" in by["Functional.linear.0.forward"].site
    assert by["Module.model.M.forward.0"].site == ""  # a module is placed by its path, not its stack


def test_a_construct_json_broken_after_its_check_is_dropped(tmp_path):
    """Fault injection: the file is overwritten between its check and its reading."""
    p = tmp_path / "construct.json"
    p.write_text(json.dumps({"a": "Module.x.X.forward.0"}))
    c = R.Construct(str(p))
    p.write_text('{"a": ')
    assert c.get("a") is None and c.get("a") is None


def test_no_file_for_an_unreadable_row():
    r = R.Record("F.x.0.forward", "F.x.0.forward", "F.x", "forward", [], tensor_dir="/d")
    assert r.file_of(row(data_name="a.pt", bad="why")) is None
    assert r.file_of(row(data_name="a.pt")) == "/d/a.pt" and r.file_of(row(data_name="")) is None


def test_late_pairing_undoes_golden_only_in_every_case():
    """golden_only then late then pair is the same as pair alone: for a record paired whole (a fused one with
    parts, under its own module name), one unreadable without parts, and one held apart inside a paired module."""
    def same(t, make_g, compared=True):
        direct, late = Coverage(), Coverage()
        for c in (direct, late):
            c.pair(rec("p", module="model"), rec("p", module="model"))
            c.golden_only([rec(f"o{i}", scope=scope("lm_head")) for i in range(3)])
        held = [make_g()]
        late.golden_only(held)
        late.late(held)
        direct.pair(t, make_g(), compared)
        late.pair(t, make_g(), compared)
        assert late.finish() == direct.finish()
        return direct.finish()["golden"]

    g = same(rec("t", module="model.sub"), lambda: rec("g", module="x.other", own_module="model.sub",
                                                       parts=["model.sub", "model.sub.k"]))
    assert g["paired_records"] == 3 and g["uncompared_records"] == {"lm_head": 3}
    g = same(rec("t", module="model.sub"), lambda: rec("g", module="model.sub", unread=["bad"]))  # late: modules
    assert g["unreadable_records"] == 1
    g = same(rec("t", module="model.sub"), lambda: rec("g", module="model.sub"), compared=False)
    assert g["compared_records"] == 2 and g["records"] == 5


def test_parts_of_an_unpaired_fused_call_are_counted_inside_a_paired_module():
    qkv = dict(module="model.qkv", parts=["model.qkv", "model.k"])
    s = settle([(rec("m", module="model"), True), (rec("a", **qkv), False), (rec("b", **qkv), False)]
               + [(rec(f"o{i}", scope=scope("lm_head")), False) for i in range(3)])
    assert s["records"] == 8 and s["compared_records"] == 5 and s["accounted_modules"] == 2


def test_calls_regions_add_up_per_kind():
    s = settle([(rec(f"{i}{j}", module=f"model.layers.{i}.qkv"), j == 0) for i in range(2) for j in range(3)])
    assert s["uncompared_records"] == {"model.layers.*.qkv (its calls)": 4}


def test_coverage_text_plurals_and_the_eighth_region():
    def text(n_modules, kinds=1):
        c = Coverage()
        for i in range(n_modules):
            c.pair(rec(f"m{i}", module=f"mod{i % kinds}.x{i}" if kinds > 1 else f"layers.{i}"), None)
        return coverage_text(c.finish())
    assert text(2).endswith("not compared in target: layers.* (2 modules)")
    assert text(8, kinds=8).endswith("mod7.x7 (1 module)")
    assert text(9, kinds=9).endswith("mod7.x7 (1 module) and 1 more")


def test_rows_of_collective_peers_md5_and_file_names():
    rec = {"input_kwargs": {k: {"type": "int", "value": 3} for k in ("dst", "group_src", "group_dst")},
           "output": [{**tensor(), "md5": "ab12", "data_name": "Functional.op.0.forward.output.7.pt"}]}
    rows = DR.rows_of("Functional.op.0.forward", rec)
    assert [(r.name.rsplit(".", 1)[-1], r.dtype, r.stats) for r in rows[:3]] == \
        [(k, "int", ("3",) * 4) for k in ("dst", "group_src", "group_dst")]
    assert rows[3].md5 == "ab12" and rows[3].name == "Functional.op.0.forward.output.7"  # named by its file
    # msprobe's order: inputs, parameters, outputs; an unreadable or null output keeps an output's place
    rows = DR.rows_of("Functional.op.0.forward", {"input": [tensor()], "output": [None, 5, {"type": "int",
                                                                                           "data_name": 1}]})
    assert [r.state for r in rows] == ["input", "output", "output", "output"]
    rows = DR.rows_of("Functional.op.0.forward", {"output": [None, 5], "input": [tensor()]})
    assert [r.state for r in rows] == ["input", "output", "output"]
    rows = DR.rows_of("Functional.op.0.forward", {"output": {"a": tensor()}, "input": [tensor()]})
    assert [r.state for r in rows] == ["input", "output"]
    bad = DR.rows_of("Functional.op.0.forward", {"output": [5]})[0]
    assert (bad.dtype, bad.data_name, bad.stats) == ("", "-1", (None,) * 4)
    none = DR.rows_of("Functional.op.0.forward", {"output": [None]})[0]
    assert (none.dtype, none.data_name) == (None, "-1")


def test_nesting_is_bounded_for_mappings_and_lists():
    nested = tensor()
    for _ in range(DR.MAX_DEPTH - 1):
        nested = {"k": nested}
    assert len(DR.rows_of("Functional.op.0.forward", {"output": nested})) == 1
    with pytest.raises(DR.DumpError):
        DR.rows_of("Functional.op.0.forward", {"output": {"k": {"k": nested}}})
    listed = [tensor()]
    for _ in range(DR.MAX_DEPTH - 1):
        listed = [listed]
    assert len(DR.rows_of("Functional.op.0.forward", {"output": listed})) == 1


def test_tokens_ids_and_positions_are_never_negative(tmp_path):
    assert tokens(tmp_path, {"requests": [{**REQ, "token_ids": [5, -1]}]})[1] == [
        "requests[0] (request r1): token_ids[1] is the number -1, not a position: not compared"]
    assert tokens(tmp_path, {"calls": [{"input_ids": [[0, 1]]}]})[1] == []
    out, said = tokens(tmp_path, {"sampled": {"a": 1, "b": 2, "c": {"token_ids": [1], "logprob": "x"}}})
    assert len(said) == 3 and out == {"sampled": {"c": {"token_ids": [1], "logprob": None, "logprob_logits": None}}}


def test_routing_layers_from_the_model_config(tmp_path):
    req = {**REQ, "routed_experts": [[[0, 1]], [[1, 0]]]}
    out, said = tokens(tmp_path, {"hf_config": {"num_local_experts": 4, "num_hidden_layers": 2}, "requests": [req]})
    assert said == ["requests[0] (request r1): routed_experts holds 1 layers, the model 2: routing records for some "
                    "layers only: its routing is read from the router logits"]


def test_check_items_of_an_empty_or_spaced_object(tmp_path):
    p = tmp_path / "construct.json"
    p.write_text("{}")
    assert DR.check_items(str(p)) == "" and DR.check_items(str(p)) == ""
    p.write_text('  {"a":null,"b":"Module.x.X.forward.0"}')
    assert DR.check_items(str(p)) == "" and list(DR.iter_items(str(p))) == [("a", None),
                                                                            ("b", "Module.x.X.forward.0")]


def test_reader_details_said_exactly(tmp_path):
    assert DR.show("y" * 38) == 'the text "' + "y" * 38 + '"' and DR.show("y" * 39).endswith("y...")
    good = tensor()
    assert DR.tensor_problem({**good, "shape": [0, 2]}) == ""
    assert DR.tensor_problem({**tensor(dtype="torch.bool"), "Max": True, "Min": False}) == ""
    rows = DR.rows_of("Functional.op.0.forward", {"output": [tensor()]})
    assert rows[0].key == rows[0].name
    out, said = tokens(tmp_path, {"sampled": {"a": {"token_ids": [-1]}, "b": {"token_ids": [1], "logprob": 0}}})
    assert out == {"sampled": {"b": {"token_ids": [1], "logprob": 0, "logprob_logits": None}}} and len(said) == 1
    odd = {f"k{i}": [i] for i in range(6)}
    assert tokens(tmp_path, {"hf_config": odd})[1] == ["hf_config's k0, k1, k2, k3, k4 are not a scalar"]
    data = {f"Functional.x.{i}.forward": {"output": [{"type": "int", "value": i}]} for i in range(3)}
    data["Functional.y.0.forward"] = {"output": [tensor()]}
    assert DR.DumpReader(write_dump(tmp_path / "h", data)).head(limit=3)["summary_mode"] is None
    p = tmp_path / "b.json"
    for text, said in (("[]", "is not a JSON object: not an msprobe dump"),
                       ('{"task": "x"}', 'has no "data" mapping: not an msprobe dump'),
                       ('{"data": {"a": ' + "[" * 100000 + "}}",
                        "nests JSON deeper than Python's recursion limit: not an msprobe dump")):
        p.write_text(text)
        with pytest.raises(DR.DumpError) as e:
            list(DR.DumpReader(str(p)).records())
        assert str(e.value) == said


# ----------------------------------------------------------------------------- dumpread: the survivors' rules

def test_a_size_before_the_first_tensor_does_not_decide_the_summary_mode():
    """msprobe's md5_find looks for a tensor's md5: a torch.Size argument (Torch.zeros' size) has none."""
    rec = {"input_args": [{"type": "torch.Size", "value": [2, 3]}], "output": [{**tensor(), "md5": "ab"}]}
    assert DR.summary_mode("Torch.zeros.0.forward", rec) == "md5"
    group = {"input_kwargs": {"group": {"type": "torch.ProcessGroup", "group_ranks": [0]}}, "output": [tensor()]}
    assert DR.summary_mode("Distributed.all_reduce.0.forward", group) == "statistics"


def test_every_row_of_a_state_keeps_the_states_place():
    """reorder_index: inputs, parameters, outputs, whatever an output is (a value, null, unreadable)."""
    weight = {"parameters": {"weight": tensor(5.0)}}
    for output, part in (({"type": "int", "value": 3}, "output.0"), (None, "output.0"), (5, "output.0"),
                         ([{"class_type": "torch.distributed.P2POp", "tensor": tensor(7.0)}], "output.0")):
        rows = DR.rows_of("Functional.op.0.forward", {"output": output if type(output) is list else [output],
                                                      **weight})
        assert [(r.name.split("forward.")[1], r.state) for r in rows] == [
            ("parameters.weight", "parameters"), (part, "output")], output


def test_an_unreadable_row_is_named_for_its_place():
    (arg,) = DR.rows_of("Functional.op.0.forward", {"input_args": [5]})
    assert (arg.name, arg.key, arg.record) == ("Functional.op.0.forward.input.0", "Functional.op.0.forward.input.0",
                                               "Functional.op.0.forward")
    (rec,) = DR.rows_of("Functional.op.0.forward", 5)
    assert (rec.name, rec.bad) == ("Functional.op.0.forward",
                                   "is the number 5, not a record (a mapping of inputs and outputs)")


def test_a_list_holding_a_mapping_of_tensors_is_walked():
    """op_item_parse: a list element without a "type" is a container, a P2POp one (even with a "type") its
    tensor, whatever else it holds."""
    rows = DR.rows_of("Functional.op.0.forward", {"input_args": [{"a": tensor(1.0), "b": tensor(2.0)}]})
    assert [(r.name.split("forward.")[1], r.dtype, r.stats[0]) for r in rows] == [("input.0.a", F32, 1.0),
                                                                                   ("input.0.b", F32, 2.0)]
    p2p = {"class_type": "torch.distributed.P2POp", "type": "torch.distributed.P2POp", "tensor": tensor(7.0),
           "op": "isend", "peer": 1}
    (row_,) = DR.rows_of("Distributed.batch_isend_irecv.0.forward", {"input_args": [[p2p]]})
    assert (row_.name.split("forward.")[1], row_.dtype, row_.shape, row_.stats, row_.state) == (
        "input.0.0", F32, [2], (7.0,) * 4, "input")


@pytest.mark.parametrize("name,split", [
    # msprobe's split_data_name_components on names of two and three parts
    ("a.parameters_grad", ("a", "parameters_grad", "parameters_grad")),
    ("parameters_grad.0", ("parameters_grad", "parameters_grad", "parameters_grad")),
    ("linear.3.forward", ("linear", "3.forward", "forward")),
    ("M.forward.0", ("M", "forward.0", "forward")),
])
def test_split_record_of_short_names(name, split):
    assert DR.split_record(name) == split


@pytest.mark.parametrize("name", ["parameters_grad", "parameters_grad.0", "a.parameters_grad",
                                  "Module.fc.Linear.parameters_grad.1"])
def test_a_gradient_record_of_any_length_is_read_as_one(name):
    rows = DR.rows_of(name, {"weight": [tensor(1.0)], "step": [{"type": "int", "value": 3}]})
    assert [(r.name, r.state, r.direction, r.stats[0]) for r in rows] == [
        (f"{name}.weight", "parameters_grad", "parameters_grad", 1.0),
        (f"{name}.step", "parameters_grad", "parameters_grad", 3)]
    (value,) = DR.rows_of(name, [{"type": "int", "value": 1}])  # a list straight under the record: its name
    assert (value.name, value.dtype, value.stats) == (name, "<class 'int'>", (1,) * 4)


def test_nesting_is_bounded_at_exactly_max_depth():
    """A tensor MAX_DEPTH levels down is read, one more is refused, in a call's record and a gradient's."""
    def nest(levels):
        d = tensor()
        for _ in range(levels):
            d = {"k": d}
        return d
    assert len(DR.rows_of("Functional.op.0.forward", {"output": nest(DR.MAX_DEPTH)})) == 1
    with pytest.raises(DR.DumpError, match="deeper than 50"):
        DR.rows_of("Functional.op.0.forward", {"output": nest(DR.MAX_DEPTH + 1)})
    assert len(DR.rows_of("M.parameters_grad", nest(DR.MAX_DEPTH))) == 1
    with pytest.raises(DR.DumpError, match="deeper than 50"):
        DR.rows_of("M.parameters_grad", nest(DR.MAX_DEPTH + 1))
    listed = tensor()
    for _ in range(DR.MAX_DEPTH + 1):  # the innermost list MAX_DEPTH levels down
        listed = [listed]
    assert len(DR.rows_of("Functional.op.0.forward", {"output": listed})) == 1
    with pytest.raises(DR.DumpError, match="deeper than 50"):
        DR.rows_of("Functional.op.0.forward", {"output": [listed]})


@pytest.mark.parametrize("chunk", [5, DR.CHUNK])
def test_dump_json_of_any_spacing_reads_the_same(tmp_path, chunk):
    """json.dump's separators, or none, and blanks before the object: the same header and records."""
    data = {f"Functional.x.{i}.forward": {"output": [tensor(float(i))]} for i in range(3)}
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "data": data, "dump_data_dir": None}
    p = tmp_path / "dump.json"
    for text in (json.dumps(doc, separators=(",", ":")), "\n  " + json.dumps(doc, indent=1)):
        p.write_text(text)
        r = DR.DumpReader(str(p), chunk=chunk)
        assert list(r.records()) == list(data.items()) and r.header == {k: v for k, v in doc.items() if k != "data"}
        assert dict(DR.iter_items(str(p), chunk=chunk)) == doc


def test_a_dump_cut_off_after_a_number_is_refused(tmp_path):
    p = tmp_path / "dump.json"
    p.write_text('{"data": {}, "n": 12')
    with pytest.raises(DR.DumpError, match="expected ',' or '}'"):
        list(DR.DumpReader(str(p)).records())


def test_the_reader_holds_a_chunk_not_the_file(tmp_path):
    data = {f"Functional.x.{i}.forward": {"output": [tensor(float(i))]} for i in range(20000)}
    p = write_dump(tmp_path / "big", data)
    size = (tmp_path / "big" / "dump.json").stat().st_size
    tracemalloc.start()
    try:
        first = next(iter(DR.DumpReader(p, chunk=1 << 12).records()))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first[0] == "Functional.x.0.forward" and size > 1 << 20 and peak < size // 8, (peak, size)


@pytest.fixture
def ascii_locale():
    """A process whose locale is not UTF-8 (LC_CTYPE=C): what open() would decode with, left to itself."""
    was = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, was)


def test_files_are_read_as_utf8_whatever_the_locale(tmp_path, ascii_locale):
    name = "Module.blöcke.0.Linear.forward.0"
    p = tmp_path / "dump.json"
    p.write_text(json.dumps({"task": "statistics", "data": {name: {"output": [tensor()]}}}, ensure_ascii=False),
                 encoding="utf-8")
    assert [n for n, _ in DR.DumpReader(str(p)).records()] == [name]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "construct.json").write_text(json.dumps({name: "Module.straße.M.forward.0"},
                                                              ensure_ascii=False), encoding="utf-8")
    assert list(DR.iter_items(str(tmp_path / "d" / "construct.json"))) == [(name, "Module.straße.M.forward.0")]
    (tmp_path / "tokens.json").write_text(json.dumps({"engine": "vLLM ü"}, ensure_ascii=False), encoding="utf-8")
    assert DR.read_tokens(str(tmp_path / "tokens.json")) == ({"engine": "vLLM ü"}, [])


def test_layers_from_the_stack_counted_per_pass_of_the_dumps_first_op(tmp_path):
    """No embedding in the dump: a pass is a call of its first op, so a line called once per layer in each of
    two passes gives layers 0, 1, 0, 1 (not four layers of one pass)."""
    from verl_pdbg_conf.compare.pipeline.stacks import Stacks

    names = ["Functional.conv2d.0.forward", "Functional.linear.0.forward", "Functional.linear.1.forward",
             "Functional.conv2d.1.forward", "Functional.linear.2.forward", "Functional.linear.3.forward"]
    path = write_dump(tmp_path / "p", {n: {"output": [tensor()]} for n in names}, level="L1")
    loop = ["File /src/model.py, line 30, in forward, for layer in self.layers:",
            "File /src/train.py, line 5, in main, model(x)"]
    (tmp_path / "p" / "stack.json").write_text(json.dumps({
        "0": [[n for n in names if "conv2d" in n], ["File /src/model.py, line 20, in forward, x = self.conv(x)",
                                                    loop[1]]],
        "1": [[n for n in names if "linear" in n], ["File /src/model.py, line 8, in forward, x = self.fc(x)",
                                                    *loop]]}))
    got = [(r.name, r.layer) for r in R.Reader(path, stacks=Stacks(str(tmp_path / "p" / "stack.json")))]
    assert [layer for _, layer in got if "linear" in _] == [0, 1, 0, 1]


def test_unreadable_calls_of_one_module_are_each_counted_unreadable_alone():
    """Two unreadable calls and one readable unpaired call of one module: 2 unreadable, 1 not compared."""
    s = settle([(rec("m0", module="model.layers.0", unread=["x"]), False),
                (rec("m1", module="model.layers.0", unread=["y"]), False),
                (rec("m2", module="model.layers.0"), False)])
    assert s["counts"].as_dict() == {"unit": "records", "total": 3, "compared": 0, "not_compared": 1,
                                     "unreadable": 2}
