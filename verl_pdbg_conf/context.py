"""What a check needs to know beyond the file in front of it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_pdbg_conf.verl_facts.stages import VERL_TARGETS, VerlTarget


@dataclass
class Options:
    verl_version: str | None = None  # a key of stages.VERL_TARGETS; None: the judging release
    base_dir: str = field(default_factory=os.getcwd)  # where a relative config_path resolves (launch dir)
    runtime: str = "auto"  # verl | pdbg | auto: which runtime profiler runs in the workers
    msprobe_version: str | None = None  # a shipped msprobe release; None: the judging release

    @property
    def msprobe_release(self) -> tuple[str, str]:
        """(release, how it was chosen): the msprobe release whose measured behaviour judges config.json."""
        from verl_pdbg_conf.checks.msprobe_releases import judging

        return judging(self.msprobe_version)

    @property
    def release(self) -> tuple[str, str]:
        """(release, how it was chosen): the verl release whose config tree and facts judge."""
        from verl_pdbg_conf.verl_facts.releases import judging, shipped

        return judging(self.verl_version if self.verl_version in shipped() else None)

    @property
    def target(self) -> VerlTarget:
        return VERL_TARGETS[self.verl_version or self.release[0]]


@dataclass
class MsprobeContext:
    """How a config.json will be used: under verl, one msprobe session per stage."""

    strict: bool = False
    referenced_from: str | None = None  # the conf file whose config_path named it
    config_path_key: str | None = None  # dotted path of that config_path in the conf
    msprobe: str | None = None  # the msprobe release that judges; None: the installed or newest shipped
