"""rollout_generate beside the trainer (`+profiler=precision_debugger_rollout`): the rollout rules on
verl's real composed config, each with the override that makes it fire and the option that keeps it
quiet, and what --plan lists. Real composition, nothing mocked."""

from __future__ import annotations

import json

import pytest

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.run.plan import build_plan
from verl_pdbg_conf.validate import validate_composed
from verl_pdbg_conf.verl_facts.compose import compose_verl

from conftest import PD, sel

pytestmark = pytest.mark.usefixtures("verl_config_dir")

OPT = "+profiler=precision_debugger_rollout"
RO = "actor_rollout_ref.rollout"
ENV = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_PDBG_CONF_ROLLOUT"
HOOK = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
ROLLOUT_RULES = {"rollout-env", "rollout-eager", "rollout-log-probs", "rollout-logprobs-mode", "rollout-dtype",
                 "rollout-task", "stage-ignored"}


def rules(*overrides, runtime="auto"):
    report = validate_composed([], [OPT, *overrides], Options(runtime=runtime))
    return [f for f in report.sorted() if f.rule in ROLLOUT_RULES]


def only(found, rule):
    assert [f.rule for f in found] == [rule], found
    return found[0]


def test_the_option_is_clean_and_collects_the_rollout():
    assert rules() == []
    # the rollout's sampling defaults are comparable with the actor: processed_logprobs, top_k -1, top_p 1
    assert rules(f"{RO}.temperature=0.7") == []
    assert rules(f"{RO}.logprobs_mode=raw_logprobs") == []  # temperature 1: raw and processed agree


@pytest.mark.parametrize("release", ["0.8.0", "0.9.0", "0.9.1"])
def test_the_option_composes_clean_on_every_shipped_release(release):
    """docs/compare-rollout.md says which verl releases the option was composed with: these (verl main only
    by hand, with --verl-source on its tree)."""
    report = validate_composed([], [OPT], Options(verl_version=release))
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []
    assert [f for f in report.findings if f.rule == "stage-ignored"] == []


def test_without_this_packages_runtime_verl_skips_it():
    f = only(rules(f"~{HOOK}"), "stage-ignored")
    assert f.severity is Severity.WARNING and f.path.endswith("stages[0]")
    f = only(rules(runtime="verl"), "stage-ignored")  # --runtime verl: same verdict
    # the rollout's other settings are not judged: nothing is collected there
    assert rules(f"~{HOOK}", f"{RO}.enforce_eager=False") == [f]


def test_env_var_not_passed():
    f = only(rules(f"~{ENV}"), "rollout-env")
    assert f.severity is Severity.WARNING
    assert "VERL_PDBG_CONF_ROLLOUT is not passed" in f.message
    assert f.path.endswith("stages[0]")


def test_env_var_that_differs_from_the_trainer():
    # verl's v1 trainer (0.9.1's default) names the step to the engines through the runtime: steps go unused
    assert [f for f in rules("global_profiler.steps=[3]") if f.rule == "rollout-env"] == []
    f = only(rules("global_profiler.steps=[3]", "trainer.use_v1=False"), "rollout-env")
    assert "steps [1] (the trainer's: [3])" in f.message
    assert json.loads(f.hint.strip("'"))["steps"] == [3]
    f = only(rules("global_profiler.save_path=/tmp/elsewhere"), "rollout-env")
    assert "save_path" in f.message
    f = only(rules(f"{ENV}='not json'"), "rollout-env")
    assert "cannot be read here" in f.message  # not JSON: read as a path, which does not exist


def test_env_var_given_as_a_file(tmp_path):
    data = compose_verl([], [OPT]).document.data
    settings = data["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VERL_PDBG_CONF_ROLLOUT"]
    f = tmp_path / "rollout.json"
    f.write_text(settings)
    assert rules(f"{ENV}={f}") == []
    f.write_text(json.dumps(dict(json.loads(settings), steps=[9])))
    assert "steps [9]" in only(rules(f"{ENV}={f}", "trainer.use_v1=False"), "rollout-env").message


def test_other_engine():
    f = only(rules(f"{RO}.name=sglang", f"{RO}.enforce_eager=False"), "rollout-env")
    assert "'sglang'" in f.message  # one finding: nothing else is judged for a non-vLLM rollout


def test_not_eager_is_an_error():
    f = only(rules(f"{RO}.enforce_eager=False"), "rollout-eager")
    assert f.severity is Severity.ERROR and f.path == f"{RO}.enforce_eager"
    assert (f.file, f.line) == ("<cli>", 2)
    # engine_kwargs.vllm is spread over verl's own engine arguments: it wins
    f = only(rules(f"+{RO}.engine_kwargs.vllm.enforce_eager=False"), "rollout-eager")
    assert f.path == f"{RO}.engine_kwargs.vllm.enforce_eager"
    assert rules(f"{RO}.enforce_eager=False", f"+{RO}.engine_kwargs.vllm.enforce_eager=True") == []


def test_no_rollout_log_probs():
    f = only(rules(f"{RO}.calculate_log_probs=False"), "rollout-log-probs")
    assert f.severity is Severity.WARNING and "rollout_probs_diff" in f.message
    # one root cause: the log-probs' mode is not judged when there are none
    assert rules(f"{RO}.calculate_log_probs=False", f"{RO}.top_k=20") == [f]


@pytest.mark.parametrize("overrides, at, says", [
    ([f"{RO}.top_k=50"], "top_k", "truncated"),
    ([f"{RO}.top_p=0.9"], "top_p", "truncated"),
    ([f"{RO}.logprobs_mode=raw_logprobs", f"{RO}.temperature=0.6"], "logprobs_mode", "before temperature"),
    ([f"{RO}.logprobs_mode=processed_logits"], "logprobs_mode", "logits"),
    ([f"{RO}.temperature=0"], "temperature", "greedy"),
])
def test_log_probs_that_cannot_be_compared(overrides, at, says):
    f = only(rules(*overrides), "rollout-logprobs-mode")
    assert f.severity is Severity.WARNING and f.path == f"{RO}.{at}" and says in f.message


def test_raw_logprobs_with_top_k_is_comparable_at_temperature_one():
    assert rules(f"{RO}.logprobs_mode=raw_logprobs", f"{RO}.top_k=50") == []


def test_dtypes():
    f = only(rules(f"{RO}.dtype=float32"), "rollout-dtype")
    assert f.severity is Severity.INFO and "--dtype-aware" in f.hint
    assert "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype" in f.message
    # the actor's forward dtype is mixed_precision.param_dtype; spelled bf16/fp32 there
    assert rules(f"{RO}.dtype=float32", "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32") == []
    only(rules("+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"), "rollout-dtype")
    # vLLM's dtype from engine_kwargs wins over rollout.dtype
    only(rules(f"+{RO}.engine_kwargs.vllm.dtype=float16"), "rollout-dtype")
    assert rules(f"+{RO}.engine_kwargs.vllm.dtype=auto") == []  # the checkpoint's dtype: not known here


def test_megatron_actor_dtype():
    assert rules("model_engine=megatron") == []
    f = only(rules("model_engine=megatron", f"{RO}.dtype=float16"), "rollout-dtype")
    assert "actor_rollout_ref.actor.megatron.dtype" in f.message


def test_statistics_task():
    l1 = sel(compose_verl([], ["+profiler=precision_debugger_l1"]).document.data, PD)["config_path"]
    found = rules(f"{PD}.config_path={l1}")
    # two causes, two findings: the env var still names the tensor config, and the task is statistics
    assert sorted(f.rule for f in found) == ["rollout-env", "rollout-task"]
    task = [x for x in found if x.rule == "rollout-task"][0]
    assert task.severity is Severity.WARNING and task.path == f"{PD}.config_path"
    assert "tensor_rollout.json" in task.hint
    # the rollout template itself is task tensor: quiet (test_the_option_is_clean_and_collects_the_rollout)


def test_plan_lists_the_rollout():
    doc = compose_verl([], [OPT]).document
    from verl_pdbg_conf.core import interpolation

    interpolation.resolve(doc)
    plan = build_plan(doc, Options())
    assert plan.stages == ["rollout_generate", "actor_compute_log_prob"]
    assert plan.dirs == ["step_1/rollout_generate", "step_1/actor_compute_log_prob"]
    assert plan.gates["rollout_generate"] == ENV
    assert any("engine step" in n for n in plan.notes)
    # without the environment variable the rollout is not dumped: not in the plan
    doc = compose_verl([], [OPT, f"~{ENV}"]).document
    plan = build_plan(doc, Options())
    assert plan.stages == ["actor_compute_log_prob"] and "rollout_generate" in plan.not_collected
