"""Fixtures for the runtime tests; the subprocess helpers are in runtime_helpers.py."""

import pytest


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory, request) -> str:
    return str(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
