"""The test session composes afresh: the on-disk composition cache (verl_facts/disk_cache.py) is
off unless a test turns it on with its own directory (tests/test_disk_cache.py)."""

import os

os.environ.setdefault("VERL_PDBG_CONF_CACHE", "off")

import pytest  # noqa: E402

import release_venvs  # noqa: E402


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Tests that need a venv of their own (marked `venvs`) run last: the venvs build meanwhile."""
    later = [item for item in items if item.get_closest_marker("venvs")]
    if later:
        items[:] = [item for item in items if not item.get_closest_marker("venvs")] + later


def pytest_collection_finish(session):
    """Start building, in the background, every venv the selected tests ask for."""
    if session.config.option.collectonly:
        return
    for item in session.items:
        mark = item.get_closest_marker("venvs")
        if mark is not None and mark.args:
            release_venvs.prebuild(*mark.args)


def pytest_sessionfinish(session):
    release_venvs.stop_builds()
