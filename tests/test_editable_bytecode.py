"""An editable install compiles the package's bytecode in place (build_hooks.py), as pip compiles a
regular install's, so a run with PYTHONDONTWRITEBYTECODE set reads bytecode instead of compiling
every module; a regular install leaves the source tree as it was. Real pip, a fresh venv, a copy
of the project (the checkout itself is never written to)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROJECT = ("pyproject.toml", "build_hooks.py", "MANIFEST.in", "README.md", "verl_pdbg_conf", "hydra_plugins")


def _pycs(tree: Path) -> list[Path]:
    return sorted(tree.rglob("*.pyc"))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    for name in PROJECT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    return root


def _pip(env_dir: Path, *args: str, cwd: Path):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    run = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", *args],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.slow
def test_editable_install_compiles_the_tree_and_a_run_reads_it(project, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    assert _pycs(project) == []
    _pip(env_dir, "-e", ".", cwd=project)
    cli = project / "verl_pdbg_conf" / "cli.py"
    assert Path(importlib.util.cache_from_source(str(cli))).is_file()
    assert len(_pycs(project / "verl_pdbg_conf")) >= len(list((project / "verl_pdbg_conf").rglob("*.py")))
    # a run with no bytecode written reads the tree's (python -v names the file a module's code came from)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    probe = subprocess.run([str(env_dir / "bin" / "python"), "-v", "-c", "import verl_pdbg_conf.cli"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert f"code object from '{importlib.util.cache_from_source(str(cli))}'" in probe.stderr


@pytest.mark.slow
def test_regular_install_leaves_the_tree_without_bytecode(project, tmp_path):
    for p in _pycs(project):  # what the editable test wrote
        p.unlink()
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    _pip(env_dir, ".", cwd=project)
    assert _pycs(project) == []
    site = next(env_dir.glob("lib/python*/site-packages"))
    assert (site / "verl_pdbg_conf" / "cli.py").is_file() and _pycs(site / "verl_pdbg_conf")
