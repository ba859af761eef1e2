"""ignores.py on its own: the pattern syntax, the caller qualifier, stack.json's innermost frame."""

from __future__ import annotations

import pytest

from verl_pdbg_conf.compare.ignores import DEFAULT_IGNORES, innermost_frames, match_ignore, parse
from verl_pdbg_conf.compare.options import CompareOptions
from verl_pdbg_conf.compare.modes import UsageError

SITE = "/venv/lib/python3.11/site-packages"
COPY_IN = f"{SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:270 in all_gather_copy_in_cuda"
# msprobe's stack.json: {index: [[call names], [frames, innermost first]]}
STACK = {
    "0": [["Tensor.narrow.0.forward", "Tensor.narrow.5.forward"],
          [f"File {SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, line 270, in "
           "all_gather_copy_in_cuda, \n all_gather_input = all_gather_output.narrow(",
           f"File {SITE}/torch/_ops.py, line 1279, in __call__, \n return self._op(*args, **kwargs)"]],
    "1": [["Tensor.narrow.1.forward"], ["File /home/me/model.py, line 12, in forward, \n x = x.narrow(0, 0, 2)"]],
    "2": [["Torch.narrow.0.forward"], [f"File {SITE}/torch/nested/_internal/ops.py, line 1183, in <listcomp>, \n"]],
    "bad": "not a list",
}


def test_innermost_frame_of_each_call():
    frames = innermost_frames(STACK)
    assert frames["Tensor.narrow.0.forward"] == frames["Tensor.narrow.5.forward"] == COPY_IN
    assert frames["Tensor.narrow.1.forward"] == "/home/me/model.py:12 in forward"
    assert innermost_frames(None) == {} and innermost_frames({"x": [["a"], []]}) == {}


def test_default_matches_the_copy_in_only():
    frames = innermost_frames(STACK)
    for call in ("Tensor.narrow.0.forward", "Tensor.narrow.5.forward"):
        for row in (call, f"{call}.input.0", f"{call}.output.0"):
            assert match_ignore(row, DEFAULT_IGNORES, frames[call]) == DEFAULT_IGNORES[0][0]
    # the model's own narrow, torch's nested narrow, and any caller unknown: kept
    assert match_ignore("Tensor.narrow.1.forward.output.0", DEFAULT_IGNORES, frames["Tensor.narrow.1.forward"]) is None
    assert match_ignore("Torch.narrow.0.forward.output.0", DEFAULT_IGNORES, frames["Torch.narrow.0.forward"]) is None
    assert match_ignore("Tensor.narrow.0.forward.output.0", DEFAULT_IGNORES) is None
    assert match_ignore("Tensor.narrow.0.backward.output.0", DEFAULT_IGNORES, COPY_IN) is None


def test_user_patterns():
    assert match_ignore("Tensor.narrow.1.forward.output.0", ["Functional.*", "Tensor.narrow.*"]) == "Tensor.narrow.*"
    assert match_ignore("Tensor.narrow.1.forward.output.0", ["tensor.narrow.*"]) is None  # case-sensitive
    assert match_ignore("Tensor.narrow.1.forward.output.0", ["Tensor.narrow"]) is None  # the whole name
    assert match_ignore("Torch.rsqrt.6.forward.output.0", ["Torch.rsqrt.?.forward.*"]) == "Torch.rsqrt.?.forward.*"
    assert match_ignore("Tensor.narrow.1.forward.input.0", ["Tensor.narrow.*@*/model.py:*"],
                        "/home/me/model.py:12 in forward") == "Tensor.narrow.*@*/model.py:*"
    assert parse("A.*@B").caller == "B" and parse("A.*").caller is None


def test_patterns_in_force():
    assert CompareOptions().patterns == tuple(p for p, _ in DEFAULT_IGNORES)
    assert CompareOptions(ignores=["X.*", "X.*"], default_ignores=False).patterns == ("X.*",)
    for bad in ("", "@caller", " "):
        with pytest.raises(UsageError, match="record name pattern"):
            CompareOptions(ignores=[bad])


def test_ignorer_reads_each_sides_callers_when_needed(tmp_path):
    import json

    from verl_pdbg_conf.compare.ignores import Ignorer

    sides = []
    whole = {k: v for k, v in STACK.items() if k != "bad"}  # a stack.json of msprobe's shape throughout
    for name, stack in (("t", whole), ("g", {"0": [["Tensor.narrow.7.forward"], STACK["0"][1]]})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stack.json").write_text(json.dumps(stack))
        sides.append(str(tmp_path / name / "dump.json"))
    ig = Ignorer(DEFAULT_IGNORES + (("Functional.*", ""),), *sides)
    assert ig.match("Functional.linear.0.forward.input.0", "Functional.linear.0.forward") == "Functional.*"
    assert ig._frames is None  # no RECORD@CALLER pattern asked yet: stack.json not read
    default = DEFAULT_IGNORES[0][0]
    assert ig.match("Tensor.narrow.0.forward.output.0", "Tensor.narrow.0.forward") == default
    assert ig.match("Tensor.narrow.7.forward.input.0", "Tensor.narrow.7.forward") == default  # the golden's caller
    assert ig.match("Tensor.narrow.1.forward.output.0", "Tensor.narrow.1.forward") is None  # the model's own
    assert {p: n for p, n in ig.counts.items() if n} == {default: 2, "Functional.*": 1}
    assert Ignorer(DEFAULT_IGNORES, str(tmp_path / "none" / "dump.json")).match(
        "Tensor.narrow.0.forward.output.0", "Tensor.narrow.0.forward") is None  # no stack.json: kept
    (tmp_path / "t" / "stack.json").write_text(json.dumps(STACK))  # an entry not of its shape: none of it is used
    assert Ignorer(DEFAULT_IGNORES, sides[0]).match("Tensor.narrow.0.forward.output.0", "Tensor.narrow.0.forward") \
        is None
