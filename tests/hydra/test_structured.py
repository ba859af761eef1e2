"""Structured configs kept in step with verl's PrecisionDebuggerToolConfig (read from verl's
source without importing verl), verl's composed tree, the stage table and the JSON schemas."""

from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys
from dataclasses import fields

import pytest

from verl_pdbg_conf.verl_facts import stages, structured
from verl_pdbg_conf.verl_facts.structured import (GlobalProfilerConfig, PrecisionDebuggerToolConfig, RoleProfilerConfig,
                                       VerlProfilingConfig)

from conftest import PD, ROLES, sel, verl_dir


def _verl_dataclass_fields(cls_name: str) -> dict:
    """Field name -> default source text of a dataclass in verl/utils/profiler/config.py."""
    d = verl_dir()
    if d is None:
        pytest.skip("verl is not installed")
    src = open(os.path.join(d, "utils", "profiler", "config.py")).read()
    for node in ast.parse(src).body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            out = {}
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    out[st.target.id] = ast.unparse(st.value) if st.value is not None else None
            return out
    raise AssertionError(f"{cls_name} not found in verl")


def test_module_imports_neither_hydra_nor_verl():
    code = ("import sys; import verl_pdbg_conf.verl_facts.structured as s; "
            "bad = [m for m in ('hydra', 'verl', 'omegaconf', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_precision_debugger_fields_match_verl():
    verl_fields = _verl_dataclass_fields("PrecisionDebuggerToolConfig")
    ours = {f.name: f for f in fields(PrecisionDebuggerToolConfig)}
    assert set(ours) == set(verl_fields) | {"_target_"}
    for name, default_src in verl_fields.items():
        assert ast.literal_eval(default_src) == ours[name].default, name
    assert ours["steps"].metadata.get("deprecated") is True


def test_defaults_match_verl_composed_tree():
    from verl_pdbg_conf.verl_facts.compose import compose_verl

    r = compose_verl([], [])
    assert r.findings == []
    data = r.document.data
    gp = data["global_profiler"]
    for f in fields(GlobalProfilerConfig):
        if f.name == "global_tool_config":
            continue
        assert f.name in gp, f.name
        assert gp[f.name] == structured.defaults(GlobalProfilerConfig)[f.name], f.name
    pd = sel(data, PD)
    pd_defaults = structured.defaults(PrecisionDebuggerToolConfig)
    assert set(pd) == set(pd_defaults) - {"name"}  # verl's YAML has no `name`
    for k, v in pd.items():
        assert v == pd_defaults[k], k
    role_defaults = structured.defaults(RoleProfilerConfig)
    for role in ROLES:
        prof = sel(data, role)
        for f in fields(RoleProfilerConfig):
            assert f.name in prof, (role, f.name)
        assert prof["enable"] is role_defaults["enable"]
        assert prof["all_ranks"] is role_defaults["all_ranks"] and prof["ranks"] == role_defaults["ranks"]
        rpd = prof["tool_config"]["precision_debugger"]
        assert set(rpd) == set(pd_defaults) - {"name"}, role


def test_in_step_with_the_stage_table():
    assert structured.role_profiler_paths() == stages.ROLE_PROFILERS
    assert structured.role_profiler_paths(VerlProfilingConfig) == structured.ROLE_PROFILER_PATHS
    stages_field = next(f for f in fields(PrecisionDebuggerToolConfig) if f.name == "stages")
    assert stages_field.metadata["choices"] == tuple(stages.STAGES)
    assert structured.KNOWN_STAGE_NAMES == set(stages.STAGES) | stages.IGNORED_STAGES
    tool_field = next(f for f in fields(GlobalProfilerConfig) if f.name == "tool")
    assert tool_field.metadata["choices"] == stages.TOOLS
    # every stage of a role verl 0.9.1 builds is gated by a role profiler section the tree has
    for st in stages.STAGES.values():
        if st.role != "reward":
            assert st.profiler in structured.ROLE_PROFILER_PATHS, st


def _schema_defs():
    import verl_pdbg_conf

    d = os.path.join(os.path.dirname(verl_pdbg_conf.__file__), "schemas")
    found = {}
    for f in glob.glob(os.path.join(d, "*.json")):
        with open(f) as fh:
            s = json.load(fh)
        for name, node in (s.get("$defs") or {}).items():
            found[(os.path.basename(f), name)] = node
        for name, node in (s.get("properties") or {}).items():
            found[(os.path.basename(f), name)] = node
    return found


def test_in_step_with_the_json_schemas():
    defs = _schema_defs()
    pd_schemas = [n for (f, name), n in defs.items() if name == "precision_debugger" and "properties" in n]
    if not pd_schemas:
        pytest.skip("no JSON schema describes precision_debugger yet")
    for node in pd_schemas:
        assert set(node["properties"]) == {f.name for f in fields(PrecisionDebuggerToolConfig)}
        enum = node["properties"]["stages"]["items"]["enum"]
        assert set(enum) == structured.KNOWN_STAGE_NAMES
        for f in fields(PrecisionDebuggerToolConfig):
            prop = node["properties"][f.name]
            if "default" in prop:
                assert prop["default"] == f.default, f.name
    for (f, name), node in defs.items():
        if name == "role_profiler" and "properties" in node:
            assert set(node["properties"]) <= {x.name for x in fields(RoleProfilerConfig)}
        if name == "global_profiler" and "properties" in node:
            props = set(node["properties"])
            assert {x.name for x in fields(GlobalProfilerConfig)} - {"_target_"} <= props
            for x in fields(GlobalProfilerConfig):
                if x.name in props and "default" in node["properties"][x.name] and x.default is not None:
                    assert node["properties"][x.name]["default"] == x.default, x.name


def test_register_configs():
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    structured.register_configs()
    structured.register_configs()
    repo = ConfigStore.instance().repo["verl_pdbg_conf"]["schema"]
    assert set(repo) == {n + ".yaml" for n in structured.NODES}
    node = repo["precision_debugger.yaml"].node
    assert OmegaConf.to_container(node) == structured.defaults(PrecisionDebuggerToolConfig)
    # typed: a wrong type is refused
    cfg = OmegaConf.structured(PrecisionDebuggerToolConfig)
    with pytest.raises(Exception):
        cfg.strict = "maybe"
