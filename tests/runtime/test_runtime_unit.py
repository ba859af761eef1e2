"""The runtime's pure parts, in process: model and step resolution, config hand-over, the
non-profiled path, install() without verl. Nothing here imports torch or msprobe."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types

import pytest

from runtime_helpers import REPO, config
from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler, patch
from verl_pdbg_conf.runtime.model import resolve_model, step_from_call, step_from_owner
from verl_pdbg_conf.runtime.profiler import _selected_stages, tool_config_dict
from verl_pdbg_conf.verl_facts.stages import STAGES


class Module:
    def forward(self, x):
        return x


def ns(**kw):
    return types.SimpleNamespace(**kw)


def test_resolve_engine_worker_layouts():
    actor, ref, critic = Module(), Module(), Module()
    worker = ns(actor=ns(engine=ns(module=actor)), ref=ns(engine=ns(module=ref)))
    assert resolve_model(worker, STAGES["actor_update"].models) == (actor, "actor.engine.module")
    assert resolve_model(worker, STAGES["ref_compute_log_prob"].models) == (ref, "ref.engine.module")
    # the critic's TrainingWorker holds its engine directly
    assert resolve_model(ns(engine=ns(module=critic)), STAGES["critic_update"].models) == (critic, "engine.module")


def test_resolve_legacy_and_megatron_chunks():
    legacy = Module()
    assert resolve_model(ns(actor_module_fsdp=legacy), STAGES["actor_update"].models)[0] is legacy
    c1, c2 = Module(), Module()
    chunks = ns(actor=ns(engine=ns(module=[c1, "not a module", c2])))
    assert resolve_model(chunks, STAGES["actor_update"].models) == ([c1, c2], "actor.engine.module")
    assert resolve_model(ns(actor=ns(engine=ns(module=(c1,)))), STAGES["actor_update"].models)[0] is c1


def test_model_not_resolved():
    assert resolve_model(ns(actor=ns(engine=ns(module=object()))), STAGES["actor_update"].models) == (None, None)
    assert resolve_model(None, STAGES["actor_update"].models) == (None, None)


def test_step_sources():
    class NonTensorData:  # tensordict's wrapper, as TensorDict.get returns it
        def __init__(self, data):
            self.data = data

    assert step_from_call((ns(meta_info={"global_steps": 7}),), {}) == 7
    assert step_from_call((), {"data": {"global_steps": NonTensorData(8)}}) == 8
    assert step_from_call(({"global_steps": True},), {}) is None
    assert step_from_call((ns(meta_info={}),), {}) is None
    assert step_from_owner(ns(global_step=4)) == 4
    assert step_from_owner(ns(_global_step="x")) is None


def test_tool_config_hand_over():
    @dataclasses.dataclass
    class PrecisionDebuggerToolConfig:  # verl's dataclass fields
        name: str = "precision_debugger"
        config_path: str | None = "c.json"
        steps: list | None = None
        stages: list | None = None
        strict: bool = False

    assert tool_config_dict(PrecisionDebuggerToolConfig()) == {"config_path": "c.json", "stages": None, "strict": False}
    assert tool_config_dict(None) == {}
    from omegaconf import OmegaConf

    node = OmegaConf.create({"config_path": "${x}", "x": "a.json", "stages": ["actor_update"], "_target_": "t"})
    assert tool_config_dict(node) == {"config_path": "a.json", "stages": ["actor_update"]}


def test_selected_stages():
    assert _selected_stages(None) is None
    assert _selected_stages([]) == frozenset()
    # rollout_generate is kept: it is collected inside vLLM (runtime/rollout.py), never on verl's annotation
    assert _selected_stages(["actor_update", "train_batch", "rollout_generate", "bogus"]) == {
        "actor_update", "critic_update", "rollout_generate"}


def test_not_profiled_is_a_plain_call():
    prof = PrecisionDebuggerProfiler({"config_path": config("l1_statistics")}, rank=0, save_path="out")
    f = prof.annotate(role="actor_update")(lambda self, x: (self, x))
    g = prof.stage("actor_update")(lambda x: x * 2)
    assert f("w", 1) == ("w", 1) and g(3) == 6
    with prof.stage("actor_update", model=Module()) as s:
        assert s is not None
    assert prof.annotate(color="red")(len) is len  # no role: nothing wrapped


def test_strict_unknown_stage_name_raises_when_named():
    prof = PrecisionDebuggerProfiler({"config_path": config("l1_statistics"), "strict": True}, rank=0, save_path="o")
    with pytest.raises(ValueError, match="Unknown precision_debugger stage: actor_updte"):
        prof.stage("actor_updte")
    prof.stage("rollout_generate")  # ignored by design, not unknown


def test_retag_only_for_precision_debugger_continuous():
    calls = []
    wg = ns(start_profile=lambda **kw: calls.append(kw))

    def trainer(tool="precision_debugger", continuous=True, prev=True):
        from omegaconf import OmegaConf

        return ns(config=OmegaConf.create({"global_profiler": {"tool": tool, "profile_continuous_steps": continuous}}),
                  prev_step_profile=prev, curr_step_profile=True, global_steps=6, actor_rollout_wg=wg,
                  ref_policy_wg=wg, critic_wg=None, use_reference_policy=True, use_critic=False)

    for t in (trainer(tool="nsys"), trainer(continuous=False), trainer(prev=False)):
        patch._retag_continuous_window(t)
    assert calls == []
    patch._retag_continuous_window(trainer())
    assert calls == [{"profile_step": 6, "role": "train"}]  # the aliased ref group is the same group


def test_import_install_and_idle_profiler_stay_light():
    """In a fresh process: importing the runtime, install() (twice, verl hidden) and a profiler
    on a non-profiled step import neither torch, msprobe nor verl."""
    code = f"""
import sys
sys.modules["verl"] = None  # verl absent
import verl_pdbg_conf.runtime as rt
rt.install(); rt.install()
from verl_pdbg_conf.runtime import patch
assert sum(isinstance(f, patch._Finder) for f in sys.meta_path) == 1
try:
    import verl.utils.profiler.precision_debugger_profile
except ImportError:
    pass
p = rt.PrecisionDebuggerProfiler({{"config_path": {config("l1_statistics")!r}}}, rank=0, save_path="out")
assert p.annotate(role="actor_update")(lambda s: 5)(None) == 5
rt.uninstall()
assert not patch.installed()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "msprobe", "ray") or m.startswith("verl."))
print(heavy)
"""
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_token_record_of_a_forward_never_reaches_it():
    """The log-prob stages' token record (rollout.ForwardTokens) hooks the model's forward: a value head's output
    is not taken for logits, 1-D ids are not a batch, and a language model's next-token log-probs are kept."""
    import torch

    from verl_pdbg_conf.runtime.rollout import ForwardTokens

    class Head(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.width = width

        def forward(self, input_ids):
            return torch.arange(input_ids.numel() * self.width, dtype=torch.float32).reshape(*input_ids.shape,
                                                                                              self.width)

    value = Head(4)
    rec = ForwardTokens(value).__enter__()
    assert value(torch.tensor([[5, 29, 3]])).shape == (1, 3, 4)  # ids past the head's width: no error
    value(torch.tensor([5, 6]))
    rec.detach()
    assert rec.calls == [{"input_ids": [[5, 29, 3]]}]
    lm = Head(30)
    rec = ForwardTokens(lm).__enter__()
    logits = lm(torch.tensor([[5, 29, 3]]))
    rec.detach()
    want = torch.log_softmax(logits[0, :2], -1)[[0, 1], [29, 3]].tolist()
    assert rec.calls[0]["next_logprobs"] == [want]
