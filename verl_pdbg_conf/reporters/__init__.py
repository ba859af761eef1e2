"""Reporters turn a Report into text. Each is a function (report) -> str, found by name; a
reporter's module is imported when it is asked for (one run prints one format)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

_MODULES = {"text": "text", "json": "json_", "github": "github", "sarif": "sarif"}


class _Reporters(Mapping):
    def __getitem__(self, name: str):
        return importlib.import_module(f"verl_pdbg_conf.reporters.{_MODULES[name]}").render

    def __iter__(self):
        return iter(_MODULES)

    def __len__(self):
        return len(_MODULES)


REPORTERS: Mapping = _Reporters()  # name -> render(report) -> str
