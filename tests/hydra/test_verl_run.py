"""The groups in a real verl process, no training:
- `python -m verl.trainer.main_ppo +profiler=precision_debugger_l1 --cfg job --resolve` shows the
  group applied, with no extra flag (the SearchPathPlugin is discovered by verl's own Hydra app);
- through verl's own `run_ppo` (its ray.init with the config's runtime_env, a local Ray cluster),
  the config_path resolves to an existing file inside the Ray actor that resolves the config, as
  verl's TaskRunner does, with and without this package's runtime profiler installed there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import PD, ROLES, sel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("verl_config_dir")]


def _env(pkg_root: str) -> dict:
    # the verl_pdbg_conf under test (and, from a checkout, its hydra_plugins) first on the path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [pkg_root, os.environ.get("PYTHONPATH")] if p))
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def test_main_ppo_cfg_job_shows_the_group(pkg_root, tmp_path):
    yaml = pytest.importorskip("yaml")
    out = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "+profiler=precision_debugger_l1",
         "global_profiler.steps=[2]", "--cfg", "job", "--resolve"],
        capture_output=True, text=True, env=_env(pkg_root), cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = yaml.safe_load(out.stdout)
    gp = cfg["global_profiler"]
    assert gp["tool"] == "precision_debugger"
    assert gp["steps"] == [2]  # a plain override wins over the group
    pd = sel(cfg, PD)
    assert os.path.isfile(pd["config_path"]) and pd["config_path"].endswith("statistics_l1.json")
    assert pd["stages"] == ["actor_compute_log_prob", "ref_compute_log_prob", "actor_update"]
    for role in ROLES:
        prof = sel(cfg, role)
        assert prof["tool"] == "precision_debugger"
        assert prof["tool_config"]["precision_debugger"]["config_path"] == pd["config_path"]
    assert sel(cfg, "actor_rollout_ref.actor.profiler.enable") is True
    assert not os.listdir(tmp_path)  # --cfg job runs nothing


_RUN = r'''
import json, os, sys
import ray
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl_pdbg_conf.verl_facts.compose import _ensure_search_path_plugin, verl_config_dir
from verl.trainer.main_ppo import run_ppo

out_file, options = sys.argv[1], sys.argv[2:]
_ensure_search_path_plugin()  # discovered when installed; registered here from a bare checkout
results = {}


@ray.remote(num_cpus=1)
class Probe:
    """Stands in for verl's TaskRunnerV1: receives the config run_ppo sends and resolves it there."""

    def run(self, config):
        OmegaConf.resolve(config)
        roles = ["actor_rollout_ref.actor.profiler", "actor_rollout_ref.ref.profiler",
                 "actor_rollout_ref.rollout.profiler", "critic.profiler"]
        paths = {"global": config.global_profiler.global_tool_config.precision_debugger.config_path}
        for r in roles:
            paths[r] = OmegaConf.select(config, r + ".tool_config.precision_debugger.config_path")
        res = {"paths": paths, "exists": {k: bool(v) and os.path.isfile(v) for k, v in paths.items()},
               "pid": os.getpid(), "runtime_loaded": "verl_pdbg_conf.runtime" in sys.modules}
        with open(out_file + ".actor", "w") as fh:
            json.dump(res, fh)


for option in options:
    with initialize_config_dir(verl_config_dir(), version_base=None):
        config = compose("ppo_trainer", overrides=["+profiler=" + option, "ray_kwargs.ray_init.num_cpus=2",
                                                  # a cluster of its own: ray.init() would join one another test
                                                  # (or another process) started, and refuse num_cpus there
                                                  "+ray_kwargs.ray_init.address=local"])
    raw = OmegaConf.to_container(config, resolve=False)
    run_ppo(config, task_runner_class=Probe)  # verl's own ray.init(**ray_kwargs.ray_init + its runtime_env)
    res = json.load(open(out_file + ".actor"))
    res["driver_pid"] = os.getpid()
    res["driver_path"] = raw["global_profiler"]["global_tool_config"]["precision_debugger"]["config_path"]
    res["hook"] = raw["ray_kwargs"]["ray_init"]["runtime_env"].get("worker_process_setup_hook")
    results[option] = res
    ray.shutdown()  # the next option's runtime_env needs a new ray.init
json.dump(results, open(out_file, "w"))
'''


def test_config_path_resolves_inside_a_ray_actor(pkg_root, tmp_path):
    pytest.importorskip("ray")
    # option -> installs this package's runtime in the workers: every option does
    options = {"precision_debugger_l1": True, "precision_debugger_l1_critic": True}
    script = tmp_path / "run.py"
    script.write_text(_RUN)
    out_file = tmp_path / "out.json"
    env = _env(pkg_root)
    env.pop("RAY_ADDRESS", None)  # a local cluster started by verl's ray.init
    proc = subprocess.run([sys.executable, str(script), str(out_file), *options], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads(out_file.read_text())
    assert set(results) == set(options)
    for option, runtime in options.items():
        res = results[option]
        assert res["pid"] != res["driver_pid"], option  # resolved in another process: the Ray actor
        # a literal absolute path travels in the config: nothing left for the worker to look up
        assert os.path.isabs(res["driver_path"]) and "${" not in res["driver_path"], option
        assert all(res["exists"].values()), (option, res)
        assert set(res["paths"].values()) == {res["driver_path"]}, option
        # every option installs this package's runtime in every Ray worker
        assert res["hook"] == ("verl_pdbg_conf.runtime.install" if runtime else None), option
        assert res["runtime_loaded"] is runtime, (option, res)
