"""Hypothesis properties of the validator on generated input: arbitrary bytes, YAML and JSON
token soup, conf-shaped and config.json-shaped trees with good and bad values, and the
loaders against the parsers the real consumers use (json.load for msprobe's config.json,
OmegaConf's YAML loader for what Hydra reads a verl conf with). Example counts come from the
profile in conftest.py (ci: 30 each; HYPOTHESIS_PROFILE=long: 2 000)."""

from __future__ import annotations

import json
import math

import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from fuzz_harness import corpus_files, describe, run_case, same_json_value
from mutations import JSON_TOKENS, WRONG_VALUES, YAML_TOKENS, _dump, _load, key_paths, set_at
from omegaconf._utils import get_yaml_loader
from verl_pdbg_conf.core.loaders import load_json, load_yaml

HYDRA_LOADER = get_yaml_loader()  # what Hydra reads a verl conf with (omegaconf is pinned to 2.3)


# ------------------------------------------------------------------ strategies

def soup(tokens, max_size=80):
    return st.lists(st.sampled_from(tokens), max_size=max_size).map("".join)


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["", " ", "a b", "é", "${oc.env:VERL_PDBG_FUZZ_UNSET}", "${x}", "${", "L1", "statistics",
                     "precision_debugger", "actor_update", "outputs/profile", "configs/statistics_l1.json",
                     "configs/broken.json", "configs", "/dev/null", "~/p", "1-2", "A-B"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=20)


def pick(*good):
    """A value for a known key: mostly a plausible one, sometimes anything."""
    return st.one_of(st.sampled_from(list(good)), st.sampled_from(WRONG_VALUES[:21]), VALUES)


def maybe_dict(fields: dict):
    """A mapping holding any subset of `fields` (key -> strategy), sometimes with a stray key."""
    return st.fixed_dictionaries({}, optional=dict(fields, **{"stray_key": VALUES}))


STAGE_NAMES = ["actor_update", "actor_compute_log_prob", "ref_compute_log_prob", "compute_values", "critic_update",
               "compute_rm_score", "rollout_generate", "train_batch", "actor_upd"]
ROLE = maybe_dict({
    "enable": pick(True, False), "all_ranks": pick(True, False), "ranks": pick([], [0, 1]),
    "tool": pick("precision_debugger", None, "nsys"), "save_path": pick("outputs/p", "/tmp/x y"),
    "tool_config": maybe_dict({"precision_debugger": maybe_dict({
        "config_path": pick("configs/statistics_l1.json", None), "stages": pick(None, ["actor_update"]),
        "strict": pick(True, False), "enable": pick(True)})}),
})
CONF = maybe_dict({
    "global_profiler": maybe_dict({
        "tool": pick("precision_debugger", "nsys", "torch_memory", None, "precision-debugger"),
        "steps": st.one_of(pick(None, [], [1], [1, 2], [0], [1, 1], 3, ["1"]),
                           st.lists(st.integers(min_value=-2, max_value=30), max_size=6)),
        "profile_continuous_steps": pick(True, False),
        "save_path": pick("outputs/profile", "/tmp/profile", "a b", "", None, "é/x", "~/x"),
        "global_tool_config": maybe_dict({"precision_debugger": maybe_dict({
            "_target_": pick("verl.utils.profiler.config.PrecisionDebuggerToolConfig", "x.Y"),
            "config_path": pick("configs/statistics_l1.json", "configs/with_dump_path.json", "configs/broken.json",
                                "configs/a_directory.json", "nope.json", "configs/not_json_ext.yaml", None, ""),
            "stages": st.one_of(pick(None, []), st.lists(st.sampled_from(STAGE_NAMES), max_size=8)),
            "strict": pick(True, False, "True"), "steps": pick([1]), "stagse": pick(["actor_update"])}),
            "nsys": VALUES}),
    }),
    "actor_rollout_ref": maybe_dict({"actor": maybe_dict({"profiler": ROLE}), "ref": maybe_dict({"profiler": ROLE}),
                                     "rollout": maybe_dict({"profiler": ROLE}),
                                     "hybrid_engine": pick(True, False)}),
    "critic": maybe_dict({"profiler": ROLE, "enable": pick(True, False)}),
    "algorithm": maybe_dict({"adv_estimator": pick("gae", "grpo"), "use_kl_in_reward": pick(True, False)}),
    "trainer": maybe_dict({"total_training_steps": pick(5, None, 0, "5")}),
    "ray_kwargs": maybe_dict({"ray_init": maybe_dict({"runtime_env": maybe_dict({
        "worker_process_setup_hook": pick("verl_pdbg_conf.runtime.install", "x")})})}),
})
TASK_SECTION = maybe_dict({
    "scope": pick([], ["Functional.linear.0.forward", "Functional.linear.1.forward"], ["Module.0.Linear.forward.0"],
                  ["x"]),
    "list": pick([], ["Functional.linear"], ["a", "b"]), "tensor_list": pick([], ["x"]),
    "data_mode": pick(["all"], ["input", "output"], ["all", "input"], [], None, ["bogus"]),
    "summary_mode": pick("statistics", "md5", "xor", "bogus"), "slice": pick([0, 1]), "request_id": pick([0]),
    "bench_path": pick("/tmp", "/nope"), "diff_nums": pick(5, -1), "error_data_path": pick("/tmp"),
    "white_list": pick([], ["conv2d"]), "black_list": pick([]),
})
MSPROBE = maybe_dict({
    "task": pick("statistics", "tensor", "structure", "acc_check", "nan_check", "overflow_check", "exception_dump"),
    "level": pick("L0", "L1", "L2", "mix", "debug", "l1"),
    "rank": st.one_of(pick([], [0, 1], ["0-3"], ["3-1"], [True], [1.5], [-1], [1000001]),
                      st.lists(st.integers(min_value=-1, max_value=8), max_size=4)),
    "step": pick([], [0, 1], ["1-2"]), "dump_path": pick("/tmp/dump"), "async_dump": pick(True, False, None),
    "extra_info": pick(True, False), "precision": pick("low", "high"), "risk_level": pick("CORE", "FOCUS", "ALL"),
    "dump_enable": pick(True, False), "custom_op_namespaces": pick(None, ["_C_ascend"]),
    "load": maybe_dict({"path": pick("/tmp"), "modules": pick([]), "step": pick([0]), "rank": pick([0]),
                        "dump_after_load": pick(True)}),
    "framework": pick("pytorch"), "is_deterministic": pick(False),
    "statistics": TASK_SECTION, "tensor": TASK_SECTION, "structure": TASK_SECTION, "acc_check": TASK_SECTION,
    "nan_check": TASK_SECTION,
})


def _yaml_bytes(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()


def _json_bytes(data) -> bytes:
    return json.dumps(data, indent=1).encode("utf-8", "surrogatepass")


# ------------------------------------------------------------------ the validator never breaks

@given(data=st.binary(max_size=3000), suffix=st.sampled_from([".yaml", ".json"]))
def test_any_bytes(data, suffix, workspace):
    out = run_case("bytes" + suffix, data, workspace)
    assert out.ok, describe([out])


@given(text=soup(YAML_TOKENS, 120), suffix=st.sampled_from([".yaml", ".yaml", ".json"]))
def test_yaml_token_soup(text, suffix, workspace):
    out = run_case("soup" + suffix, text.encode(), workspace)
    assert out.ok, describe([out])


@given(text=soup(JSON_TOKENS, 80))
def test_json_token_soup(text, workspace):
    out = run_case("soup.json", text.encode("utf-8", "surrogatepass"), workspace)
    assert out.ok, describe([out])


@given(conf=CONF, as_json=st.booleans())
def test_conf_shaped_trees(conf, as_json, workspace):
    """Every combination of verl profiler keys with good, wrong and odd values."""
    data = _json_bytes(conf) if as_json else _yaml_bytes(conf)
    out = run_case("conf.json" if as_json else "conf.yaml", data, workspace)
    assert out.ok, describe([out])


@given(cfg=MSPROBE, as_yaml_conf=st.booleans())
def test_msprobe_shaped_configs(cfg, as_yaml_conf, workspace):
    """msprobe config.json trees, validated directly and through a conf's config_path."""
    data = _json_bytes(cfg)
    if not as_yaml_conf:
        out = run_case("config.json", data, workspace)
    else:
        target = workspace.write("cfg.json", data)
        conf = ("global_profiler:\n  tool: precision_debugger\n  steps: [1]\n  global_tool_config:\n"
                f"    precision_debugger:\n      config_path: {target}\n      strict: true\n"
                "actor_rollout_ref:\n  actor:\n    profiler:\n      enable: True\n")
        try:
            out = run_case("conf.yaml", conf.encode(), workspace)
        finally:
            target.unlink()
    assert out.ok, describe([out])


# The large composed config is left to test_fuzz_corpus and the campaign: half a second a case.
CORPUS_DATA = [(p, d, list(key_paths(d))) for p in corpus_files()
               if p.stat().st_size < 8192 and (d := _load(p)) is not None]


@given(data=st.data())
def test_any_value_at_any_key_path_of_a_real_config(data, workspace):
    path, tree, paths = data.draw(st.sampled_from(CORPUS_DATA), label="file")
    assume(paths)
    kp = data.draw(st.sampled_from(paths), label="key path")
    value = data.draw(VALUES, label="value")
    suffix = ".json" if path.suffix == ".json" else ".yaml"
    blob = _json_bytes(set_at(tree, kp, value)) if suffix == ".json" else _dump(set_at(tree, kp, value), suffix)
    out = run_case(path.stem + ".value" + suffix, blob, workspace)
    assert out.ok, describe([out])


# ------------------------------------------------------------------ the loaders read what the consumers read

def _budget(doc) -> bool:
    return any("more than" in f.message for f in doc.findings)


JSON_TEXT = st.one_of(
    soup(JSON_TOKENS, 40),
    st.text(max_size=60),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                 lambda i: st.one_of(st.lists(i, max_size=4), st.dictionaries(st.text(max_size=5), i, max_size=4)),
                 max_leaves=12).map(lambda v: json.dumps(v, indent=None)),
)


@given(text=JSON_TEXT)
def test_json_loader_agrees_with_json_load(text):
    """msprobe reads config.json with json.load: the validator's parser must accept exactly
    what it accepts, give the same data, and fail at the same line and column."""
    doc = load_json("x.json", text)
    assume(not _budget(doc))
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as e:
        assert not doc.ok, f"json.load refuses it ({e}) but the validator accepts it"
        (f,) = [f for f in doc.findings if f.rule == "parse-error" and f.severity.value == "error"]
        assert (f.line, f.column) == (e.lineno, e.colno), f"{f.message} at {f.line}:{f.column}; json says {e}"
        return
    except ValueError as e:  # an integer over Python's digit limit
        assert not doc.ok, f"json.load refuses it ({e}) but the validator accepts it"
        return
    assert doc.ok, f"json.load reads it but the validator says {[f.message for f in doc.findings]}"
    assert same_json_value(doc.data, _fffd(expected)), (doc.data, expected)


def _fffd(v):
    """json.load's data with each unpaired surrogate as U+FFFD, as the validator keeps it."""
    if isinstance(v, str):
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in v)
    if isinstance(v, dict):
        return {_fffd(k): _fffd(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_fffd(x) for x in v]
    return v


YAML_TEXT = st.one_of(
    soup(YAML_TOKENS, 40),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
                 lambda i: st.one_of(st.lists(i, max_size=4), st.dictionaries(st.text(max_size=5), i, max_size=4)),
                 max_leaves=12).map(lambda v: yaml.safe_dump(v, default_flow_style=None)),
)


def _normal_keys(v):
    """The validator keeps str and int keys and turns others (bool, float, None, dates) into str."""
    if isinstance(v, dict):
        return {(k if isinstance(k, (str, int)) and not isinstance(k, bool) else str(k)): _normal_keys(x)
                for k, x in v.items()}
    if isinstance(v, list):
        return [_normal_keys(x) for x in v]
    return v


def _same_yaml(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_yaml(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_yaml(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@given(text=YAML_TEXT)
def test_yaml_loader_agrees_with_hydra(text, tmp_path_factory):
    """verl reads a conf through Hydra, with OmegaConf's YAML loader (PyYAML's SafeLoader, its own
    float pattern, no timestamps, duplicate keys refused). What that loader reads, the validator
    reads to the same data, and what it cannot parse is a parse error. (libyaml, which the
    validator uses for speed, skips a BOM in mid-stream; PyYAML reads it as text: not compared.)"""
    assume("\ufeff" not in text[1:])  # libyaml skips a BOM anywhere, PyYAML reads one past the start as text
    p = tmp_path_factory.getbasetemp() / "agree.yaml"
    p.write_text(text, encoding="utf-8")
    doc = load_yaml(str(p))
    assume(not _budget(doc))
    try:
        expected = yaml.load(text, Loader=HYDRA_LOADER)
    except yaml.constructor.ConstructorError as e:
        if "duplicate key" in str(e):
            assert any(f.rule == "duplicate-key" for f in doc.findings) or not doc.ok, str(e)
        return  # refused tags, bad merges: the validator reports them as yaml-tag or ignores them
    except (yaml.scanner.ScannerError, yaml.parser.ParserError, yaml.composer.ComposerError) as e:
        assert not doc.ok, f"Hydra cannot read it ({e.problem}) but the validator reads it"
        return
    except Exception:  # noqa: BLE001 - PyYAML failing on its own (`!!int ` with no digits: IndexError)
        return
    if not doc.ok:
        assert any("itself" in f.message for f in doc.findings), [f.message for f in doc.findings]
        return
    assert not [f for f in doc.findings if f.rule == "parse-error"], doc.findings
    assert not [f for f in doc.findings if f.rule == "duplicate-key" and f.severity.value == "error"], doc.findings
    if any(f.rule == "yaml-tag" for f in doc.findings):
        return
    assert _same_yaml(doc.data, _normal_keys(expected)), (doc.data, expected)
