"""core/fast_schema.py's yes/no verdict against jsonschema's, on the shipped schemas: it may only
say "valid" when jsonschema finds no error (a wrong "valid" would hide findings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_pdbg_conf.core.fast_schema import is_valid
from verl_pdbg_conf.core.schema import load_schema, validator

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = ["msprobe-config", "verl-profiler"]
FILES = sorted((REPO / "tests" / "examples" / "msprobe").glob("*/*.json")) + \
    sorted((REPO / "verl_pdbg_conf" / "conf" / "msprobe").glob("*.json"))
FILES = [f for f in FILES if not f.name.endswith(".expect.json")]


def agree(name: str, instance) -> None:
    expected = not list(validator(name).iter_errors(instance))
    got = is_valid(load_schema(name), instance)
    assert got in (expected, None), (name, instance, expected)


def test_every_example_file_gets_jsonschemas_verdict():
    assert len(FILES) > 50
    decided = 0
    for f in FILES:
        try:
            data = json.loads(f.read_text())
        except ValueError:
            continue
        agree("msprobe-config", data)
        decided += is_valid(load_schema("msprobe-config"), data) is not None
    assert decided == len([f for f in FILES if _loads(f)])  # the shipped schema uses only known keywords


def _loads(f: Path) -> bool:
    try:
        json.loads(f.read_text())
        return True
    except ValueError:
        return False


def test_the_valid_shipped_configs_are_valid_without_jsonschema():
    for f in sorted((REPO / "verl_pdbg_conf" / "conf" / "msprobe").glob("*.json")):
        assert is_valid(load_schema("msprobe-config"), json.loads(f.read_text())) is True, f.name


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False)
                    | st.sampled_from(["", "L0", "L1", "mix", "statistics", "tensor", "all", "0-3", "1,2", "x"]),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                        ["task", "level", "rank", "step", "scope", "list", "data_mode", "summary_mode",
                         "async_dump", "dump_path", "extra"]), c, max_size=3), max_leaves=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from([f for f in FILES if _loads(f)]), path_pick=st.integers(0, 50), value=JSON,
       drop=st.booleans())
def test_mutated_configs_agree_with_jsonschema(base, path_pick, value, drop):
    data = json.loads(base.read_text())
    if not isinstance(data, dict):
        agree("msprobe-config", data)
        return
    nodes = [(data, k) for k in data]
    for v in list(data.values()):
        if isinstance(v, dict):
            nodes += [(v, k) for k in v]
    if nodes:
        parent, key = nodes[path_pick % len(nodes)]
        if drop:
            del parent[key]
        else:
            parent[key] = value
    agree("msprobe-config", data)


@pytest.mark.parametrize("instance", [True, 1, 1.0, "x", None, [], {}, {"tool": "precision_debugger"}])
@pytest.mark.parametrize("name", SCHEMAS)
def test_odd_instances(name, instance):
    agree(name, instance)
