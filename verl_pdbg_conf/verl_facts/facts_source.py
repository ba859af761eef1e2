"""A Hydra ConfigSource that serves one verl release's extracted config tree, so that real
Hydra composes verl's configs without verl installed (`verl-facts://<release>` on the search
path, where `file://.../verl/trainer/config` would be).

Why a ConfigSource and not files written to a cache directory: Hydra's FileConfigSource reads a
file's `# @package` header and then builds the node with `OmegaConf.load`, i.e.
`OmegaConf.create(<object from OmegaConf's YAML loader>)`; this source hands Hydra the same
header and `OmegaConf.create(<the same object, stored>)`, so everything after that (defaults
lists, packages, overrides, errors, listing of group options) is Hydra's own code on identical
input, with nothing written to disk and nothing re-serialised to YAML. tests/hydra/
test_release_facts.py checks it against Hydra on verl's real installed tree."""

from __future__ import annotations

import os
from typing import List, Optional

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from omegaconf import OmegaConf

from verl_pdbg_conf.verl_facts import catalog
from verl_pdbg_conf.verl_facts.encoding import decode

SCHEME = "verl-facts"
_REGISTRY: dict[str, "_Tree"] = {}  # search path name (a release, a live tree) -> its decoded tree


class _Tree:
    def __init__(self, facts: dict):
        self.configs = {}
        for name, entry in facts["configs"].items():
            body = decode(entry["body"])
            if "defaults" in entry:  # put the defaults list back where the file had it
                items = list(body.items()) if isinstance(body, dict) else []
                items.insert(entry.get("defaults_at", 0), ("defaults", decode(entry["defaults"])))
                body = dict(items)
            header = {"package": entry.get("package"), **entry.get("header", {})}
            self.configs[name] = (body, header)
        self.groups = set(facts["groups"]) | {""}
        children: dict = {}
        for name in list(self.configs) + [g for g in self.groups if g]:
            children.setdefault(os.path.dirname(name), set()).add(os.path.basename(name))
        self.children = children


def register(name: str, facts: dict) -> str:
    """Serve `facts` (facts being extracted) at `verl-facts://<name>`."""
    _REGISTRY[name] = _Tree(facts)
    return f"{SCHEME}://{name}"


def tree_for(name: str) -> "_Tree":
    if name not in _REGISTRY:
        _REGISTRY[name] = _Tree(catalog.load(name))
    return _REGISTRY[name]


def _norm(path: str) -> str:
    """`critic/../engine/fsdp` -> `engine/fsdp`, as the file system resolves it for a directory."""
    path = os.path.normpath(path.strip("/")) if path.strip("/") else ""
    return "" if path == "." else path


class VerlFactsConfigSource(ConfigSource):
    """verl's trainer/config of one release or live tree, from its facts (catalog.py)."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def _tree(self) -> Optional[_Tree]:
        try:
            return tree_for(self.path)
        except (OSError, KeyError):
            return None

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._normalize_file_name(config_path)[:-len(".yaml")]
        tree = self._tree()
        if tree is None or _norm(name) not in tree.configs:
            raise ConfigLoadError(f"Config not found : {self.full_path()}/{name}.yaml")
        body, header = tree.configs[_norm(name)]
        # What OmegaConf.load does with the object its YAML loader returned.
        cfg = OmegaConf.create() if body is None else OmegaConf.create(body)
        return ConfigResult(config=cfg, path=self.full_path(), provider=self.provider, header=dict(header))

    def available(self) -> bool:
        return self._tree() is not None

    def is_group(self, config_path: str) -> bool:
        tree = self._tree()
        return tree is not None and _norm(config_path) in tree.groups

    def is_config(self, config_path: str) -> bool:
        tree = self._tree()
        name = self._normalize_file_name(config_path)[:-len(".yaml")]
        return tree is not None and _norm(name) in tree.configs

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        tree = self._tree()
        files: List[str] = []
        for child in (tree.children.get(_norm(config_path), ()) if tree else ()):
            # as FileConfigSource: a directory is a group, `<name>.yaml` a config
            rel = f"{_norm(config_path)}/{child}" if _norm(config_path) else child
            if rel in tree.groups and results_filter in (None, ObjectType.GROUP):
                files.append(child)
            if rel in tree.configs and results_filter in (None, ObjectType.CONFIG):
                files.append(child)
        return sorted(set(files))


def ensure_registered() -> None:
    from hydra.core.plugins import Plugins

    Plugins.instance().register(VerlFactsConfigSource)


def compose_with_facts(facts: dict, config_name: str, overrides: list):
    """Compose `config_name` of `facts` with Hydra (used by the extractor, before the facts are
    written)."""
    from hydra import compose

    from verl_pdbg_conf.verl_facts.hydra_session import hydra_session

    ensure_registered()
    main = register(f"extracting-{facts.get('digest') or facts['version']}", facts)
    with hydra_session(main):
        return compose(config_name, overrides=list(overrides))
