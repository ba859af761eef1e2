"""What each mindstudio-probe (msprobe) release does with a config.json under verl, shipped
as data (`msprobe-<version>.json.gz`, measured by `extract.py` on the real release), and
which release judges a run.

Reading them needs only gzip and json: no torch, no msprobe."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
DIST = "mindstudio-probe"
_NAME = re.compile(r"^msprobe-(.+)\.json\.gz$")


@functools.lru_cache(maxsize=None)
def shipped() -> tuple[str, ...]:
    """The releases whose facts ship with this package, oldest first."""
    from verl_pdbg_conf.verl_facts.releases import versions_in

    return versions_in(HERE, _NAME)


def newest() -> str:
    return shipped()[-1]


@functools.lru_cache(maxsize=None)
def load(version: str) -> dict:
    """One release's facts (format: see extract.py), each case with its pairs (cases.py)."""
    from verl_pdbg_conf.checks.msprobe_releases.cases import case_pairs, matrix, pairs

    with gzip.open(os.path.join(HERE, f"msprobe-{version}.json.gz"), "rt", encoding="utf-8") as f:
        facts = json.load(f)
    extra = value_specs(version)
    keys = None
    for c in facts["cases"]:
        c["pairs"], c["strict"] = case_pairs(c["config"], extra), pairs(c["config"], extra)
        if "key" not in c:  # where a finding points: the matrix's word (stored by extract.py since the vocabulary)
            keys = keys or {m["id"]: m["key"] for m in matrix()}
            c["key"] = keys.get(c["id"], "")
    return facts


@functools.lru_cache(maxsize=None)
def vocabulary(version: str) -> dict | None:
    """One release's config.json vocabulary (`msprobe-<version>.vocab.json`, see extract_vocab.py):
    the keys each part is read with and the checks run on them; None when none ships."""
    path = os.path.join(HERE, f"msprobe-{version}.vocab.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def value_specs(version: str) -> dict:
    """{path: spec} of every key this release reads, {"enum": [...]} where it checks the value
    against a list: the paths and value shapes (cases.py) of keys the newest schema does not know."""
    from verl_pdbg_conf.checks.msprobe_releases.vocab import enums

    v = vocabulary(version)
    if not v:
        return {}
    out: dict = {f"{part}.{k}" if part else k: {} for part, spec in v["parts"].items() for k in spec["keys"]}
    out.update({p: {"enum": e} for p, e in enums(v).items()})
    return out


def installed_version(dirs=None) -> str | None:
    """The installed mindstudio-probe's version, from its dist-info metadata (not imported);
    `dirs` are the directories to look in (default: sys.path)."""
    from verl_pdbg_conf.verl_facts.releases import dist_info_version, installed_version as installed

    return installed(DIST) if dirs is None else dist_info_version(dirs, DIST)


def judging(requested: str | None = None, dirs=None) -> tuple[str, str]:
    """(release, why): the msprobe release whose facts judge, and how it was chosen.

    `requested` (from --msprobe-version) wins; else the installed mindstudio-probe when its
    facts ship; else the newest shipped release, saying so."""
    if requested:
        return requested, "--msprobe-version"
    inst = installed_version(dirs)
    if inst in shipped():
        return inst, "installed"
    if inst:
        return newest(), f"newest shipped; the installed mindstudio-probe {inst} has no shipped facts"
    return newest(), "newest shipped; mindstudio-probe is not installed"
