"""Mixture-of-experts runs: verl's routing-replay settings on each shipped release's real composed config
(where the keys differ: 0.8.0 and 0.9.0 still compose actor.router_replay, which nothing reads), and
whether the rollout profiling collects the routers of an MoE model, judged from the model's
config.json. Real composition, nothing mocked."""

from __future__ import annotations

import json
import os

import pytest

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.validate import validate_composed
from verl_pdbg_conf.verl_facts import releases
from verl_pdbg_conf.verl_facts.releases.extract import Tree, _routing_replay

from conftest import PD

pytestmark = pytest.mark.usefixtures("verl_config_dir")

OPT = "+profiler=precision_debugger_rollout"
RO = "actor_rollout_ref.rollout"
MEG = "actor_rollout_ref.actor.megatron.router_replay.mode"
VEO = "actor_rollout_ref.actor.veomni.router_replay.mode"
LEGACY = "actor_rollout_ref.actor.router_replay.mode"
FLAG = f"{RO}.enable_rollout_routing_replay"
RULES = {"routing-replay-mode", "routing-replay-ignored", "routing-replay-rollout", "routing-replay-conflict",
         "routing-replay-compare", "rollout-moe-routing"}
SHIPPED = releases.shipped()


def found(*overrides, release="0.9.1", base="", opt=OPT):
    report = validate_composed([], [o for o in (opt, *overrides) if o],
                               Options(verl_version=release, base_dir=base or os.getcwd()))
    return [f for f in report.sorted() if f.rule in RULES]


def only(fs, rule):
    assert [f.rule for f in fs] == [rule], fs
    return fs[0]


# ------------------------------------------------------------------ the facts

def test_each_release_reads_the_mode_of_its_strategys_engine():
    for release in SHIPPED:
        rr = releases.load(release)["stages"]["routing_replay"]
        assert rr["reads"] == {"megatron": MEG, "veomni": VEO}, release
        assert rr["rollout_engines"] == ["sglang", "vllm"] and rr["modes"] == ["disabled", "R2", "R3"]


def _tree(files: dict[str, str]) -> Tree:
    return Tree({p: t.encode() for p, t in files.items()}, "x", "test")


def test_extraction_of_the_legacy_workers_and_of_a_fork():
    # verl main of 2026-01 (0.8.0.dev): the Megatron worker reads the actor's own router_replay
    legacy = _tree({"verl/workers/megatron_workers.py": (
        "class ActorRolloutRefWorker:\n    def __init__(self):\n"
        "        self.router_replay = self.config.actor.router_replay\n"
        "        self.enable_routing_replay = self.router_replay.mode != 'disabled'\n")})
    assert _routing_replay(legacy)["reads"] == {"megatron": LEGACY}
    # a fork whose FSDP follows the rollout switch: nothing is claimed for fsdp
    fork = _tree({"verl/workers/engine_workers.py": (
        "def f(self, actor_strategy_name):\n"
        "    if actor_strategy_name == 'megatron':\n        rr_mode = self.config.actor.megatron.router_replay.mode\n"
        "    elif actor_strategy_name in ('fsdp', 'fsdp2'):\n        rr_mode = 'R3' if self.r3 else 'disabled'\n"
        "    else:\n        rr_mode = 'disabled'\n")})
    assert _routing_replay(fork)["reads"] == {"megatron": MEG}


# ------------------------------------------------------------------ routing replay settings

def test_defaults_are_quiet_on_every_release():
    for release in SHIPPED:
        for engine in ("", "model_engine=megatron", "model_engine=veomni"):
            assert found(engine, release=release) == [], (release, engine)


@pytest.mark.parametrize("release", ["0.8.0", "0.9.0"])
def test_the_older_actor_key_composes_but_is_never_read(release):
    f = only(found("model_engine=megatron", f"{LEGACY}=R3", f"{FLAG}=True", release=release),
             "routing-replay-ignored")
    assert f.severity is Severity.WARNING and f.path == LEGACY and (f.file, f.line) == ("<cli>", 3)
    assert MEG in f.message and f.hint == f"{MEG}=R3"
    # on FSDP no strategy section is read at all
    f = only(found(f"{LEGACY}=R2", release=release), "routing-replay-ignored")
    assert "strategy fsdp" in f.message and "model_engine=megatron" in f.hint
    # set where it is read as well: redundant, not wrong
    assert found("model_engine=megatron", f"{LEGACY}=R2", f"{MEG}=R2", release=release) == []


def test_the_older_actor_key_does_not_compose_on_0_9_1():
    assert found(f"{LEGACY}=R3") == []  # the composition error says it (override), not this rule


def test_a_mode_added_to_fsdp_is_ignored():
    f = only(found(f"+{MEG}=R3"), "routing-replay-ignored")
    assert f.path == MEG and "strategy fsdp" in f.message


@pytest.mark.parametrize("release", SHIPPED)
@pytest.mark.parametrize("engine, at", [("megatron", MEG), ("veomni", VEO)])
def test_r3_without_the_rollouts_routes_fails(release, engine, at):
    f = only(found(f"model_engine={engine}", f"{at}=R3", release=release), "routing-replay-rollout")
    assert f.severity is Severity.ERROR and f.path == at and (f.file, f.line) == ("<cli>", 3)
    assert f.hint == f"{FLAG}=True"
    # with them: works, and the routing compare is said to check the replay
    f = only(found(f"model_engine={engine}", f"{at}=R3", f"{FLAG}=True", release=release),
             "routing-replay-compare")
    assert f.severity is Severity.INFO and "checks the replay" in f.message and f"{at}=disabled" in f.hint


def test_r3_compare_note_only_when_both_stages_are_collected():
    assert found("model_engine=megatron", f"{MEG}=R3", f"{FLAG}=True", opt="+profiler=precision_debugger_l0") == []
    assert found("model_engine=megatron", f"{MEG}=R3", f"{FLAG}=True",
                 f"{PD}.stages=[rollout_generate]") == []


def test_r3_with_a_rollout_that_never_returns_routes():
    f = only(found("model_engine=megatron", f"{MEG}=R3", f"{FLAG}=True", f"{RO}.name=trtllm"),
             "routing-replay-rollout")
    assert "'trtllm'" in f.message and f.hint == f"{RO}.name=vllm"


def test_rollout_routes_need_prefix_caching_in_vllm():
    f = only(found("model_engine=megatron", f"{MEG}=R3", f"{FLAG}=True", f"{RO}.enable_prefix_caching=False"),
             "routing-replay-rollout")
    assert f.severity is Severity.WARNING and "prefix caching" in f.message and f.path == f"{RO}.enable_prefix_caching"
    # engine_kwargs.vllm is spread over verl's own engine arguments: it wins
    f = only(found("model_engine=megatron", f"{MEG}=R3", f"{FLAG}=True",
                   f"+{RO}.engine_kwargs.vllm.enable_prefix_caching=False"), "routing-replay-rollout")
    assert f.path == f"{RO}.engine_kwargs.vllm.enable_prefix_caching"
    assert [x.rule for x in found("model_engine=megatron", f"{MEG}=R3", f"{FLAG}=True",
                                  f"{RO}.enable_prefix_caching=False",
                                  f"+{RO}.engine_kwargs.vllm.enable_prefix_caching=True")] == ["routing-replay-compare"]


@pytest.mark.parametrize("engine, at", [("megatron", MEG), ("veomni", VEO)])
def test_r2_with_the_rollouts_routes_conflicts(engine, at):
    f = only(found(f"model_engine={engine}", f"{at}=R2", f"{FLAG}=True"), "routing-replay-conflict")
    assert f.severity is Severity.ERROR and "Detected conflicting router replay configuration" in f.message
    assert found(f"model_engine={engine}", f"{at}=R2") == []


def test_an_illegal_mode():
    f = only(found("model_engine=megatron", f"{MEG}=r3"), "routing-replay-mode")
    assert f.severity is Severity.ERROR and f.hint == "one of disabled, R2, R3"


def test_rollout_routes_that_nothing_replays():
    f = only(found(f"{FLAG}=True"), "routing-replay-ignored")
    assert f.path == FLAG and "strategy fsdp" in f.message
    f = only(found("model_engine=megatron", f"{FLAG}=True"), "routing-replay-ignored")
    assert f"{MEG}=R3" in f.hint
    # the rollout's MoE load-balance metrics use them
    assert found(f"{FLAG}=True", f"{RO}.moe_load_balance_metrics_interval=10") == []


# ------------------------------------------------------------------ routers in the rollout's dumps

def _model(tmp_path, name, config):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


def _msprobe(tmp_path, name, **cfg):
    p = tmp_path / name
    p.write_text(json.dumps({"task": "tensor", "level": "L0", **cfg}))
    return f"{PD}.config_path={p}"


QWEN3_MOE = {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2}


@pytest.mark.parametrize("config, n", [
    (QWEN3_MOE, 8),
    ({"model_type": "deepseek_v3", "n_routed_experts": 64}, 64),
    ({"model_type": "mixtral", "num_local_experts": 8}, 8),
    ({"model_type": "qwen3_5_moe", "text_config": {"num_experts": 16}}, 16),
])
def test_level_l1_leaves_the_routers_out(tmp_path, config, n):
    m = _model(tmp_path, "m", config)
    l1 = _msprobe(tmp_path, "l1.json", level="L1")
    f = only(found(f"actor_rollout_ref.model.path={m}", l1), "rollout-moe-routing")
    assert f.severity is Severity.WARNING and f"{n} experts" in f.message and "level L1" in f.message
    assert f.path == f"{PD}.config_path" and (f.file, f.line) == ("<cli>", 3)
    assert '"level": "L0"' in f.hint


def test_dense_or_unknown_model_is_quiet(tmp_path):
    l1 = _msprobe(tmp_path, "l1.json", level="L1")
    assert found(f"actor_rollout_ref.model.path={_model(tmp_path, 'd', {'model_type': 'qwen3'})}", l1) == []
    assert found("actor_rollout_ref.model.path=Org/not-on-this-machine", l1) == []
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"num_experts": 8')  # not JSON: verl fails on it, not judged here
    assert found(f"actor_rollout_ref.model.path={broken}", l1) == []
    # the shipped config collects every module at L0: quiet on an MoE model
    assert found(f"actor_rollout_ref.model.path={_model(tmp_path, 'm', QWEN3_MOE)}") == []


def test_override_config_says_moe(tmp_path):
    l1 = _msprobe(tmp_path, "l1.json", level="L1")
    only(found("actor_rollout_ref.model.path=Org/not-on-this-machine",
               "+actor_rollout_ref.model.override_config.num_experts=4", l1), "rollout-moe-routing")


def test_model_in_the_hugging_face_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-30B-A3B"
    (snap / "refs").mkdir(parents=True)
    (snap / "refs" / "main").write_text("abc123")
    (snap / "snapshots" / "abc123").mkdir(parents=True)
    (snap / "snapshots" / "abc123" / "config.json").write_text(json.dumps(QWEN3_MOE))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    l1 = _msprobe(tmp_path, "l1.json", level="L1")
    only(found("actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B", l1), "rollout-moe-routing")


@pytest.mark.parametrize("entries, fires", [
    (["self_attn", "lm_head"], True),
    (["Functional.linear"], True),
    (["mlp.gate"], False),
    (["layers.3."], False),  # every module of layer 3, its router too
    (["Qwen3MoeTopKRouter"], False),
    (["mlp.router"], False),
])
def test_list_that_names_no_router(tmp_path, entries, fires):
    m = _model(tmp_path, "m", QWEN3_MOE)
    cfg = _msprobe(tmp_path, "list.json", tensor={"list": entries})
    got = found(f"actor_rollout_ref.model.path={m}", cfg)
    assert [f.rule for f in got] == (["rollout-moe-routing"] if fires else [])


def test_statistics_is_one_finding_not_two(tmp_path):
    m = _model(tmp_path, "m", QWEN3_MOE)
    cfg = _msprobe(tmp_path, "stats.json", task="statistics", level="L1")
    report = validate_composed([], [OPT, f"actor_rollout_ref.model.path={m}", cfg], Options())
    rules = [f.rule for f in report.findings]
    assert "rollout-task" in rules and "rollout-moe-routing" not in rules
