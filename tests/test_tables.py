"""One table for each fact: the schemas, the known-key lists and the stage table agree
with each other and with verl 0.9.1's own code and config tree."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from verl_pdbg_conf.verl_facts.stages import IGNORED_STAGES, STAGES, TOOLS, VERL_TARGETS
from verl_pdbg_conf.verl_facts.verl_tree import (GLOBAL_PROFILER_KEYS, GLOBAL_TOOL_CONFIG_KEYS, PD_KEYS, PD_TARGET,
                                      ROLE_PROFILER_KEYS)

SCHEMAS = Path(__file__).parent.parent / "verl_pdbg_conf" / "schemas"


def verl_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def generated_ppo() -> dict:
    return yaml.safe_load((verl_dir() / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())


def test_verl_profiler_schema_stage_enum_is_the_table():
    schema = json.loads((SCHEMAS / "verl-profiler.schema.json").read_text())
    pd = schema["$defs"]["precision_debugger"]
    assert pd["properties"]["stages"]["items"]["enum"] == list(STAGES) + sorted(IGNORED_STAGES)
    assert set(pd["properties"]) == set(PD_KEYS)
    assert pd["properties"]["_target_"]["const"] == PD_TARGET
    tools = schema["properties"]["global_profiler"]["properties"]["tool"]["enum"]
    assert [t for t in tools if t] == list(TOOLS)


def test_schemas_are_valid_2020_12():
    from jsonschema import Draft202012Validator

    files = sorted(SCHEMAS.glob("*.json"))
    assert files
    for f in files:
        Draft202012Validator.check_schema(json.loads(f.read_text()))


def test_known_keys_match_verl_config_tree():
    cfg = generated_ppo()
    gp = cfg["global_profiler"]
    assert set(gp) == GLOBAL_PROFILER_KEYS
    assert set(gp["global_tool_config"]) == GLOBAL_TOOL_CONFIG_KEYS
    assert set(gp["global_tool_config"]["precision_debugger"]) | {"name"} == PD_KEYS
    assert gp["global_tool_config"]["precision_debugger"]["_target_"] == PD_TARGET
    for path in VERL_TARGETS["0.9.1"].role_profilers:
        node = cfg
        for part in path.split("."):
            node = node[part]
        assert set(node) == ROLE_PROFILER_KEYS, path
    assert "profiler" not in cfg.get("reward_model", {}), "0.9.1 has no reward_model.profiler"


def test_stage_table_matches_verl_runtime():
    src = (verl_dir() / "utils" / "profiler" / "precision_debugger_profile.py").read_text()
    ns: dict = {}
    # Read verl's literal tables without importing verl (which imports torch and ray).
    import ast

    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("_STAGE_TO_ROLE", "_MODEL_ATTRS_BY_ROLE",
                                                                     "_SKIP_STAGES"):
            ns[node.targets[0].id] = ast.literal_eval(node.value)
    assert set(ns["_STAGE_TO_ROLE"]) == set(STAGES)
    assert ns["_SKIP_STAGES"] == set(IGNORED_STAGES)
    for stage, role in ns["_STAGE_TO_ROLE"].items():
        ours = STAGES[stage]
        assert ours.role == {"reward_model": "reward"}.get(role, role)
        # every attribute verl 0.9.1 tries, we try too
        assert set(ns["_MODEL_ATTRS_BY_ROLE"][role]) <= set(ours.models), stage


def test_fired_stages_match_verl_annotations():
    """The stages 0.9.1 runs are exactly the ones its engine workers annotate."""
    import re

    src = (verl_dir() / "workers" / "engine_workers.py").read_text()
    annotated = set(re.findall(r'DistProfiler\.annotate\([^)]*role="(\w+)"', src))
    target = VERL_TARGETS["0.9.1"]
    assert {a for a in annotated if a in STAGES} == set(target.fired)
    assert {a for a in annotated if a not in STAGES} == set(target.aliases)


def test_tool_list_matches_distprofiler():
    src = (verl_dir() / "utils" / "profiler" / "profile.py").read_text()
    import re

    assert set(re.findall(r'self\._tool == "(\w+)"', src)) == set(TOOLS)
