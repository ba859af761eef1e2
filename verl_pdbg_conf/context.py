"""What a check needs to know beyond the file in front of it."""

from __future__ import annotations

import functools
import os

from verl_pdbg_conf.core.record import Record, factory
from verl_pdbg_conf.verl_facts.stages import VERL_TARGETS, VerlTarget


class Options(Record):
    verl_version: str | None = None  # a key of stages.VERL_TARGETS; None: the verl that will run
    base_dir: str = factory(os.getcwd)  # where a relative config_path resolves (launch dir)
    runtime: str = "auto"  # verl | pdbg | auto: which runtime profiler runs in the workers
    verl_source: str | None = None  # --verl-source: a directory holding the verl package
    verl: object = None  # the source.VerlSource that judges this input (None: found from the current directory)

    @property
    def source(self):
        """The verl that judges (source.VerlSource): the one found for this input, else the one
        `python -m verl...` would import from the current directory."""
        if self.verl is None:
            from verl_pdbg_conf.verl_facts import releases, source

            shipped = self.verl_version if self.verl_version in releases.shipped() else None
            self.verl = source.for_cwd(self.verl_source, shipped)
        return self.verl

    def for_source(self, verl) -> "Options":
        return self.replace(verl=verl)

    msprobe_version: str | None = None  # a shipped msprobe release; None: the judging release

    @property
    def msprobe_release(self) -> tuple[str, str]:
        """(release, how it was chosen): the msprobe release whose measured behaviour judges config.json."""
        from verl_pdbg_conf.checks.msprobe_releases import judging

        return judging(self.msprobe_version)

    @property
    def release(self) -> tuple[str, str]:
        """(facts name, how it was chosen): the verl whose config tree and facts judge."""
        s = self.source
        return s.facts, s.where

    @property
    def target(self) -> VerlTarget:
        if self.verl_version and self.verl_version not in VERL_TARGETS:
            raise KeyError(self.verl_version)
        if self.verl_version == "legacy-workers":
            return VERL_TARGETS[self.verl_version]
        s = self.source
        return _named(s.facts, s.label)


@functools.lru_cache(maxsize=64)
def _named(facts: str, label: str) -> VerlTarget:
    """The target of `facts`, naming the verl found (`verl 0.5.0 (repository copy at ./verl)`)."""
    t = VERL_TARGETS[facts]
    return t if t.label == label else t.replace(label=label)


class MsprobeContext(Record):
    """How a config.json will be used: under verl, one msprobe session per stage."""

    strict: bool = False
    referenced_from: str | None = None  # the conf file whose config_path named it
    config_path_key: str | None = None  # dotted path of that config_path in the conf
    msprobe: str | None = None  # the msprobe release that judges; None: the installed or newest shipped
