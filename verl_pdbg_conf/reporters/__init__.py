"""Reporters turn a Report into text. Each is a function (report) -> str, found by name."""

from __future__ import annotations

from typing import Callable

from verl_pdbg_conf.core.findings import Report
from verl_pdbg_conf.reporters import github, json_, sarif, text

REPORTERS: dict[str, Callable[[Report], str]] = {
    "text": text.render,
    "json": json_.render,
    "github": github.render,
    "sarif": sarif.render,
}
