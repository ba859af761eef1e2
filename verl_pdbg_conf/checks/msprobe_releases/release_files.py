"""The shipped facts files of the msprobe releases (`msprobe-<version>.json.gz`, and parts in
files of their own, `msprobe-<version>.<part>.json`), read one release and one part at a time.
The package's __init__ gives the same names; this module imports nothing of this subpackage, so
that the modules reading parts (case_index.py) are imported by `load` without a circle."""

from __future__ import annotations

import functools
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
FACTS_NAME = re.compile(r"^msprobe-(.+)\.json\.gz$")


@functools.lru_cache(maxsize=None)
def shipped() -> tuple[str, ...]:
    """The releases whose facts ship with this package, oldest first."""
    from verl_pdbg_conf.verl_facts.releases import versions_in

    return versions_in(HERE, FACTS_NAME)


def newest() -> str:
    return shipped()[-1]


@functools.lru_cache(maxsize=None)
def _stored(version: str) -> dict:
    from verl_pdbg_conf.verl_facts.releases import read_json_gz

    return read_json_gz(os.path.join(HERE, f"msprobe-{version}.json.gz"))


@functools.lru_cache(maxsize=None)
def load_part(version: str, part: str):
    """One part of release `version`'s facts as stored, nothing derived from it and no other
    release read: a top-level key of `msprobe-<version>.json.gz` ("version", "requires_python",
    "requires_dist", "api", "cases"; format: see extract.py; the file is read once), else a part
    shipped in a file of its own, `msprobe-<version>.<part>.json`. KeyError when the release
    has no such part. The validator reads parts; the cases through case_index.py."""
    facts = _stored(version)
    if part in facts:
        return facts[part]
    try:
        with open(os.path.join(HERE, f"msprobe-{version}.{part}.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise KeyError(f"msprobe {version} has no facts part {part!r}") from None
