"""Focused tests of the msprobe config.json checks, the generic schema layer and
did-you-mean. The example folders are covered by test_msprobe_examples.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.checks.msprobe import check_msprobe
from verl_pdbg_conf.context import MsprobeContext
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.core.loaders import load_json
from verl_pdbg_conf.core.rules import RULES
from verl_pdbg_conf.core.schema import load_schema, properties, resolve, schema_findings
from verl_pdbg_conf.core.suggest import closest, did_you_mean

SCHEMA = "msprobe-config"
WEIRD = [None, True, False, 0, -1, 1.5, 10**30, "", "x", "L1", [], [None], [1.5, "a"], ["0-3", True],
         {}, {"a": [1]}, {"scope": 3, "list": {"x": 1}}, [[[]]], [{}]]


def check(data, strict=False):
    text = data if isinstance(data, str) else json.dumps(data, indent=2)
    return check_msprobe(load_json("config.json", text), MsprobeContext(strict=strict))


def rules(findings, severity=None):
    return {f.rule for f in findings if severity is None or f.severity is severity}


def internal(findings):
    return [f for f in findings if "internal error" in f.message]


# ------------------------------------------------------------------ did you mean

def test_did_you_mean_finds_close_words_and_keeps_quiet_otherwise():
    tasks = ["statistics", "tensor", "structure"]
    assert did_you_mean("statistic", tasks) == " (did you mean 'statistics'?)"
    assert did_you_mean("l1", ["L0", "L1", "mix"]) == " (did you mean 'L1'?)"
    assert did_you_mean("nan-check", ["nan_check"]) == " (did you mean 'nan_check'?)"
    assert did_you_mean("qqqqqq", tasks) == ""
    assert did_you_mean("tensor", tasks) == ""  # already right
    assert did_you_mean(None, tasks) == did_you_mean(3, tasks) == did_you_mean("", tasks) == ""
    assert closest("tenser", [None, 3, "tensor"]) == "tensor"


def test_misspelled_key_gets_did_you_mean():
    fs = check({"task": "statistics", "levle": "L1", "statistics": {"summery_mode": "md5"}})
    msgs = {f.path: f.message for f in fs if f.rule == "msprobe-unknown-key"}
    assert "did you mean 'level'" in msgs["levle"]
    assert "did you mean 'summary_mode'" in msgs["statistics.summery_mode"]
    assert all(f.severity is Severity.WARNING for f in fs if f.rule == "msprobe-unknown-key")


def test_misspelled_enum_value_gets_did_you_mean():
    fs = check({"task": "statistic", "level": "Mix", "statistics": {"summary_mode": "md"}})
    msgs = {f.path: f.message for f in fs if f.rule == "msprobe-schema"}
    assert "did you mean 'statistics'" in msgs["task"]
    assert "did you mean 'mix'" in msgs["level"]
    assert "did you mean 'md5'" in msgs["statistics.summary_mode"]


# ------------------------------------------------------------------ never raises

@pytest.mark.parametrize("key", sorted(properties(load_schema(SCHEMA), load_schema(SCHEMA))) + ["unknown_key"])
def test_wrong_type_at_every_top_level_key_never_raises(key):
    for value in WEIRD:
        fs = check({"task": "statistics", key: value})
        assert isinstance(fs, list) and not internal(fs), (key, value, internal(fs))
    tasks = ("tensor", "structure", "nan_check", "acc_check", "diff_check", "overflow_check")
    for i, value in enumerate(WEIRD):
        fs = check({"task": tasks[i % len(tasks)], "level": "L2", "async_dump": True, key: value})
        assert not internal(fs), (tasks[i % len(tasks)], key, value)


def test_wrong_type_inside_every_section_never_raises():
    schema = load_schema(SCHEMA)
    top = properties(schema, schema)
    for section in ("statistics", "tensor", "structure", "diff_check", "nan_check", "acc_check", "load"):
        for key in list(properties(schema, top[section])) + ["bogus"]:
            for i, value in enumerate(WEIRD):
                level = ("L0", "L1", "L2", "mix", "debug")[i % 5]
                data = {"task": section if section != "load" else "statistics", "level": level,
                        "async_dump": True, "risk_level": "CORE", section: {key: value}}
                fs = check(data)
                assert not internal(fs), (section, key, value, level)


@pytest.mark.parametrize("text", ["", "null", "3", "\"x\"", "[]", "[{}]", "true", "{\"a\":", "\ufeff{}",
                                  "{\"task\": \"tensor\", \"task\": 3}", "{\"step\": [\"-1\", \"1-2-3\", \"a-b\"]}"])
def test_odd_documents_never_raise(text):
    fs = check(text)
    assert isinstance(fs, list) and not internal(fs)
    assert all(f.line >= 1 and f.column >= 1 for f in fs)


def test_random_json_never_raises():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    keys = st.sampled_from(["task", "level", "step", "rank", "scope", "list", "data_mode", "summary_mode",
                            "statistics", "tensor", "load", "async_dump", "slice", "path", "modules", "zz"])
    leaves = st.none() | st.booleans() | st.integers(-3, 2_000_000) | st.floats(allow_nan=False) | \
        st.sampled_from(["statistics", "tensor", "L0", "L1", "L2", "mix", "md5", "all", "0-3", "3-1",
                         "Functional.linear.0.forward", "Module.0.Linear.forward.0", "name-regex(x)"])
    values = st.recursive(leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(keys, c, max_size=5),
                          max_leaves=25)

    @hypothesis.settings(max_examples=100, deadline=None)
    @hypothesis.given(st.dictionaries(keys, values, max_size=8))
    def run(data):
        fs = check(data)
        assert not internal(fs), internal(fs)

    run()


# ------------------------------------------------------------------ positions and paths

def test_positions_are_one_based_and_point_at_the_value():
    text = '{\n  "task": "statistics",\n  "level": "l1",\n  "statistics": {\n    "scope": ["a"]\n  }\n}\n'
    fs = check(text)
    by_path = {f.path: f for f in fs}
    assert (by_path["level"].line, by_path["level"].column) == (3, 12)
    assert (by_path["statistics.scope"].line, by_path["statistics.scope"].column) == (5, 14)
    assert all(f.file == "config.json" and f.line >= 1 and f.column >= 1 for f in fs)


def test_unknown_key_points_at_the_key_and_is_not_a_schema_error():
    fs = check('{\n  "task": "tensor",\n  "foo": 1\n}')
    assert [(f.rule, f.path, f.line, f.column) for f in fs] == [("msprobe-unknown-key", "foo", 3, 3)]


def test_dump_path_is_an_error_with_the_referencing_conf_in_the_hint():
    doc = load_json("config.json", '{"task": "statistics", "dump_path": "/tmp/x"}')
    fs = check_msprobe(doc, MsprobeContext(referenced_from="conf.yaml"))
    [f] = [f for f in fs if f.rule == "msprobe-dump-path"]
    assert f.severity is Severity.ERROR and "conf.yaml" in f.hint and f.path == "dump_path"


# ------------------------------------------------------------------ collapsing

def test_anyof_collapses_to_one_finding_per_location():
    fs = check({"rank": [True, 1.5, "x", 2_000_000], "diff_check": {"diff_nums": 0}, "task": "diff_check"})
    paths = [f.path for f in fs if f.rule == "msprobe-schema"]
    assert sorted(paths) == ["diff_check.diff_nums", "rank[0]", "rank[1]", "rank[2]", "rank[3]"]
    msg = {f.path: f.message for f in fs}
    assert "<= 1000000" in msg["rank[3]"] and "boolean" in msg["rank[0]"]


def test_a_wrong_type_hides_other_complaints_at_that_place():
    fs = check({"task": 5})
    assert [(f.rule, f.path) for f in fs] == [("msprobe-schema", "task")]
    fs = check({"task": "tensor", "async_dump": True, "tensor": {"list": "Functional.linear"}})
    assert [f.path for f in fs if f.severity is Severity.ERROR] == ["tensor.list"]


def test_cross_field_schema_rules_carry_their_own_rule_id():
    fs = check({"level": "L2", "task": "tensor", "tensor": {"list": ["a", "b"], "scope": ["x", "y"]}})
    got = {(f.rule, f.path) for f in fs if f.severity is Severity.ERROR}
    assert got == {("msprobe-cross-field", "tensor.list"), ("msprobe-cross-field", "tensor.scope")}


def test_legacy_task_gets_one_specific_finding_not_an_enum_error():
    fs = check({"task": "overflow_check"})
    assert [(f.rule, f.severity) for f in fs if f.path == "task"] == [("msprobe-task", Severity.ERROR)]
    assert "msprobe overflow_check" in fs[0].hint


# ------------------------------------------------------------------ verl integration rules

@pytest.mark.parametrize("step, severity", [([], None), (None, None), ([0], None), (["0"], None),
                                            ([1], Severity.ERROR), (["1-3"], Severity.ERROR),
                                            ([0, 1], Severity.WARNING), (["0-2"], Severity.WARNING)])
def test_step_filter_under_one_session_per_stage(step, severity):
    fs = [f for f in check({"step": step}) if f.rule == "msprobe-step-filter"]
    assert [f.severity for f in fs] == ([severity] if severity else [])


def test_strict_changes_what_a_construction_error_does():
    lax = [f for f in check({"task": "acc_check"}) if f.rule == "msprobe-task"][0]
    strict = [f for f in check({"task": "acc_check"}, strict=True) if f.rule == "msprobe-task"][0]
    assert "no stage is dumped" in lax.message and "run stops" in strict.message


@pytest.mark.parametrize("data, rule, severity", [
    ({"level": "debug"}, "msprobe-level", Severity.ERROR),
    ({"level": "L2", "task": "tensor", "tensor": {"list": ["Functional.linear.0.forward"]}}, "msprobe-level",
     Severity.WARNING),
    ({"level": "mix"}, "msprobe-level", Severity.INFO),
    ({"task": "nan_check"}, "msprobe-task", Severity.WARNING),
    ({"task": "structure", "level": "L1"}, "msprobe-cross-field", Severity.WARNING),
    ({"dump_enable": False}, "msprobe-dump-disabled", Severity.ERROR),
    ({"dump_enable": True}, "msprobe-dump-disabled", Severity.INFO),
    ({"load": {"path": ".", "modules": ["Module.a.B.forward.0"]}}, "msprobe-dump-disabled", Severity.ERROR),
    ({"load": {"path": ".", "modules": ["Module.a.B.forward.0"], "dump_after_load": True}},
     "msprobe-cross-field", Severity.WARNING),
])
def test_integration_rule_severity(data, rule, severity):
    assert severity in {f.severity for f in check(data) if f.rule == rule}


def test_scope_names_follow_the_effective_level():
    api = ["Functional.linear.0.forward", "Functional.linear.3.backward"]
    module = ["Module.0.Linear.forward.0", "Module.2.Linear.forward.0"]
    assert not rules(check({"statistics": {"scope": api}}), Severity.ERROR)  # level defaults to L1
    assert "msprobe-cross-field" in rules(check({"statistics": {"scope": module}}), Severity.ERROR)
    assert not rules(check({"level": "L0", "statistics": {"scope": module}}), Severity.ERROR)
    assert not rules(check({"level": "mix", "statistics": {"scope": [api[0], module[0]]}}), Severity.ERROR)
    # structure at L1 runs as mix, where either form is accepted
    assert not rules(check({"task": "structure", "structure": {"scope": [api[0], module[0]]}}), Severity.ERROR)
    # only the active task's section is read
    assert not rules(check({"task": "tensor", "statistics": {"scope": module}}), Severity.ERROR)


# ------------------------------------------------------------------ the schema itself

def test_schema_is_valid_2020_12():
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(load_schema(SCHEMA))


def _documented(schema):
    top = properties(schema, schema)
    yield "", top
    for name, spec in top.items():
        if name in ("load",) or "$ref" in spec:
            yield name, properties(schema, spec)


def test_every_key_has_title_description_default_and_examples():
    schema = load_schema(SCHEMA)
    for section, props in _documented(schema):
        for key, spec in props.items():
            node = resolve(schema, spec)
            if node.get("x-legacy"):
                assert node.get("deprecated") and node.get("deprecationMessage"), key
                continue
            for field in ("title", "description", "default", "examples"):
                assert field in node, f"{section}.{key} has no {field}"


def test_examples_and_defaults_in_the_schema_validate():
    """The schema's own examples must pass it (editors offer them as completions)."""
    schema = load_schema(SCHEMA)
    doc = load_json("config.json", json.dumps(schema["examples"][0]))
    assert schema_findings(doc, SCHEMA) == []
    for _, props in _documented(schema):
        for key, spec in props.items():
            node = resolve(schema, spec)
            if node.get("x-legacy") or key in ("dump_path", "level") or not node.get("examples"):
                continue
            for ex in node["examples"]:
                data = {key: ex} if key in properties(schema, schema) else {"statistics": {key: ex}}
                if key in ("bench_path", "diff_nums"):
                    data = {"tensor": {key: ex}}
                if key in ("white_list", "black_list", "error_data_path"):
                    data = {"acc_check": {key: ex}}
                doc = load_json("config.json", json.dumps(data))
                assert [f.message for f in schema_findings(doc, SCHEMA)] == [], (key, ex)


def test_schema_enums_match_installed_msprobe():
    const = pytest.importorskip("msprobe.core.common.const").Const
    schema = load_schema(SCHEMA)
    top = properties(schema, schema)
    assert {t for t in top["task"]["enum"] if t} == set(const.TORCH_TASK_LIST)
    assert [x for x in top["level"]["enum"] if x] == const.LEVEL_LIST
    assert top["precision"]["enum"] == const.DUMP_PRECISION_LIST
    assert [x for x in top["risk_level"]["enum"] if x] == const.RISK_LEVEL_LIST
    defs = schema["$defs"]
    assert [x for x in defs["summaryMode"]["enum"] if x] == const.SUMMARY_MODE
    assert defs["dataMode"]["items"]["enum"] == const.DUMP_DATA_MODE_LIST
    from verl_pdbg_conf.checks import msprobe as mod

    assert mod.API_NAME.pattern.split(")")[0].lstrip("^(").split("|") == const.DUMP_PREFIX


def test_rule_ids_are_registered():
    for rule in ("msprobe-schema", "msprobe-unknown-key", "msprobe-dump-path", "msprobe-step-filter",
                 "msprobe-task", "msprobe-level", "msprobe-dump-disabled", "msprobe-cross-field"):
        assert rule in RULES
    schema_rules = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("x-rule"), str):
                schema_rules.add(node["x-rule"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(load_schema(SCHEMA))
    assert schema_rules <= set(RULES)


def test_checking_imports_neither_msprobe_nor_torch():
    code = ("import sys; from verl_pdbg_conf.core.loaders import load_json; "
            "import verl_pdbg_conf.checks.msprobe as m; assert 'jsonschema' not in sys.modules; "
            "m.check_msprobe(load_json('c.json', '{\"task\": \"tensor\", \"level\": \"L0\"}')); "
            "bad = [x for x in ('torch', 'msprobe', 'verl', 'hydra') if x in sys.modules]; "
            "assert not bad, bad")
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


# ------------------------------------------------------------------ the schema layer is generic

def test_schema_findings_work_for_another_schema_and_rule(monkeypatch):
    from jsonschema import Draft202012Validator

    from verl_pdbg_conf.core import schema as layer

    other = {"type": "object", "additionalProperties": False,
             "properties": {"tool": {"enum": ["nsys", "precision_debugger", None]},
                            "steps": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 1}}}}
    monkeypatch.setattr(layer, "load_schema", lambda name: other)
    monkeypatch.setattr(layer, "validator", lambda name: Draft202012Validator(other))
    doc = load_json("p.json", '{\n  "tool": "precison_debugger",\n  "stpes": [1],\n  "steps": [0]\n}')
    fs = {f.path: f for f in layer.schema_findings(doc, "other", rule="tool-unknown")}
    assert set(fs) == {"tool", "stpes", "steps[0]"}
    assert all(f.rule == "tool-unknown" for f in fs.values())
    assert "did you mean 'precision_debugger'" in fs["tool"].message
    assert "did you mean 'steps'" in fs["stpes"].message and (fs["stpes"].line, fs["stpes"].column) == (3, 3)
    assert (fs["steps[0]"].line, fs["steps[0]"].column) == (4, 13)


def test_integers_are_integers_only():
    """msprobe's is_int refuses 1.0 and True; the schema layer does too."""
    for value in (1.0, True):
        fs = check({"rank": [value]})
        assert [f.path for f in fs if f.rule == "msprobe-schema"] == ["rank[0]"]


@pytest.mark.parametrize("level", ["L1", "L2", "debug"])
def test_structure_turns_other_levels_into_mix_before_level_checks(level):
    """msprobe forces task structure to mix first, so L2's and debug's rules never apply to it."""
    fs = check({"task": "structure", "level": level})
    assert not rules(fs, Severity.ERROR)
    assert "msprobe-cross-field" in rules(fs, Severity.WARNING)
