"""Shared helpers for the Hydra tests: verl 0.9.1's installed config tree, located without
importing verl, and where the verl_pdbg_conf under test lives (installed or source tree)."""

from __future__ import annotations

import importlib.util
import os

import pytest

OPTIONS = ("precision_debugger_l0", "precision_debugger_l1", "precision_debugger_tensor",
           "precision_debugger_l0_critic", "precision_debugger_l1_critic", "precision_debugger_tensor_critic",
           "precision_debugger_rollout")
ROLES = ("actor_rollout_ref.actor.profiler", "actor_rollout_ref.ref.profiler",
         "actor_rollout_ref.rollout.profiler", "critic.profiler")
PD = "global_profiler.global_tool_config.precision_debugger"


def verl_dir() -> str | None:
    spec = importlib.util.find_spec("verl")
    if spec is None:
        return None
    return list(spec.submodule_search_locations)[0]


@pytest.fixture(scope="session")
def verl_config_dir() -> str:
    d = verl_dir()
    if d is None or not os.path.isdir(os.path.join(d, "trainer", "config")):
        pytest.skip("verl is not installed")
    return os.path.join(d, "trainer", "config")


@pytest.fixture(scope="session")
def pkg_root() -> str:
    """The sys.path entry that holds the verl_pdbg_conf under test (site-packages or the checkout)."""
    import verl_pdbg_conf

    return os.path.dirname(os.path.dirname(os.path.abspath(verl_pdbg_conf.__file__)))


def sel(data, dotted: str):
    for part in dotted.split("."):
        data = data[part]
    return data
