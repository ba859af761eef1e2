"""The engine's pipeline units, each on its own (compare/pipeline/): pairing with an extra or a missing
op, the table of equivalent ops, combining a batch split's statistics, attribution (an error introduced
where the inputs agree, rounding that grows evenly), the layer index from a call stack, and where in a
tensor an error sits."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from verl_pdbg_conf.compare.dumpread import Row, rows_of
from verl_pdbg_conf.compare.pipeline import splits
from verl_pdbg_conf.compare.pipeline.attribution import Attributor
from verl_pdbg_conf.compare.pipeline.equivalents import EQUIVALENT_OPS, equivalent
from verl_pdbg_conf.compare.judge import Decision, Rule
from verl_pdbg_conf.compare.pipeline.locating import spread
from verl_pdbg_conf.compare.pipeline.pairing import Aligner, Structure, Unpaired, row_pairs
from verl_pdbg_conf.compare.records import Record
from verl_pdbg_conf.compare.pipeline.stacks import Stacks, layer_count


def row(name, state="output", shape=(2, 8), stats=(1.0, -1.0, 0.0, 2.0), dtype="torch.float32"):
    return Row(name, name, name.rsplit(f".{state}", 1)[0], state, "forward", dtype, list(shape), stats, "-1")


def rec(op, call, scope="Module.model.layers.0.self_attn.Qwen2Attention.forward.0", layer=0, order=0,
        shape=(2, 8)):
    name = f"{op}.{call}.forward"
    rows = [row(f"{name}.input.0", "input", shape), row(f"{name}.output.0", "output", shape)]
    return Record(name, name, op, "forward", rows, order, scope=scope, layer=layer)


def seq(ops, **kw):
    count: dict = {}
    out = []
    for i, op in enumerate(ops):
        count[op] = count.get(op, -1) + 1
        out.append(rec(op, count[op], order=i, **kw))
    return out


def test_an_extra_op_shifts_nothing_after_it():
    """Eager attention (matmul, add, softmax, matmul) against sdpa: every op after the gap still meets its
    own counterpart, though msprobe's counters (Torch.matmul.N, Tensor.__add__.N) have shifted."""
    attn, layer = "Module.model.layers.0.self_attn.Qwen2Attention.forward.0", "Module.model.layers.0.Qwen2DecoderLayer.forward.0"
    golden = [rec("Functional.linear", 0, attn), rec("Torch.matmul", 0, attn), rec("Tensor.__add__", 0, attn),
              rec("Functional.softmax", 0, attn), rec("Torch.matmul", 1, attn), rec("Tensor.__add__", 1, layer),
              rec("Functional.linear", 1, layer)]
    target = [rec("Functional.linear", 0, attn), rec("Functional.scaled_dot_product_attention", 0, attn),
              rec("Tensor.__add__", 0, layer), rec("Functional.linear", 1, layer)]
    got = [(t.name, g.name if g else None, [p.name for p in passed]) for t, g, passed in Aligner(golden).pairs(target)]
    assert got == [
        ("Functional.linear.0.forward", "Functional.linear.0.forward", []),
        ("Functional.scaled_dot_product_attention.0.forward", None, []),
        ("Tensor.__add__.0.forward", "Tensor.__add__.1.forward",
         ["Torch.matmul.0.forward", "Tensor.__add__.0.forward", "Functional.softmax.0.forward",
          "Torch.matmul.1.forward"]),
        ("Functional.linear.1.forward", "Functional.linear.1.forward", []),
    ]


def test_a_missing_op_and_a_shape_keep_pairs_apart():
    """One side runs an op fewer: the ops after it pair with their own; a call of the same op with another
    shape (another line of the same module) is not taken for it."""
    golden = [rec("Tensor.__mul__", 0, order=0), rec("Tensor.__mul__", 1, order=1, shape=(2, 4)),
              rec("Functional.silu", 0, order=2)]
    target = [rec("Tensor.__mul__", 0, order=0, shape=(2, 4)), rec("Functional.silu", 0, order=1)]
    got = [(t.name, g.name if g else None) for t, g, _ in Aligner(golden).pairs(target) if t]
    assert got == [("Tensor.__mul__.0.forward", "Tensor.__mul__.1.forward"),
                   ("Functional.silu.0.forward", "Functional.silu.0.forward")]


def test_other_scopes_and_layers_never_pair():
    golden = [rec("Functional.linear", 0, layer=0), rec("Functional.linear", 1, layer=1,
                                                        scope="Module.model.layers.1.mlp.Qwen2MLP.forward.0")]
    target = [rec("Functional.linear", 0, layer=1, scope="Module.model.layers.1.mlp.Qwen2MLP.forward.0")]
    (t, g, passed), *rest = list(Aligner(golden).pairs(target))
    assert g.name == "Functional.linear.1.forward" and [p.name for p in passed] == ["Functional.linear.0.forward"]


def test_rows_pair_by_their_place_in_the_record():
    t, g = rec("Tensor.__add__", 3), rec("Tensor.__add__", 1)
    assert [(a.name, b.name) for a, b in row_pairs(t, g)] == [
        ("Tensor.__add__.3.forward.input.0", "Tensor.__add__.1.forward.input.0"),
        ("Tensor.__add__.3.forward.output.0", "Tensor.__add__.1.forward.output.0")]
    assert [b for _a, b in row_pairs(t, None)] == [None, None]


@pytest.mark.parametrize("fused,parts,kind", [
    (("scaled_dot_product_attention",), ("matmul", "__mul__", "__add__", "softmax", "dropout", "matmul"), "attention"),
    (("npu_fusion_attention",), ("matmul", "softmax", "matmul"), "attention"),
    (("rms_norm",), ("pow", "mean", "__add__", "rsqrt", "__mul__", "__mul__"), "rms_norm"),
    (("npu_rms_norm",), ("pow", "mean", "add", "rsqrt", "mul"), "rms_norm"),
    (("npu_swiglu",), ("silu", "__mul__"), "swiglu"),
    (("npu_rotary_mul",), ("__mul__", "__getitem__", "__neg__", "cat", "__mul__", "__add__"), "rotary"),
])
def test_equivalent_ops(fused, parts, kind):
    assert equivalent(fused, parts) == kind and equivalent(parts, fused) == kind


def test_unrelated_ops_are_not_equivalent():
    assert equivalent(("scaled_dot_product_attention",), ("linear",)) is None
    assert equivalent(("rms_norm",), ("softmax",)) is None
    assert equivalent(("matmul",), ("softmax",)) is None  # no fused op on either side
    assert all(fused and parts and not (fused & parts) for fused, parts in EQUIVALENT_OPS.values())


def test_structure_difference_said_once_per_module_kind():
    s = Structure()
    for layer in range(6):
        gap = Unpaired()
        scope = f"Module.model.layers.{layer}.self_attn.Qwen2Attention.forward.0"
        gap.target = [rec("Functional.scaled_dot_product_attention", layer, scope=scope, layer=layer)]
        gap.golden = [rec(op, 2 * layer + i % 2, scope=scope, layer=layer)
                      for i, op in enumerate(("Torch.matmul", "Functional.softmax", "Torch.matmul"))]
        assert gap.boundary() is not None  # compared at its output
        s.add(gap)
    (msg,) = s.messages()
    assert msg.startswith("model.layers.*.self_attn: target runs scaled_dot_product_attention where golden runs "
                          "matmul, softmax, matmul; 6 layers")


def test_split_statistics_combine_exactly():
    a = np.arange(16, dtype=np.float64).reshape(2, 8) - 5
    parts = [a[:1], a[1:]]
    rows = [row("x.output.0", shape=p.shape, stats=(float(p.max()), float(p.min()), float(p.mean()),
                                                        float(np.linalg.norm(p)))) for p in parts]
    c = splits.combine_rows(rows)
    assert c.shape == [2, 8]
    assert c.stats == pytest.approx((a.max(), a.min(), a.mean(), np.linalg.norm(a)))
    # unequal parts: Mean weighted by element counts
    b = np.arange(24, dtype=np.float64).reshape(3, 8)
    rows = [row("x.output.0", shape=(1, 8), stats=(0, 0, float(b[:1].mean()), 0.0)),
            row("x.output.0", shape=(2, 8), stats=(0, 0, float(b[1:].mean()), 0.0))]
    assert splits.combine_rows(rows).stats[2] == pytest.approx(b.mean())
    # a weight, the same in both calls, is kept once; a loss reduced over the batch cannot combine
    w = row("w.parameters.0", shape=(64, 8))
    assert splits.combine_rows([w, w]) is w
    loss = [row("l.output.0", shape=(), stats=(s, s, s, s)) for s in (1.0, 2.0)]
    assert splits.combine_rows(loss) is None


def test_split_detected_from_the_opening_call():
    t = Record("Functional.embedding.0.forward", "", "Functional.embedding", "forward",
               [row("e.input.0", "input", (1, 8), dtype="torch.int64")])
    g = Record("Functional.embedding.0.forward", "", "Functional.embedding", "forward",
               [row("e.input.0", "input", (2, 8), dtype="torch.int64")])
    s = splits.detect(t, g)
    assert (s.side, s.parts, s.batch) == ("target", 2, (1, 2))
    assert splits.detect(t, t) is None


def judged(values: dict) -> list:
    """[(row, golden row, Decision)] of one record: state -> value; threshold 1e-4."""
    out = []
    for state, v in values.items():
        r = row(f"op.0.forward.{state}.0", state)
        out.append((r, r, Decision(Rule.THRESHOLD if v > 1e-4 else Rule.AGREE, v)))
    return out


def test_attribution_names_the_node_whose_inputs_agree():
    a = Attributor()
    assert a.first_in(judged({"input": 1e-7, "output": 1e-7})) is None
    assert a.first_in(judged({"input": 1e-7, "output": 0.01})) == 1  # output off, inputs agree: introduced
    b = Attributor()
    b.first_in(judged({"input": 1e-7, "output": 1e-7}))
    # a weight that differs is a source of its own
    assert b.first_in(judged({"input": 1e-7, "parameters": 0.01, "output": 0.01})) == 1


def test_attribution_lets_rounding_grow_and_finds_a_jump():
    """bf16 against fp32: the error grows evenly past the threshold, call after call; a x1.05 weight jumps."""
    a = Attributor()
    err = 1e-5  # the first tensors (weights rounded to bf16) well below the threshold, growing from there
    for _ in range(40):
        assert a.first_in(judged({"input": err, "output": err * 1.15})) is None
        err *= 1.15
    assert a.absorbed > 0 and "accumulated rounding" in a.note(0.0078)
    assert a.first_in(judged({"input": err, "output": err * 1.2})) is None
    assert a.first_in(judged({"input": err * 1.2, "parameters": 0.05, "output": 0.06})) == 1
    # an output far beyond what its inputs carried
    c = Attributor()
    c.first_in(judged({"input": 0.004, "output": 0.005}))
    assert c.first_in(judged({"input": 0.005, "output": 0.05})) == 1



def _sub(errors_and_norms, op="Tensor.__sub__"):
    """[(row, golden row, Decision)] of `a - b`: state -> (relative error, golden Norm) per row."""
    out = []
    for i, (state, (v, norm)) in enumerate(errors_and_norms):
        r = row(f"{op}.7.forward.{state}.{i}", state, stats=(1.0, -1.0, 0.0, norm))
        out.append((r, r, Decision(Rule.THRESHOLD if v > 1e-4 else Rule.AGREE, v)))
    return out


def test_attribution_a_difference_magnifies_its_inputs_rounding():
    """`log_prob - old_log_prob` of two log-probs that agree to 1e-7 (Norm 11) and differ by 4e-5: the
    output's relative error is 1%, its absolute error (1% of 4e-5) below what its inputs carried (1e-7 of
    11 each): cancellation, not an error of the subtraction; the note says how it was judged."""
    a = Attributor()
    cancel = [("input", (1e-7, 11.0)), ("input", (1e-7, 11.0)), ("output", (0.01, 4e-5))]
    assert a.first_in(_sub(cancel)) is None
    assert a.cancelled == 1 and "cancellation" in a.note(1e-4)
    # the same difference with agreeing inputs and a wrong output: introduced there
    b = Attributor()
    wrong = [("input", (0.0, 11.0)), ("input", (0.0, 11.0)), ("output", (0.01, 4e-5))]
    assert b.first_in(_sub(wrong)) == 2
    # far beyond its inputs' absolute error too: introduced
    c = Attributor()
    big = [("input", (1e-7, 11.0)), ("input", (1e-7, 11.0)), ("output", (0.01, 5.0))]
    assert c.first_in(_sub(big)) == 2
    # only sums and differences: a matmul's output is judged by relative error alone
    d = Attributor()
    assert d.first_in(_sub(cancel, op="Functional.linear")) == 2


def test_attribution_a_difference_whose_input_moved_without_its_norm():
    """Measured: verl's real actor, eager against sdpa (fp32), each rank's rows dealt by balance_batch
    (bench/real_workers.py): `log_prob - old_log_prob` ([2, 5]) whose old log-probs agree in Norm to every digit
    msprobe writes while their Mean is off by 2.4e-7; its output's Norm differs by 0.55%, 1.8e-7 in its own
    units. The input carried at least sqrt(10) x 2.4e-7: cancellation, not the subtraction's error."""
    def rows(old_mean):
        stats = {"input.0": ((0.0, -4.342341423034668, -3.7838101387023926, 12.614532470703125),) * 2,
                 "input.1": ((0.0, -4.342348575592041, -3.783808946609497, 12.614530563354492),
                             (0.0, -4.342348575592041, old_mean, 12.614530563354492)),
                 "output.0": ((1.049041748046875e-05, -1.7642974853515625e-05, -5.722046125811175e-07,
                               3.2206811738433316e-05),
                              (1.049041748046875e-05, -1.71661376953125e-05, -4.76837158203125e-07,
                               3.202983134542592e-05))}
        out = []
        for where, (t, g) in stats.items():
            state = where.split(".")[0]
            name = f"Tensor.__sub__.30.forward.{where}"
            value = abs(abs(t[3]) - abs(g[3])) / abs(g[3])
            out.append((row(name, state, (2, 5), t), row(name, state, (2, 5), g),
                        Decision(Rule.THRESHOLD if value > 1e-4 else Rule.AGREE, value)))
        return out

    a = Attributor()
    assert a.first_in(rows(-3.783809185028076)) is None and a.cancelled == 1
    # the same output from inputs that agree in every statistic: introduced by the subtraction
    assert Attributor().first_in(rows(-3.783808946609497)) == 2


def _reduction(mean_t, mean_g, out_t, out_g, op="Tensor.sum"):
    """[(row, golden row, Decision)] of a sum of a [2, 5] tensor to one value, from the dumped statistics."""
    name = f"{op}.34.forward"
    rows = []
    for state, shape, t, g in (("input", (2, 5), (7e-6, -3e-5, mean_t, 3.58e-5), (7e-6, -3e-5, mean_g, 3.58e-5)),
                               ("output", (), (out_t, out_t, out_t, out_t), (out_g, out_g, out_g, out_g))):
        r, gr = row(f"{name}.{state}.0", state, shape, t), row(f"{name}.{state}.0", state, shape, g)
        value = abs(abs(t[3]) - abs(g[3])) / abs(g[3])
        rows.append((r, gr, Decision(Rule.THRESHOLD if value > 1e-4 else Rule.AGREE, value)))
    return rows


def test_attribution_a_sum_to_one_value_carries_its_inputs_mean_error():
    """verl's masked_sum of `log_prob - old_log_prob` (measured: eager against sdpa, fp32): the input's Norm
    agrees to 9e-5 but its Mean is off by 4.8e-8, and the sum of its 10 values (-4.1e-5) is off by exactly
    10 times that, 1.15%: the reduction adds nothing of its own."""
    a = Attributor()
    assert a.first_in(_reduction(-4.100799742445815e-06, -4.148483185417717e-06,
                                 -4.100799560546875e-05, -4.1484832763671875e-05)) is None
    assert a.cancelled == 1
    # the same sum with an input that agrees: introduced there
    b = Attributor()
    assert b.first_in(_reduction(-4.148483185417717e-06, -4.148483185417717e-06,
                                 -4.100799560546875e-05, -4.1484832763671875e-05)) == 1
    # a mean is its input's Mean: the count does not multiply
    c = Attributor()
    assert c.first_in(_reduction(-4.100799742445815e-06, -4.148483185417717e-06, -4.100799560546875e-05,
                                 -4.1484832763671875e-05, op="Tensor.mean")) == 1
    d = Attributor()
    assert d.first_in(_reduction(-4.100799742445815e-06, -4.148483185417717e-06, -4.100799742445815e-06,
                                 -4.148483185417717e-06, op="Tensor.mean")) is None


def stack_entry(names, frames):
    return [names, frames]


def qwen2_stack(tmp_path, swapped_layer=None):
    """stack.json as msprobe writes it for a transformers decoder-layer loop: one entry per distinct stack,
    its calls in order; one line (q_proj), one line run twice per layer (rotary mul), an op outside the
    layers (lm_head), and optionally one layer's attention run from another line (a swapped kernel)."""
    outer = ["File /x/transformers/models/qwen2/modeling_qwen2.py, line 399, in forward, \n hidden_states = "
             "decoder_layer(", "File /x/train.py, line 48, in <module>, \n m(ids)"]
    call = ["File /x/torch/nn/modules/module.py, line 1789, in _call_impl, \n return forward_call(*args, **kwargs)"]
    layer = lambda line: [f"File /x/transformers/models/qwen2/modeling_qwen2.py, line {line}, in forward, \n x"]  # noqa
    attn = [n for n in range(6) if n != swapped_layer]
    doc = {
        "0": stack_entry(["Functional.embedding.0.forward", "Functional.embedding.1.forward"],
                         ["File /x/torch/nn/modules/sparse.py, line 190, in forward", *call,
                          "File /x/transformers/models/qwen2/modeling_qwen2.py, line 380, in forward, \n e",
                          outer[1]]),
        "1": stack_entry([f"Functional.linear.{i}.forward" for i in range(12)],
                         ["File /x/torch/nn/modules/linear.py, line 134, in forward", *call, *layer(217), *call,
                          *layer(293), *call, *outer]),
        "2": stack_entry([f"Tensor.__mul__.{i}.forward" for i in range(24)],
                         [*layer(150), *layer(220), *call, *layer(293), *call, *outer]),
        "3": stack_entry([f"Torch.matmul.{i}.forward" for i in range(2 * len(attn))],
                         [*layer(240), *call, *layer(293), *call, *outer]),
        "4": stack_entry(["Functional.linear.12.forward", "Functional.linear.13.forward"],
                         ["File /x/torch/nn/modules/linear.py, line 134, in forward", *call,
                          "File /x/transformers/models/qwen2/modeling_qwen2.py, line 470, in forward", outer[1]]),
    }
    if swapped_layer is not None:
        doc["5"] = stack_entry(["Functional.scaled_dot_product_attention.0.forward",
                                "Functional.scaled_dot_product_attention.1.forward"],
                               ["File /x/transformers/integrations/sdpa_attention.py, line 92, in sdpa", *call,
                                *layer(293), *call, *outer])
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(doc))
    return Stacks(str(path))


def place(stacks, name, passes=0, direction="forward", after_backward=False):
    op = name.rsplit(".", 2)[0]
    r = Record(name, name, op, direction, [], passes=passes, after_backward=after_backward)
    stacks.place(r, "Functional.embedding")
    return r


def test_layer_index_from_the_call_stack(tmp_path):
    s = qwen2_stack(tmp_path)
    # two forward passes (the embedding twice): the second pass starts over at layer 0
    assert place(s, "Functional.embedding.0.forward").layer is None and s.n_layers == 6
    assert [place(s, f"Functional.linear.{i}.forward").layer for i in (0, 3, 5, 6, 11)] == [0, 3, 5, 0, 5]
    assert [place(s, f"Tensor.__mul__.{i}.forward").layer for i in (0, 1, 2, 7, 12)] == [0, 0, 1, 3, 0]
    assert place(s, "Functional.linear.12.forward").layer is None  # lm_head: no layer
    assert place(s, "Functional.linear.3.backward", direction="backward").layer == 3  # a backward call: its forward's layer
    assert "modeling_qwen2.py:217 in forward" == place(s, "Functional.linear.3.forward").site


def test_layer_of_a_kernel_swapped_in_one_layer(tmp_path):
    """Layer 2 runs sdpa from its own line: its call takes the layer of the call before it, and the
    attention line run in the 5 other layers cannot say its layer by itself (5 is not 6)."""
    s = qwen2_stack(tmp_path, swapped_layer=2)
    assert place(s, "Functional.linear.2.forward").layer == 2
    assert place(s, "Functional.scaled_dot_product_attention.0.forward").layer == 2
    assert place(s, "Functional.linear.3.forward").layer == 3
    assert place(s, "Torch.matmul.4.forward").layer == 3


def test_layer_index_under_a_trainers_micro_batches(tmp_path):
    """verl's engine: one op of its own per stage call first (loss_mask.sum), then per micro-batch a line of its
    own and the model. Passes are the model's calls (its embedding), not the stage's first op: 2 layers, not 3."""
    call = ["File /x/torch/nn/modules/module.py, line 1789, in _call_impl, \n return forward_call(*args, **kwargs)"]
    verl = ["File /x/verl/workers/engine/fsdp/transformer_impl.py, line 1553, in forward_step, \n m"]
    outer = ["File /x/transformers/models/qwen2/modeling_qwen2.py, line 399, in forward, \n hidden_states = "
             "decoder_layer(", *call, *verl]
    doc = {
        "0": stack_entry(["Tensor.sum.0.forward"], ["File /x/verl/workers/engine/fsdp/transformer_impl.py, line 730"]),
        "1": stack_entry([f"Tensor.diff.{i}.forward" for i in range(3)],
                         ["File /x/verl/workers/engine/fsdp/transformer_impl.py, line 1280, in prepare_model_inputs"]),
        "2": stack_entry([f"Functional.embedding.{i}.forward" for i in range(3)],
                         ["File /x/torch/nn/modules/sparse.py, line 190, in forward", *call,
                          "File /x/transformers/models/qwen2/modeling_qwen2.py, line 380, in forward, \n e", *verl]),
        "3": stack_entry([f"Functional.linear.{i}.forward" for i in range(6)],
                         ["File /x/torch/nn/modules/linear.py, line 134, in forward", *call,
                          "File /x/transformers/models/qwen2/modeling_qwen2.py, line 217, in forward, \n x", *outer]),
        "4": stack_entry([f"Tensor.pow.{i}.forward" for i in range(12)],
                         ["File /x/transformers/models/qwen2/modeling_qwen2.py, line 261, in forward, \n x", *outer]),
    }
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(doc))
    s = Stacks(str(path))
    r = Record("Tensor.sum.0.forward", "Tensor.sum.0.forward", "Tensor.sum", "forward", [])
    s.place(r, "Tensor.sum")  # the dump's first record: verl's, once per stage call
    assert s.n_layers == 2 and r.layer is None
    assert [place(s, f"Functional.linear.{i}.forward").layer for i in range(6)] == [0, 1] * 3
    assert [place(s, f"Tensor.pow.{i}.forward").layer for i in (0, 1, 2, 3, 4)] == [0, 0, 1, 1, 0]


def test_passes_of_a_model_called_from_two_lines(tmp_path):
    """model(a); model(b): two stack entries of one embedding line are two passes, a position embedding's
    line (called after the token embedding) is not one."""
    call = ["File /x/torch/nn/modules/module.py, line 1789, in _call_impl, \n return forward_call(*args, **kwargs)"]
    model = lambda line: f"File /x/transformers/models/gpt2/modeling_gpt2.py, line {line}, in forward, \n x"  # noqa
    script = lambda line: f"File /x/train.py, line {line}, in <module>, \n m(ids)"  # noqa
    outer = [model(399), *call]
    doc = {"0": stack_entry(["Functional.embedding.0.forward"], [*call, model(380), script(48)]),
           "1": stack_entry(["Functional.embedding.1.forward", "Functional.embedding.3.forward"],
                            [*call, model(381), script(48)]),
           "2": stack_entry(["Functional.embedding.2.forward"], [*call, model(380), script(49)]),
           "3": stack_entry([f"Functional.linear.{i}.forward" for i in range(6)], [*call, model(217), *outer]),
           "4": stack_entry([f"Tensor.__mul__.{i}.forward" for i in range(6)], [model(150), *outer])}
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(doc))
    s = Stacks(str(path))
    assert [place(s, f"Functional.linear.{i}.forward").layer for i in range(6)] == [0, 1, 2] * 2 and s.n_layers == 3


def test_layer_count_prefers_what_most_lines_agree_on():
    assert layer_count([6, 6, 12, 6, 1, 1]) == 6
    assert layer_count([1, 1]) is None
    assert layer_count([24, 24, 24]) == 24
    assert layer_count([8, 8, 16, 19]) == 8  # an optimizer's line run once per parameter (19) is one line
    assert layer_count([6, 6, 6, 2, 12]) == 6  # not a divisor of everything (2): the count the lines share


def test_where_in_the_tensor(tmp_path):
    class J:
        def arrays_of(self, t, g):
            return self.a, self.b

    j = J()
    j.b = np.ones((2, 8, 4))
    j.a = j.b.copy()
    j.a[1, 5, :] *= 1.5
    s = spread(j, object(), object(), 1e-4)
    assert (s["beyond"], s["elements"]) == (4, 64) and s["share"] == pytest.approx(4 / 64)
    assert s["rows"] == [{"row": 1, "beyond": 4, "of": 32}]
    assert s["positions"][0] == {"row": 1, "position": 5, "beyond": 4}
    assert math.isclose(s["max_relative"], 0.5)


def test_a_calling_line_known_on_one_side_only_still_pairs_by_name():
    """One run's stack.json missing or broken: its records have no calling line; the same names still pair,
    while the same name at two different lines (counters shifted across implementations) does not."""
    g = rec("Functional.relu", 0, scope="", layer=None)
    t = rec("Functional.relu", 0, scope="", layer=None)
    t.site = "a.py:1 in f"
    assert Aligner([g]).match(t)[0] is g
    g2 = rec("Functional.relu", 0, scope="", layer=None)
    g2.site = "b.py:9 in h"
    assert Aligner([g2]).match(t)[0] is None


def test_one_judge_for_rows_and_token_points():
    """The rollout's token walk decides each point by the rules the run compare's rows are held to."""
    from verl_pdbg_conf.compare import judge as J
    from verl_pdbg_conf.compare.metrics import EPS

    assert J.point(8, 6, 0.5, 1e-4).reason == J.Rule.APART  # not the same tensor's row: not compared
    assert J.point(8, 8, float("nan"), 1e-4).reason == J.Rule.NAN
    assert J.point(8, 8, 2e-4, 1e-4).reason == J.Rule.THRESHOLD
    assert J.point(8, 8, 1e-4, 1e-4).reason == J.Rule.AGREE and not J.Rule.AGREE
    # the dtype-aware limit: rounding steps of the lowest precision, where above the threshold
    assert J.dtype_limit(1e-4, ("torch.bfloat16", "torch.float32"), 2) == 2 * EPS["torch.bfloat16"]
    assert J.dtype_limit(1e-1, ("torch.bfloat16",)) == 1e-1
    judge = J.Judge("NormRelativeErr", 1e-4, "statistics", "t/dump.json", "g/dump.json")
    row = rows_of("Functional.linear.0.forward", {"output": [{"type": "torch.Tensor", "dtype": "torch.float32",
                                                              "shape": [2, 4], "Max": 1.0, "Min": -1.0,
                                                              "Mean": 0.1, "Norm": 2.0}]})[0]
    flat = rows_of("Functional.linear.0.forward", {"output": [{"type": "torch.Tensor", "dtype": "torch.float32",
                                                               "shape": [3], "Max": 1.0, "Min": -1.0,
                                                               "Mean": 0.1, "Norm": 2.0}]})[0]
    assert judge.row(row, flat).reason == J.Rule.APART and judge.row(row, None).reason == J.Rule.UNMATCHED
