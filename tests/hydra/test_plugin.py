"""The SearchPathPlugin: found by Hydra's own plugin discovery, cheap to import, and what it
adds to the search path and the ConfigStore."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import OPTIONS

MODULE = "hydra_plugins.verl_pdbg_conf_searchpath.verl_pdbg_conf_searchpath"


def _ours(plugins):
    return [p for p in plugins if getattr(p, "VERL_PDBG_CONF", False)]


def test_discovered_by_hydra():
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    found = _ours(Plugins.instance().discover(SearchPathPlugin))
    assert found, "hydra_plugins.verl_pdbg_conf_searchpath is not discovered (pip install . or run from the checkout)"
    assert found[0].__module__ == MODULE


def test_search_path_and_config_store():
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    sp = ConfigSearchPathImpl()
    for p in _ours(Plugins.instance().discover(SearchPathPlugin)):
        p().manipulate_search_path(sp)
        p().manipulate_search_path(sp)  # idempotent
    ours = [e for e in sp.get_path() if e.provider == "verl-pdbg-conf"]
    assert len(ours) == 1
    conf = ours[0].path[len("file://"):]
    assert set(OPTIONS) <= {n[:-5] for n in os.listdir(os.path.join(conf, "profiler"))}
    assert "profiler.yaml" not in os.listdir(os.path.join(conf, "profiler"))  # verl's own would shadow it
    nodes = ConfigStore.instance().repo["verl_pdbg_conf"]["config_path"]
    assert set(nodes) == {"statistics_l0.yaml", "statistics_l1.yaml", "tensor_l1.yaml", "tensor_rollout.yaml"}
    for name, node in nodes.items():
        path = node.node["config_path"]
        assert os.path.isabs(path) and os.path.isfile(path), path
        assert os.path.basename(path) == name[:-5] + ".json"
    # the rollout's settings for this package's vLLM plugin: a literal JSON string (no interpolation,
    # main_ppo hands runtime_env to ray.init unresolved)
    envs = ConfigStore.instance().repo["verl_pdbg_conf"]["rollout_env"]
    assert set(envs) == set(nodes)
    for name, node in envs.items():
        value = node.node["VERL_PDBG_CONF_ROLLOUT"]
        assert "${" not in value
        assert json.loads(value) == {"config_path": nodes[name].node["config_path"],
                                     "save_path": "outputs/precision_debugger", "steps": [1]}


def test_options_are_global_packages(pkg_root):
    conf = os.path.join(pkg_root, "verl_pdbg_conf", "conf", "profiler")
    for opt in OPTIONS:
        with open(os.path.join(conf, opt + ".yaml")) as fh:
            assert fh.readline().strip() == "# @package _global_", opt


def test_msprobe_configs_have_no_dump_path(pkg_root):
    d = os.path.join(pkg_root, "verl_pdbg_conf", "conf", "msprobe")
    want = {"statistics_l1.json": ("statistics", "L1"), "statistics_l0.json": ("statistics", "L0"),
            "tensor_l1.json": ("tensor", "L1"), "tensor_rollout.json": ("tensor", "L0")}
    assert set(os.listdir(d)) >= set(want)
    for name, (task, level) in want.items():
        with open(os.path.join(d, name)) as fh:
            cfg = json.load(fh)
        assert (cfg["task"], cfg["level"]) == (task, level)
        assert "dump_path" not in cfg


def test_msprobe_accepts_the_shipped_configs(pkg_root):
    pytest.importorskip("msprobe")
    d = os.path.join(pkg_root, "verl_pdbg_conf", "conf", "msprobe")
    code = ("import sys\nfrom msprobe.pytorch.dump.pt_config import parse_json_config\n"
            "for f in sys.argv[1:]:\n    common, task = parse_json_config(f, None)\n"
            "    print(common.task, common.level)\n")
    files = [os.path.join(d, n) for n in ("statistics_l0.json", "statistics_l1.json", "tensor_l1.json",
                                          "tensor_rollout.json")]
    out = subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-5:-1] == ["statistics L0", "statistics L1", "tensor L1", "tensor L0"]


def test_import_is_cheap(pkg_root):
    """Hydra imports the plugin at every start of every app: it must load nothing heavy."""
    code = f"""
import sys, time, json
import hydra
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.core.config_search_path import ConfigSearchPath
before = set(sys.modules)
t = time.perf_counter()
import {MODULE} as m
t_import = time.perf_counter() - t
t = time.perf_counter()
conf = m.conf_dir()
t_conf = time.perf_counter() - t
print(json.dumps({{"import": t_import, "conf_dir": t_conf, "conf": conf,
                   "new": sorted(set(sys.modules) - before)}}))
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg_root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(n.startswith("hydra_plugins") for n in res["new"]), res["new"]  # no verl_pdbg_conf, verl, torch
    assert res["conf"] and os.path.isdir(os.path.join(res["conf"], "profiler"))
    assert res["import"] < 0.05 and res["conf_dir"] < 0.05, res  # about 1 ms and 0.3 ms when measured


def test_compose_verl_works_when_hydra_did_not_discover_the_plugin(pkg_root, verl_config_dir):
    """A checkout used without `pip install .` and outside its root: compose_verl registers the
    plugin itself."""
    code = """
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin
p = Plugins.instance()
for cls in list(p.plugin_type_to_subclass_list[SearchPathPlugin]):
    if getattr(cls, "VERL_PDBG_CONF", False):
        p.plugin_type_to_subclass_list[SearchPathPlugin].remove(cls)
        p.class_name_to_class.pop(f"{cls.__module__}.{cls.__name__}", None)
assert not [c for c in p.discover(SearchPathPlugin) if getattr(c, "VERL_PDBG_CONF", False)]
from verl_pdbg_conf.verl_facts.compose import compose_verl
r = compose_verl([], ["+profiler=precision_debugger_l1"])
assert r.findings == [], r.findings
print(r.document.data["global_profiler"]["tool"])
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg_root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "precision_debugger"
