"""Hydra SearchPathPlugin: makes verl_pdbg_conf's config groups (`+profiler=precision_debugger_l1`,
...) visible to every Hydra app once the package is installed, verl's main_ppo included.

Hydra imports this module at every start of every app, so it stays cheap: it imports only
Hydra modules Hydra has already loaded and the standard library; it never imports
verl_pdbg_conf (the package is located with importlib.util.find_spec, which does not import
it), verl, torch or Ray.

When Hydra builds its search path it also registers, in Hydra's ConfigStore, one node per
msprobe config.json shipped in verl_pdbg_conf/conf/msprobe/:

    verl_pdbg_conf/config_path/<stem> = {config_path: <absolute path of <stem>.json>}

The profiler options select one in their defaults list. The composed config then holds a
literal absolute config_path: nothing is left to resolve in verl's TaskRunner or its workers
(no custom resolver).

For the rollout (`+profiler=precision_debugger_rollout`) it also registers, per msprobe config.json,

    verl_pdbg_conf/rollout_env/<stem> = {VERL_PDBG_CONF_ROLLOUT: '{"config_path": <absolute path>,
                                          "save_path": "outputs/precision_debugger", "steps": [1]}'}

selected at ray_kwargs.ray_init.runtime_env.env_vars: the settings this package's vLLM plugin reads,
as a literal string. It cannot be an interpolation of global_profiler: verl's main_ppo hands
runtime_env to ray.init unresolved (OmegaConf.to_container without resolve). save_path and steps are
the rollout option's own; the validator's `rollout-env` says when an override made them differ.
"""

from __future__ import annotations

import importlib.util
import os

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PROVIDER = "verl-pdbg-conf"
CONFIG_PATH_GROUP = "verl_pdbg_conf/config_path"
ROLLOUT_ENV_GROUP = "verl_pdbg_conf/rollout_env"
ROLLOUT_ENV = "VERL_PDBG_CONF_ROLLOUT"
ROLLOUT_SAVE_PATH = "outputs/precision_debugger"  # conf/profiler/precision_debugger_rollout.yaml's
ROLLOUT_STEPS = [1]  # idem


def conf_dir() -> str | None:
    """Absolute path of verl_pdbg_conf/conf, located without importing the package."""
    try:
        spec = importlib.util.find_spec("verl_pdbg_conf")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    # Next to this plugin (same site-packages, or the source tree) when find_spec finds nothing.
    roots.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                              "verl_pdbg_conf"))
    for root in roots:
        d = os.path.join(os.path.abspath(root), "conf")
        if os.path.isdir(os.path.join(d, "profiler")):
            return d
    return None


def register_config_paths(conf: str) -> list[str]:
    """Store verl_pdbg_conf/config_path/<stem> for every conf/msprobe/*.json; returns the stems."""
    from hydra.core.config_store import ConfigStore

    msprobe = os.path.join(conf, "msprobe")
    try:
        names = sorted(n for n in os.listdir(msprobe) if n.endswith(".json"))
    except OSError:
        return []
    import json

    cs = ConfigStore.instance()
    for n in names:
        path = os.path.join(msprobe, n)
        cs.store(group=CONFIG_PATH_GROUP, name=n[:-len(".json")], node={"config_path": path}, provider=PROVIDER)
        settings = json.dumps({"config_path": path, "save_path": ROLLOUT_SAVE_PATH, "steps": ROLLOUT_STEPS})
        cs.store(group=ROLLOUT_ENV_GROUP, name=n[:-len(".json")], node={ROLLOUT_ENV: settings}, provider=PROVIDER)
    return [n[:-len(".json")] for n in names]


class VerlPdbgConfSearchPathPlugin(SearchPathPlugin):
    VERL_PDBG_CONF = True  # marker: Hydra re-executes plugin modules, so class identity is not stable

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        conf = conf_dir()
        if conf is None:
            return
        url = "file://" + conf
        if not any(e.path == url for e in search_path.get_path()):
            search_path.append(provider=PROVIDER, path=url)
        register_config_paths(conf)
