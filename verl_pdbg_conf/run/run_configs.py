"""The effective verl configs behind the CLI's inputs, for `--plan` and `--inspect`: each conf
YAML file, each launch script invocation, or the composed `--verl` config, as a resolved
Document plus the Options to judge it with (a launch script that `cd`s moves the base dir)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.document import Document


@dataclass
class RunConfig:
    source: str  # file, or file:line of a launch script invocation, or "verl composed config"
    document: Document
    options: Options


def run_configs(files: list[str], options: Options, *, verl: bool = False, overrides: list | None = None,
                config_name: str = "ppo_trainer") -> list[RunConfig]:
    """Configs that can be planned or inspected (JSON files are only msprobe configs: skipped)."""
    out: list[RunConfig] = []
    if verl:
        from verl_pdbg_conf.verl_facts.compose import compose_verl

        result = compose_verl(list(files), list(overrides or []), config_name=config_name, release=options.release[0])
        if result.document is not None:
            out.append(RunConfig("composed verl config" + (f" ({', '.join(files)})" if files else ""),
                                 result.document, options))
        return out
    from verl_pdbg_conf.core import interpolation
    from verl_pdbg_conf.launch_scripts.launch_script import compose_invocation, is_launch_script, read_script
    from verl_pdbg_conf.core.loaders import load_yaml

    for f in files:
        if is_launch_script(f):
            invocations, _ = read_script(f, launch_dir=options.base_dir)
            for inv in invocations:
                composed = compose_invocation(inv, options.release[0])
                if composed.document is None:
                    continue
                opts = options.replace(base_dir=inv.cwd) if inv.cwd else options
                out.append(RunConfig(f"{f}:{inv.line}", composed.document, opts))
        elif not f.lower().endswith(".json"):
            doc = load_yaml(f)
            if doc.ok:
                interpolation.resolve(doc)
                out.append(RunConfig(f, doc, options))
    return out
