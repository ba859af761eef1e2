"""Build steps of this project's own (setuptools reads them through pyproject.toml's cmdclass).

An editable install (`pip install -e .`) compiles the package's bytecode in place, as pip compiles
a regular install's: where PYTHONDONTWRITEBYTECODE is set, Python would otherwise compile every
module the validator imports on every run, about half of a pre-flight check's start-up. The
bytecode is checked against each source's time stamp, so an edited module is compiled afresh."""

import compileall
import os

from setuptools.command.build_py import build_py as _build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class build_py(_build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            for package in ("verl_pdbg_conf", "hydra_plugins"):
                compileall.compile_dir(os.path.join(ROOT, package), quiet=1)
