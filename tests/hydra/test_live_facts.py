"""Facts extracted live from real verl trees (0.2 to 0.7 from the registry, and a fork with its
own config name and key), composed through the Composer compose_verl uses, against Hydra on
that tree's own config directory: the same configs, the same errors."""

from __future__ import annotations

import os
import shutil

import pytest
from test_release_facts import _facts, _real

from real_verls import OLD_VERLS
from verl_pdbg_conf.verl_facts import catalog, source

CASES = [
    [],
    ["trainer.total_epochs=3", "data.train_batch_size=64"],
    ["trainer.nope=1"],
    ["+x.y=[1,2]"],
    ["++trainer.new_key=2"],
    ["~trainer.logger"],
    ["~trainer.nope"],
    ["global_profiler.tool=precision_debugger"],
    ["+global_profiler.global_tool_config.precision_debugger.config_path=c.json"],
    ["actor_rollout_ref.actor.profiler.enable=True"],
    ["+profiler=precision_debugger_l1"],
    ["critic=megatron_critic"],
    ["actor_rollout_ref.rollout.name=sglang"],
    ["trainer.experiment_name=${trainer.project_name}_x"],
    ["data.train_batch_size=[1"],
]


def _live(root) -> str:
    return source.from_tree(str(root), source.REPOSITORY).facts


@pytest.mark.parametrize("version", OLD_VERLS)
def test_live_facts_compose_as_hydra_on_the_tree(verl_tree, version):
    root = verl_tree(version)
    name = _live(root)
    real_dir = str(root / "verl" / "trainer" / "config")
    outcomes = []
    for overrides in CASES:
        real = _real(real_dir, "ppo_trainer", overrides)
        assert _facts(name, "ppo_trainer", overrides) == real, overrides
        outcomes.append(real[0])
    assert "ok" in outcomes and "error" in outcomes
    for primary in catalog.primary_configs(name):
        for overrides in ([], ["trainer.nope=1"]):
            assert _facts(name, primary, overrides) == _real(real_dir, primary, overrides), (primary, overrides)
    assert _facts(name, "nope_trainer", []) == _real(real_dir, "nope_trainer", [])


FORK_PRIMARY = """\
defaults:
  - ppo_trainer
  - _self_
factory:
  mode: tools
  max_turns: 3
"""


def test_fork_with_its_own_config_name_and_key(verl_tree, tmp_path):
    base = verl_tree("0.7.1")
    shutil.copytree(base / "verl", tmp_path / "verl")
    cfg = tmp_path / "verl" / "trainer" / "config"
    (cfg / "rl_factory_ppo_trainer.yaml").write_text(FORK_PRIMARY)
    (cfg / "ppo_trainer.yaml").write_text((cfg / "ppo_trainer.yaml").read_text() + "\nfork_extra:\n  enabled: false\n")
    (tmp_path / "verl" / "version" / "version").write_text("0.8.0.dev")
    name = _live(tmp_path)
    assert catalog.version(name) == "0.8.0.dev" and "rl_factory_ppo_trainer" in catalog.primary_configs(name)
    for primary, overrides in [("rl_factory_ppo_trainer", ["factory.mode=env", "fork_extra.enabled=true"]),
                               ("rl_factory_ppo_trainer", ["factory.nope=1"]),
                               ("ppo_trainer", ["fork_extra.enabled=true"]),
                               ("ppo_trainer", ["+factory.mode=env"])]:
        assert _facts(name, primary, overrides) == _real(str(cfg), primary, overrides), (primary, overrides)
    assert _facts(name, "rl_factory_ppo_trainer", ["factory.mode=env"])[0] == "ok"
    assert _facts(_live(base), "ppo_trainer", ["fork_extra.enabled=true"])[0] == "error"
    assert not os.path.exists(cfg / "__pycache__")
