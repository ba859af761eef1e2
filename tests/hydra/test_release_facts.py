"""The shipped per-release facts against verl itself: regenerated from the installed package
they are the shipped file; composed with Hydra they give what Hydra gives on verl's real
installed tree (same config, same errors), through the cached Composer that compose_verl uses."""

from __future__ import annotations

import os
import re

import pytest

from verl_pdbg_conf.verl_facts import releases
from verl_pdbg_conf.verl_facts.releases.extract import Tree, extract




@pytest.fixture(scope="module")
def installed() -> str:
    v = releases.installed_version()
    if v not in releases.shipped():
        pytest.skip(f"the installed verl {v} has no shipped facts")
    return v


def test_regenerated_facts_equal_shipped(installed):
    fresh = extract(Tree.from_installed())
    shipped = releases.load(installed)
    assert fresh.pop("source") == "installed"
    shipped.pop("source")
    assert fresh == shipped


# ---------------------------------------------------------------- differential: facts vs real tree

CASES = [
    [],
    ["+profiler=precision_debugger_l1"],
    ["+profiler=precision_debugger_l1_critic", "critic.enable=True"],
    ["global_profiler.steps=[1,2]", "global_profiler.tool=precision_debugger"],
    ["+global_profiler.global_tool_config.precision_debugger.strict=True"],
    ["++global_profiler.global_tool_config.precision_debugger.strict=True"],
    ["+global_profiler.global_tool_config.precision_debugger.stages=[actor_update]"],
    ["~global_profiler.save_path"],
    ["~global_profiler.nope"],
    ["~actor_rollout_ref.ref"],
    ["model_engine=megatron"],
    ["model_engine=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"],
    ["model_engine=nope"],
    ["actor@actor_rollout_ref.actor=megatron_actor"],
    ["actor_rollout_ref/actor=dp_actor"],
    ["critic=megatron_critic"],
    ["+profiler=precision_debuger_l1"],
    ["profiler=precision_debugger_l1"],
    ["+profiler=precision_debugger_l1", "+profiler=precision_debugger_l0"],
    ["~profiler"],
    ["global_profilr.tool=precision_debugger"],
    ["reward_model.profiler.enable=True"],
    ["trainer.project_name='my proj'", 'data.train_files="[a.parquet,b.parquet]"'],
    ["trainer.experiment_name=${trainer.project_name}_x"],
    ["trainer.experiment_name=${oc.env:VERL_PDBG_CONF_NO_SUCH_VAR}"],
    ["+new_key.sub=1", "++trainer.new_key=2"],
    ["data.train_batch_size=64", "data.train_batch_size=128"],
    ["actor_rollout_ref.actor.optim.lr=1e-6", "trainer.logger=[console,wandb]"],
    ["hydra.job.name=x"],
    ["algorithm.adv_estimator=gae", "critic.enable=True", "data={a:1}"],
    ["actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=true"],
    ["actor_rollout_ref.actor.router_replay.mode=disabled"],
    ["trainer.n_gpus_per_node=1,2"],
    ["global_profiler.steps=[1"],
    ["+global_profiler.steps=[1]"],
    ["global_profiler=null"],
    ["actor_rollout_ref.rollout.name=sglang", "~trainer.logger"],
]


def _outcome(fn):
    """(kind, data): the composed config unresolved and resolved, or the error's type and text with
    the search path (which names the source) taken out."""
    from omegaconf import OmegaConf

    try:
        cfg = fn()
    except Exception as e:
        text = re.sub(r"\n+Config search path:.*", "", str(e), flags=re.S)
        cause = e.__cause__
        return ("error", type(e).__name__, text, type(cause).__name__ if cause else None,
                str(cause) if cause else None)
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:
        resolved = ("unresolvable", type(e).__name__, str(e))
    return ("ok", OmegaConf.to_container(cfg, resolve=False), resolved)


def _real(config_dir, name, overrides):
    from hydra import compose

    from verl_pdbg_conf.verl_facts.compose import _ensure_search_path_plugin, _hydra_session

    _ensure_search_path_plugin()
    with _hydra_session(config_dir):
        return _outcome(lambda: compose(name, overrides=list(overrides)))


def _facts(release, name, overrides, user_dir=None):
    from verl_pdbg_conf.verl_facts import facts_source
    from verl_pdbg_conf.verl_facts.compose import (Composer, Override, _ensure_search_path_plugin,
                                                   _hydra_session, _searchpath_override)

    _ensure_search_path_plugin()
    facts_source.ensure_registered()
    main = f"{facts_source.SCHEME}://{release}"
    sp = None
    if user_dir is not None:
        sp = _searchpath_override(user_dir, name, main, [Override(o) for o in overrides])
        main = user_dir
    with _hydra_session(main):
        return _outcome(lambda: Composer(main, sp, None).compose(name, list(overrides)))


def primaries(release):
    return sorted(releases.primary_configs(release))


def test_primaries_are_the_release_files(installed, verl_config_dir):
    on_disk = sorted(f[:-5] for f in os.listdir(verl_config_dir)
                     if f.endswith(".yaml") and not f.startswith("_generated_"))
    assert primaries(installed) == on_disk
    assert {"ppo_trainer", "ppo_megatron_trainer"} <= set(on_disk)


@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(c) or "none" for c in CASES])
def test_ppo_trainer_same_as_hydra_on_real_tree(installed, verl_config_dir, overrides):
    real = _real(verl_config_dir, "ppo_trainer", overrides)
    assert _facts(installed, "ppo_trainer", overrides) == real
    # twice: the second comes from the composition cache
    assert _facts(installed, "ppo_trainer", overrides) == real


def test_cases_cover_success_and_errors(installed, verl_config_dir):
    kinds = [_real(verl_config_dir, "ppo_trainer", c)[0] for c in CASES]
    assert kinds.count("error") >= 10 and kinds.count("ok") >= 15


def test_every_primary_config_same_as_hydra(installed, verl_config_dir):
    for name in primaries(installed):
        for overrides in ([], ["+profiler=precision_debugger_l1"], ["trainer.nope=1"], ["+x.y=[1,2]"]):
            assert _facts(installed, name, overrides) == _real(verl_config_dir, name, overrides), (name, overrides)


def test_missing_primary_same_error(installed, verl_config_dir):
    assert _facts(installed, "nope_trainer", []) == _real(verl_config_dir, "nope_trainer", [])


USER_PRIMARY = """\
hydra:
  searchpath:
    - {searchpath}
defaults:
  - ppo_trainer
  - my_actor@actor_rollout_ref.actor.my: small
  - _self_
trainer:
  project_name: mine
global_profiler:
  steps: [2]
"""


@pytest.mark.parametrize("overrides", [[], ["+profiler=precision_debugger_l1"], ["my_actor@actor_rollout_ref.actor.my=big"],
                                       ["actor@actor_rollout_ref.actor=megatron_actor", "trainer.nope=1"],
                                       ["+profiler=precision_debugger_l1", "global_profiler.steps=[3]"]])
def test_user_dir_with_verl_on_search_path(installed, verl_config_dir, tmp_path, overrides):
    """A project's own config directory pulling verl's configs through hydra.searchpath: the
    facts stand in for verl's tree wherever the primary config names it."""
    (tmp_path / "my_actor").mkdir()
    (tmp_path / "my_actor" / "small.yaml").write_text("size: 1\nlr: ${actor_rollout_ref.actor.optim.lr}\n")
    (tmp_path / "my_actor" / "big.yaml").write_text("size: 2\n")
    (tmp_path / "mine.yaml").write_text(USER_PRIMARY.format(searchpath=f"file://{verl_config_dir}"))
    real = _real(str(tmp_path), "mine", overrides)
    assert real[0] == "ok" or overrides[-1] == "trainer.nope=1"
    for sp in (f"file://{verl_config_dir}", "pkg://verl.trainer.config", "file://verl/trainer/config"):
        (tmp_path / "mine.yaml").write_text(USER_PRIMARY.format(searchpath=sp))
        assert _facts(installed, "mine", overrides, str(tmp_path)) == real, sp


def test_user_dir_without_searchpath_finds_verl(tmp_path):
    """Runs without verl too: the facts alone."""
    (tmp_path / "mine.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\ntrainer:\n  project_name: mine\n")
    got = _facts(releases.judging()[0], "mine", ["+profiler=precision_debugger_l1"], str(tmp_path))
    assert got[0] == "ok" and got[1]["trainer"]["project_name"] == "mine"
    assert got[1]["global_profiler"]["tool"] == "precision_debugger"


# ---------------------------------------------------------------- other releases, from their wheels

WHEELS = os.environ.get("VERL_PDBG_CONF_WHEELS")  # a directory of `pip download --no-deps verl==X` wheels


@pytest.mark.skipif(not WHEELS, reason="set VERL_PDBG_CONF_WHEELS to a directory of verl wheels")
@pytest.mark.parametrize("release", releases.shipped())
def test_shipped_release_against_its_wheel(release, tmp_path):
    """Regenerated from the wheel: the shipped file, byte for byte; composed: what Hydra composes
    on the wheel's own config tree."""
    import zipfile

    from verl_pdbg_conf.verl_facts.releases.extract import dumps, path_for

    wheel = os.path.join(WHEELS, f"verl-{release}-py3-none-any.whl")
    if not os.path.isfile(wheel):
        pytest.skip(f"no {wheel}")
    with open(path_for(release), "rb") as f:
        assert dumps(extract(Tree.from_wheel(wheel))) == f.read()
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path, [n for n in z.namelist() if n.startswith("verl/trainer/config/")])
    real_dir = str(tmp_path / "verl" / "trainer" / "config")
    for overrides in CASES:
        assert _facts(release, "ppo_trainer", overrides) == _real(real_dir, "ppo_trainer", overrides), overrides
    for name in primaries(release):
        assert _facts(release, name, ["+profiler=precision_debugger_l1"]) == \
            _real(real_dir, name, ["+profiler=precision_debugger_l1"]), name
