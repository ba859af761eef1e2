"""Which of a release's measured cases can apply to a config.json, found without building the
case matrix (cases.py): each case's key is stored with the release's facts (extract.py writes
the matrix's), and its pairs (shapes.py) are worked out only for the cases whose top-level
keys the config has: a case whose pairs are all the config's sets no key the config lacks
(task and level aside: msprobe's defaults stand in for them in every config)."""

from __future__ import annotations

import functools

from verl_pdbg_conf.checks.msprobe_releases.release_files import load_part
from verl_pdbg_conf.checks.msprobe_releases.shapes import UNKNOWN, case_pairs, pairs, props
from verl_pdbg_conf.checks.msprobe_releases.vocab import value_specs

_DEFAULTED = frozenset({"task", "level"})


def _tops(config: dict) -> frozenset:
    """The config's top-level keys as pairs() names them (a key the schema lacks is UNKNOWN)."""
    known = props()
    return frozenset(k if k in known else UNKNOWN for k in config)


@functools.lru_cache(maxsize=None)
def _index(version: str) -> tuple[tuple[frozenset, int], ...]:
    """(the top-level keys a config needs for the case to apply, the case's place) per case."""
    return tuple((_tops(c["config"]) - _DEFAULTED, i) for i, c in enumerate(load_part(version, "cases")))


@functools.lru_cache(maxsize=1)
def _matrix_keys() -> dict:
    """id -> key from the matrix itself: only for facts written before keys were stored."""
    from verl_pdbg_conf.checks.msprobe_releases.cases import matrix

    return {c["id"]: c["key"] for c in matrix()}


@functools.lru_cache(maxsize=None)
def _annotated(version: str, i: int) -> dict:
    c = load_part(version, "cases")[i]
    key = c["key"] if "key" in c else _matrix_keys().get(c["id"], "")
    extra = value_specs(version)  # the release's own keys and values, as the matrix was keyed
    return dict(c, pairs=case_pairs(c["config"], extra), strict=pairs(c["config"], extra), key=key)


def cases_for(version: str, config) -> list[dict]:
    """The cases of release `version` that can apply to `config`, in the facts' order, each with
    its pairs ("pairs": what it sets, "strict": with msprobe's defaults) and "key" (where a
    finding points: the matrix's word, not the file's)."""
    if not isinstance(config, dict):
        return all_cases(version)
    have = _tops(config)
    return [_annotated(version, i) for need, i in _index(version) if need <= have]


def all_cases(version: str) -> list[dict]:
    return [_annotated(version, i) for _, i in _index(version)]
