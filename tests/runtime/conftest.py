"""Fixtures for the runtime tests; the subprocess helpers are in runtime_helpers.py."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest

import release_venvs
from runtime_helpers import RELEASES


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory, request) -> str:
    return str(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))


@pytest.fixture(scope="session")
def release_python():
    """`release_python(release)`: the interpreter whose environment holds that mindstudio-probe
    release. The suite's own release is this interpreter; the others get a venv built on first
    use from requirements/venvs/<name>.lock and kept between runs (tests/release_venvs.py)."""
    built: dict[str, str] = {}

    def python(release: str) -> str:
        if release not in built:
            name = RELEASES[release]
            if name is None:
                assert metadata.version("mindstudio-probe") == release, "the suite's venv holds another msprobe"
                built[release] = sys.executable
            else:
                try:  # built once per session at most: a failed build fails every test that needs it
                    built[release] = str(release_venvs.get(name) / "bin" / "python")
                except release_venvs.BuildError as e:
                    pytest.fail(str(e))
        return built[release]

    return python
