"""The parallelism kinds (verl_pdbg_conf/compare/parallel/): data-parallel ranks put together record by record
(shares concatenated, partial sums and rank-local indices kept as the ranks' own), a data-parallel side's
gradients judged up to its loss's scaling, and each run's layout decided from its dumps. Real megatron-core
runs are in test_compare_megatron.py and test_compare_megatron_moe.py; here, records made by hand."""

from __future__ import annotations

import json
import math

import pytest

from verl_pdbg_conf.compare.dumpread import Row
from verl_pdbg_conf.compare.judge import Judge, Rule
from verl_pdbg_conf.compare.pairs import RankDump
from verl_pdbg_conf.compare.parallel import layout
from verl_pdbg_conf.compare.parallel.kinds import DATA, KINDS
from verl_pdbg_conf.compare.parallel.merge import PARTIAL_SUM, RANK_INDEX, DataMerge
from verl_pdbg_conf.compare.parallel.replica import Level, Replica
from verl_pdbg_conf.compare.pipeline.gradscale import GradScale
from verl_pdbg_conf.compare.records import Record


def _stats(values):
    return (max(values), min(values), sum(values) / len(values), math.sqrt(sum(v * v for v in values)))


def _row(name, values, shape, state="output", dtype="torch.float32", direction="forward"):
    stats = _stats(values) if "float" in dtype else (max(values), min(values), None, None)
    return Row(name, name, name.rsplit(".", 2)[0], state, direction, dtype, shape, stats, "-1")


def _rec(name, rows, direction="forward", after_backward=False, scope=""):
    r = Record(name, name, name.rsplit(".", 2)[0], direction, rows, 0, after_backward=after_backward, scope=scope)
    if name.startswith("Module."):
        r.module = name.split(".", 1)[1].rsplit(".", 3)[0]
    return r


EMB = "Module.embedding.word_embeddings.VocabParallelEmbedding.forward.0"
SUM, DIV = "Tensor.sum.0.forward", "Tensor.__mul__.0.forward"
IDX, RED = "Tensor.__setitem__.0.forward", "Distributed.all_reduce.0.forward"
GRAD = "Module.output_layer.ColumnParallelLinear.parameters_grad.0"


def _rank(r: int):
    """One data-parallel rank's records: its share of the token ids and of the embedding's output, the
    embedding's weight alike, its loss (a sum, times the data-parallel size 2), an index of its own rows, its
    token count all-reduced to the whole batch's, its gradient."""
    ids = [[3, 5], [7, 2]][r]
    out = [[0.5, -1.0], [2.0, 0.25]][r]
    loss = [1.5, -0.5][r]
    return [
        _rec(EMB, [_row(EMB + ".input.0", ids, [1, 2], "input", "torch.int64"),
                   _row(EMB + ".parameters.weight", [1.0, 2.0, 3.0], [3, 1], "parameters"),
                   _row(EMB + ".output.0", out, [1, 2, 1])], scope=EMB),
        _rec(SUM, [_row(SUM + ".input.0", out, [1, 2], "input"), _row(SUM + ".output.0", [loss], [])]),
        _rec(DIV, [_row(DIV + ".input.0", [loss], [], "input"), _row(DIV + ".input.1", [2], "[]", "input", "int"),
                   _row(DIV + ".output.0", [2 * loss], [])]),
        _rec(IDX, [_row(IDX + ".input.0", out, [2, 1], "input"),
                   _row(IDX + ".input.1.0", [0, 1], [2], "input", "torch.int64")]),
        _rec(RED, [_row(RED + ".input.0", [2.0], [], "input"), _row(RED + ".output.0", [4.0], [])]),
        _rec(GRAD, [_row(GRAD + ".parameters_grad.weight", [0.1 * (r + 1), 0.2], [2, 1], "parameters_grad",
                         direction="parameters_grad")], direction="parameters_grad"),
    ]


def test_data_parallel_ranks_put_together():
    merge = DataMerge()
    emb, loss, scaled, index, reduced, grad = merge([iter(_rank(0)), iter(_rank(1))])
    ids, weight, out = emb.rows
    assert ids.shape == [2, 2] and (ids.stats[0], ids.stats[1]) == (7, 2) and not ids.local  # the batch's shares
    assert weight.shape == [3, 1] and weight.alike == 2 and not weight.local  # held alike: once
    assert out.shape == [2, 2, 1] and out.stats == pytest.approx(_stats([0.5, -1.0, 2.0, 0.25]))
    # a scalar that differs (a rank's loss) and the arithmetic on it (times the data-parallel size) are
    # each rank's own, kept side by side
    assert {r.local for r in loss.rows} == {r.local for r in scaled.rows} == {PARTIAL_SUM}
    assert scaled.rows[0].shape == [2] and loss.extra["local"] == {PARTIAL_SUM}
    # an index of each rank's own rows (0..n-1 on every rank): not the model's data
    assert index.rows[1].local == RANK_INDEX and index.rows[0].shape == [4, 1]
    # an all-reduce whose result the ranks share: each input is a rank's part, the result the model's
    assert reduced.rows[0].local == PARTIAL_SUM and not reduced.rows[1].local and reduced.rows[1].stats[0] == 4.0
    assert grad.rows[0].local == PARTIAL_SUM  # a gradient before the data-parallel all-reduce
    assert merge.local == {PARTIAL_SUM: 7, RANK_INDEX: 1} and not merge.failed


def test_a_gradient_handled_after_the_backward_is_a_partial_sum():
    """A tensor of a parameter's shape that differs between ranks after the backward (a gradient scaled
    before its all-reduce) is no share of the batch: never concatenated into something of another size."""
    div = "Tensor.div_.0.forward"

    def rank(r):
        return [_rank(r)[0], _rec(div, [_row(div + ".input.0", [0.1 * (r + 1), 0.3, 0.2], [3, 1], "input"),
                                        _row(div + ".input.1", [2], "[]", "input", "int")], after_backward=True)]
    _, handled = DataMerge()([iter(rank(0)), iter(rank(1))])
    assert [r.local for r in handled.rows] == [PARTIAL_SUM, PARTIAL_SUM]


def test_data_merge_stops_where_ranks_ran_different_calls():
    a, b = _rank(0), _rank(1)
    b[1] = _rec("Torch.matmul.0.forward", [])
    merge = DataMerge()
    out = list(merge([iter(a), iter(b)]))
    assert len(out) == len(a) and "different calls" in merge.failed
    assert out[1].rows[1].shape == [] and not out[1].rows[1].local  # past it, one rank's own record


def _judge():
    return Judge("NormRelativeErr", 1e-4, "statistics", "/t/dump.json", "/g/dump.json", layout_free=True)


def test_gradients_judged_up_to_the_data_parallel_scale():
    """The target's batch put together from 2 shares, each rank's loss scaled for an averaging all-reduce:
    its gradients are twice the one-rank run's. The first gradient settles it for the pair."""
    scale, judge = GradScale(2), _judge()
    name = "Module.decoder.layers.0.mlp.MLP.backward.0.input.0"
    # the loss's own arithmetic outside the model, where the scale enters: its seed (1) settles nothing
    seed = _row("Tensor.__mul__.0.backward.input.0", [1.0], [], "input", direction="backward")
    assert scale.row(judge, seed, seed, _rec("Tensor.__mul__.0.backward", [seed], "backward")).reason is Rule.AGREE
    assert scale.mode == ""
    t, g = _row(name, [2.0, -4.0], [2], "input", direction="backward"), _row(name, [1.0, -2.0], [2], "input")
    bwd = _rec("Module.decoder.layers.0.mlp.MLP.backward.0", [t], "backward")
    assert judge.row(t, g).reason is Rule.THRESHOLD
    assert scale.row(judge, t, g, bwd).reason is Rule.AGREE and scale.mode == "scaled"
    assert "2 times the golden's" in scale.note()
    # settled: a gradient off by another factor diverges
    off = _row(name, [3.0, -6.0], [2], "input", direction="backward")
    assert scale.row(judge, off, g, bwd).reason is Rule.THRESHOLD
    # the forward is never rescaled
    fwd = _rec("Module.decoder.layers.0.mlp.MLP.forward.0", [t])
    assert scale.row(judge, t, g, fwd).reason is Rule.THRESHOLD


def test_gradients_of_a_summing_trainer_are_judged_as_they_are():
    scale, judge = GradScale(2), _judge()
    name = "Module.decoder.layers.0.mlp.MLP.backward.0.input.0"
    t = _row(name, [1.0, -2.0], [2], "input", direction="backward")
    bwd = _rec("Module.decoder.layers.0.mlp.MLP.backward.0", [t], "backward")
    assert scale.row(judge, t, t, bwd).reason is Rule.AGREE and scale.mode == "as is" and not scale.note()
    doubled = _row(name, [2.0, -4.0], [2], "input", direction="backward")
    assert scale.row(judge, doubled, t, bwd).reason is Rule.THRESHOLD


def _dump(path, ids, weight):
    """A dump.json of one module call: its token ids and its weight."""
    rec = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.int64", "shape": [1, 2], "Max": max(ids),
                           "Min": min(ids), "Mean": None, "Norm": None, "requires_grad": False}],
           "input_kwargs": {},
           "parameters": {"weight": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "Max": weight,
                                     "Min": weight, "Mean": weight, "Norm": abs(weight), "requires_grad": True}},
           "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1, 2, 1], "Max": 1.0, "Min": 0.0,
                       "Mean": 0.5, "Norm": 1.0, "requires_grad": True}]}
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"task": "statistics", "level": "mix", "data": {EMB: rec}}))
    return str(path)


def _sides(root, ids_by_rank, weights):
    key = ("step_1", "actor_update", "step0")
    return [RankDump(key, f"rank{r}", _dump(root / f"rank{r}" / "dump.json", ids, w))
            for r, (ids, w) in enumerate(zip(ids_by_rank, weights))]


def test_layout_puts_data_parallel_replicas_together(tmp_path):
    target = _sides(tmp_path / "t", [[3, 5], [7, 2]], [1.0, 1.0])
    golden = _sides(tmp_path / "g", [[3, 5]], [1.0])
    t, g, findings = layout.apply(target, golden)
    (one,) = t
    assert one.members == ("rank0", "rank1") and one.replica == Replica(tuple(s.path for s in target),
                                                                         (Level("data", 2),))
    assert g == golden
    (said,) = [f.message for f in findings if f.rule == "compare-layout"]
    assert said.startswith("target: data-parallel size 2 from the dumps (ranks 0+1 run the same calls")


@pytest.mark.parametrize("ids,weights,why", [([[3, 5], [3, 5]], [1.0, 1.0], "some ranks start on the same input"),
                                             ([[3, 5], [7, 2]], [1.0, 2.0], "the ranks' parameters differ")])
def test_layout_never_guesses_data_parallelism(tmp_path, ids, weights, why):
    target = _sides(tmp_path / "t", ids, weights)
    golden = _sides(tmp_path / "g", [[3, 5]], [1.0])
    t, _, findings = layout.apply(target, golden)
    assert t == target  # rank against rank
    (warned,) = [f.message for f in findings if f.severity.name == "WARNING"]
    assert "could not be established" in warned and why in warned


def test_a_stage_missing_a_rank_is_incomplete_not_another_layout(tmp_path):
    """The target holds two data-parallel ranks in one stage and one in another: that stage lost a rank."""
    target = _sides(tmp_path / "t", [[3, 5], [7, 2]], [1.0, 1.0])
    lone = RankDump(("step_1", "actor_compute_log_prob", "step0"), "rank0", target[0].path)
    golden = _sides(tmp_path / "g", [[3, 5], [7, 2]], [1.0, 1.0])
    golden_lp = [RankDump(lone.key, f"rank{r}", s.path) for r, s in enumerate(golden)]
    t, g, _ = layout.apply(target + [lone], golden + golden_lp)
    assert t == target + [lone] and g == golden + golden_lp


def test_every_kind_is_one_class():
    assert list(KINDS) == ["tensor", "context", "expert", "data", "pipeline"]
    assert {k.name for k in KINDS.values() if k.batch} == {"expert", "data"}
    # what layout.group_sides groups a replica's ranks by, and where each sits in Megatron's rank order
    assert [k.name for k in KINDS.values() if k.within and k.combined] == ["tensor", "expert", "pipeline"]
    assert [k.name for k in KINDS.values() if k.outer] == ["pipeline"]
    assert [k.name for k in KINDS.values() if k.renumbers] == ["expert"]
    assert DATA.from_dumps(["/nonexistent/dump.json"]) == (1, "one rank")


def test_a_config_says_data_parallel_unless_context_parallel(tmp_path):
    """verl's engines always split the batch between data-parallel replicas; context-parallel ranks hold parts
    of each sequence instead, and are not put together (a warning says so)."""
    target = _sides(tmp_path / "t", [[3, 5], [7, 2]], [1.0, 1.0])
    golden = _sides(tmp_path / "g", [[3, 5]], [1.0])
    conf = tmp_path / "config.yaml"
    conf.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      tensor_model_parallel_size: 1\n")
    (one,), _, findings = layout.apply(target, golden, {"target": str(conf)})
    assert one.replica.levels == (Level("data", 2),)
    assert any(f"data-parallel size 2 from conf {conf}" in f.message for f in findings)
    conf.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      context_parallel_size: 2\n")
    t, _, findings = layout.apply(target, golden, {"target": str(conf)})
    assert t == target and any("context shards are not combined" in f.message for f in findings)
