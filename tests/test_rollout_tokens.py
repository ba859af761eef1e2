"""The rollout compare's token alignment on token records alone (the runtime's tokens.json): requests over
engine steps that mix one request's decode with another's prefill, against the trainer's padded or packed
batch; what is on one side only."""

from __future__ import annotations

from verl_pdbg_conf.compare.rollout import tokens as K


def _step(k, reqs, sampled):
    rows, start = [], 0
    for rid, positions, ids in reqs:
        rows.append({"request": rid, "rows": [start, start + len(ids)], "positions": positions, "token_ids": ids})
        start += len(ids)
    return k, {"requests": rows, "sampled": {r: {"token_ids": [t], "logprob": -1.0} for r, t in sampled.items()}}


def test_align_mixed_prefill_and_decode_steps_with_padded_and_packed_trainer():
    # engine step 1 holds request a's decode and request b's whole prefill, as vLLM schedules them
    steps = [_step(0, [("a", [0, 1, 2], [5, 6, 7])], {"a": 8}),
             _step(1, [("a", [3], [8]), ("b", [0, 1], [5, 9])], {"a": 4, "b": 2}),
             _step(2, [("b", [2], [2])], {"b": 3})]
    reqs, problems = K.rollout_requests(steps)
    assert not problems and reqs["a"].sequence() == [5, 6, 7, 8, 4] and reqs["b"].sequence() == [5, 9, 2, 3]
    assert reqs["b"].rows == {0: (1, 1), 1: (1, 2), 2: (2, 0)}
    assert reqs["a"].sampled[4]["logits_row"] == 0 and reqs["b"].sampled[2]["logits_row"] == 1
    padded = {"input_ids": [[0, 5, 9, 2, 3, 0], [5, 6, 7, 8, 4, 0]],
              "attention_mask": [[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0]]}
    packed = {"input_ids": [[5, 6, 7, 8, 4, 5, 9, 2, 3]], "position_ids": [[0, 1, 2, 3, 4, 0, 1, 2, 3]]}
    for call, b_at in ((padded, (0, 0, 1)), (packed, (0, 0, 5))):
        al = K.align(reqs, K.trainer_sequences([call]))
        assert not al.rollout_only and not al.trainer_only
        pairs = {r.id: s for r, s in al.pairs}
        assert pairs["b"].at[0] == b_at and pairs["b"].tokens == [5, 9, 2, 3]


def test_align_says_what_is_on_one_side_only():
    steps = [_step(0, [("a", [0, 1], [5, 6]), ("b", [0, 1], [7, 7])], {"a": 1, "b": 2})]
    reqs, _ = K.rollout_requests(steps)
    al = K.align(reqs, K.trainer_sequences([{"input_ids": [[5, 6, 1], [9, 9, 9]]}]))
    assert [r.id for r in al.rollout_only] == ["b"] and [s.tokens for s in al.trainer_only] == [[9, 9, 9]]
    # two samples of one prompt with the same response pair in order, not twice with one sequence
    steps = [_step(0, [("a", [0], [5]), ("b", [0], [5])], {"a": 6, "b": 6})]
    reqs, _ = K.rollout_requests(steps)
    al = K.align(reqs, K.trainer_sequences([{"input_ids": [[5, 6], [5, 6]]}]))
    assert len(al.pairs) == 2 and {s.at[0][1] for _, s in al.pairs} == {0, 1}
