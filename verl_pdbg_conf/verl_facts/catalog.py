"""Every verl whose facts this process can judge by, by name: the shipped releases (releases/)
and trees extracted live from a copy found on disk (source.py registers those, under a name
that carries their content's digest). Reading needs only gzip and json: no hydra, no verl."""

from __future__ import annotations

from verl_pdbg_conf.verl_facts import releases

_LIVE: dict[str, dict] = {}


def register(name: str, facts: dict) -> str:
    _LIVE[name] = facts
    return name


def known(name: str) -> bool:
    return name in _LIVE or name in releases.shipped()


def load(name: str) -> dict:
    """The facts of a live tree registered under `name`, else of the shipped release `name`."""
    facts = _LIVE.get(name)
    return facts if facts is not None else releases.load(name)


def version(name: str) -> str:
    return load(name).get("version") or name


def config_names(name: str) -> tuple[str, ...]:
    """Every config of the tree's trainer/config (`ppo_trainer`, `actor/dp_actor`, ...)."""
    return tuple(load(name)["configs"])


def primary_configs(name: str) -> tuple[str, ...]:
    """The configs at the top of the tree's trainer/config, the ones `--config-name` can name
    with verl's own `--config-path=config`."""
    return tuple(n for n in config_names(name) if "/" not in n)
