"""What each mindstudio-probe (msprobe) release does with a config.json under verl, shipped
as data (`msprobe-<version>.json.gz`, measured by `extract.py` on the real release), and
which release judges a run.

Reading them needs only gzip and json: no torch, no msprobe. The loading API is small on
purpose: `shipped()`, `newest()`, `judging()`, `load_part(version, part)` (what a check reads:
only the judging release, only that part), `vocabulary(version)` and `value_specs(version)` and `load(version)` (everything, for tools and
tests). A validator run reads one release's facts and never builds the case matrix
(case_index.py; tests/test_imports.py checks it in a fresh process)."""

from __future__ import annotations

import functools

from verl_pdbg_conf.checks.msprobe_releases.release_files import HERE, _stored, load_part, newest, shipped  # noqa: F401
from verl_pdbg_conf.checks.msprobe_releases.vocab import value_specs, vocabulary  # noqa: F401

DIST = "mindstudio-probe"


@functools.lru_cache(maxsize=None)
def load(version: str) -> dict:
    """One release's stored facts whole, each case with its pairs and key (case_index.py):
    for tools and tests; the validator reads parts (load_part)."""
    from verl_pdbg_conf.checks.msprobe_releases.case_index import all_cases

    return dict(_stored(version), cases=all_cases(version))


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
