"""A Hydra session on one main config source, usable inside a running Hydra app."""

from __future__ import annotations


class hydra_session:
    """A Hydra session whose main config source is `main` (an absolute directory, or a
    `verl-facts://<release>` source), like initialize_config_dir; it also works inside a
    running Hydra app: the app's GlobalHydra (and version base) are set aside and put back."""

    def __init__(self, main: str):
        self.main = main

    def __enter__(self):
        from hydra._internal.hydra import Hydra
        from hydra._internal.utils import create_config_search_path
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.singleton import Singleton
        from hydra.version import VersionBase, setbase

        self._saved = Singleton._instances.pop(GlobalHydra, None)
        self._base = VersionBase.instance().version_base
        setbase(None)
        Hydra.create_main_hydra2(task_name="app", config_search_path=create_config_search_path(self.main))
        return self

    def __exit__(self, *exc):
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.singleton import Singleton
        from hydra.version import VersionBase

        Singleton._instances.pop(GlobalHydra, None)
        if self._saved is not None:
            Singleton._instances[GlobalHydra] = self._saved
        VersionBase.instance().version_base = self._base  # as it was, without Hydra's warnings
        return False
