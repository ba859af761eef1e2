"""Per-release verl facts shipped as data (`verl-<version>.json.gz`, written by `extract.py`
from the real wheels), and which release judges a run.

Reading them needs only gzip and json: no hydra, no verl."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
_NAME = re.compile(r"^verl-(.+)\.json\.gz$")


def version_key(version: str):
    """Orders release numbers as numbers: 8.1.2 < 26.0.0 < 26.1.0.post1 < 26.2.0."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+-]", version))


def versions_in(directory: str, name: re.Pattern) -> tuple[str, ...]:
    """The versions of the files in `directory` whose name matches `name` (group 1), oldest first."""
    found = [m.group(1) for m in map(name.match, os.listdir(directory)) if m]
    return tuple(sorted(found, key=version_key))


@functools.lru_cache(maxsize=None)
def shipped() -> tuple[str, ...]:
    """The releases whose facts ship with this package, oldest first."""
    return versions_in(HERE, _NAME)


def newest() -> str:
    return shipped()[-1]


def read_json_gz(path: str):
    """A shipped facts file: gzipped JSON (verl's and msprobe's releases alike)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def load(version: str) -> dict:
    """One release's facts (format: see extract.py)."""
    return read_json_gz(os.path.join(HERE, f"verl-{version}.json.gz"))


def installed_version(dist: str = "verl") -> str | None:
    """The installed version of distribution `dist` (verl by default), from its package
    metadata; the package is not imported.

    The `<dist>-X.dist-info` directories on sys.path are read directly (importing
    importlib.metadata costs about 50 ms of a validator start-up); importlib.metadata answers
    only when the package is importable without such a directory (an editable install, an egg)."""
    found = dist_info(dist)
    return found[1] if found else _metadata_version(dist)


def dist_info_version(dirs, dist: str) -> str | None:
    """The version in the first `<dist>-X.dist-info` found in `dirs`, from its METADATA."""
    found = dist_info(dist, dirs)
    return found[1] if found else None


def dist_info(dist: str = "verl", dirs=None) -> tuple[str, str] | None:
    """(directory, version) of the first `<dist>-X.dist-info` in `dirs` (default: sys.path), its
    version from its METADATA (else its name)."""
    listing = _listing if dirs is None else _listdir
    if dirs is None:
        import sys

        dirs = sys.path
    name = "[-_.]".join(re.escape(p) for p in re.split(r"[-_.]+", dist))  # dist-info names normalise - to _
    rx = re.compile(r"^" + name + r"-([^-]+)\.dist-info$", re.I)
    for entry in dirs:
        for name in listing(entry):
            m = rx.match(name) if name[-10:].lower() == ".dist-info" else None
            if m:
                path = os.path.join(entry or ".", name)
                try:
                    with open(os.path.join(path, "METADATA"), encoding="utf-8") as f:
                        for line in f:
                            if line.startswith("Version:"):
                                return path, line.split(":", 1)[1].strip()
                            if not line.strip():
                                break
                except OSError:
                    pass
                return path, m.group(1)
    return None


def _listdir(entry: str) -> list[str]:
    try:
        return os.listdir(entry or ".")
    except OSError:
        return []


@functools.lru_cache(maxsize=None)
def _listing(entry: str) -> list[str]:
    """The names in a sys.path entry, listed once per process: a run looks up verl and
    mindstudio-probe (several times) in the same site-packages and stdlib directories."""
    return _listdir(entry)


_MODULES = {"verl": "verl", "mindstudio-probe": "msprobe"}


def _metadata_version(dist: str) -> str | None:
    import importlib.util

    try:
        if importlib.util.find_spec(_MODULES.get(dist, dist)) is None:
            return None
    except (ImportError, ValueError):
        return None
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except Exception:  # not found, or a broken dist-info: no installed release to judge by
        return None


@functools.lru_cache(maxsize=None)
def judging(requested: str | None = None) -> tuple[str, str]:
    """(release, why): the release whose facts judge, and how it was chosen.

    `requested` (a shipped release, from --verl-version) wins; else the installed verl when its
    facts ship; else the newest shipped release."""
    if requested:
        return requested, "--verl-version"
    inst = installed_version()
    if inst in shipped():
        return inst, "installed"
    if inst:
        return newest(), f"newest shipped; the installed verl {inst} has no shipped facts"
    return newest(), "newest shipped; verl is not installed"


def config_names(version: str) -> tuple[str, ...]:
    """Every config of the release's trainer/config (`ppo_trainer`, `actor/dp_actor`, ...)."""
    return tuple(load(version)["configs"])


def primary_configs(version: str) -> tuple[str, ...]:
    """The configs at the top of the release's trainer/config, the ones `--config-name` can name
    with verl's own `--config-path=config`."""
    return tuple(n for n in config_names(version) if "/" not in n)
