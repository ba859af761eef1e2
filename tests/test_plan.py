"""`--plan`: the step_N/stage directories a run writes, the ranks msprobe dumps, and the estimate
from the guide's measured figures (labelled as such)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_pdbg_conf.cli import main
from verl_pdbg_conf.context import Options
from verl_pdbg_conf.run.estimate import BASIS_PARAMS, params_from_hf_config, parse_params
from verl_pdbg_conf.core.loaders import load_yaml
from verl_pdbg_conf.run.plan import NotPlannable, build_plan, parse_ids, render_text

EX = Path(__file__).parent / "examples"
QWEN2_7B = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "vocab_size": 152064,
            "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False}
L1 = {"task": "statistics", "rank": [], "step": [], "level": "L1", "statistics": {"scope": [], "list": []}}
ACTOR_REF = ["actor_compute_log_prob", "ref_compute_log_prob", "actor_update"]


def conf(tmp_path, extra: str = "", stages=ACTOR_REF, steps="[1, 2]", cfg=None, name="conf.yaml") -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg or L1))
    text = ("global_profiler:\n  tool: precision_debugger\n"
            f"  steps: {steps}\n  save_path: outputs/profile\n"
            "  global_tool_config:\n    precision_debugger:\n      config_path: config.json\n"
            + (f"      stages: [{', '.join(stages)}]\n" if stages is not None else "")
            + "actor_rollout_ref:\n  actor:\n    use_kl_loss: True\n    profiler:\n      enable: True\n" + extra)
    p = tmp_path / name
    p.write_text(text)
    return p


def plan_of(path: Path, params=None, **opts):
    return build_plan(load_yaml(str(path)), Options(base_dir=str(path.parent), **opts), params=params)


def test_directories_ranks_and_the_guide_figures(tmp_path):
    plan = plan_of(conf(tmp_path))
    assert plan.steps == [1, 2]
    assert plan.stages == ACTOR_REF  # run order: old log prob, ref, update
    assert plan.dirs == [f"step_{n}/{s}" for n in (1, 2) for s in ACTOR_REF]
    assert set(plan.gates.values()) == {"actor_rollout_ref.actor.profiler"}  # hybrid: the actor gates ref too
    assert plan.ranks is None and plan.level == "L1"
    est = plan.estimate
    lo, hi = est.total_mb
    assert 0.9 * 21 <= lo <= hi <= 1.1 * 21  # guide: L1, these stages, steps 1 and 2: 21 MB
    assert est.ranks is None  # per rank: the world size is not in the file
    assert 9 <= est.inflation_at_basis[0] <= est.inflation_at_basis[1] <= 11  # guide: 9x-10x
    text = render_text(plan)
    assert "ESTIMATE" in text and "Qwen2-0.5B" in text and "all ranks (config.json rank: [])" in text


def test_l0_figures(tmp_path):
    plan = plan_of(conf(tmp_path, cfg=dict(L1, level="L0")))
    lo, hi = plan.estimate.total_mb
    assert 0.9 * 8.8 <= lo <= hi <= 1.1 * 8.8  # guide: L0, these stages, steps 1 and 2: 8.8 MB


def test_rank_list_world_size_and_per_stage_basis(tmp_path):
    extra = "trainer:\n  nnodes: 1\n  n_gpus_per_node: 8\n"
    plan = plan_of(conf(tmp_path, extra, cfg=dict(L1, rank=[0, "2-3", 9])))
    assert plan.ranks == [0, 2, 3, 9] and plan.world_size == 8
    assert any("beyond the world size" in n for n in plan.notes)
    assert plan.estimate.ranks == 3
    assert {s.basis for s in plan.estimate.stages} == {"measured"}


def test_all_ranks_with_world_size(tmp_path):
    plan = plan_of(conf(tmp_path, "trainer:\n  nnodes: 2\n  n_gpus_per_node: 4\n"))
    assert plan.ranks is None and plan.estimate.ranks == 8
    assert "0..7" in render_text(plan)


def test_parse_ids():
    assert parse_ids([]) is None and parse_ids(None) is None
    assert parse_ids([1, "3", "5-7", True, "x"]) == [1, 3, 5, 6, 7]


def sized(actor: str = "", data: str = "") -> str:
    """Appended to conf()'s actor_rollout_ref.actor block: the batch and micro-batch keys verl reads."""
    return ("    ppo_micro_batch_size_per_gpu: 2\n    ppo_epochs: 2\n" + actor
            + "  rollout:\n    n: 2\n    log_prob_micro_batch_size_per_gpu: 4\n"
            "  ref:\n    log_prob_micro_batch_size_per_gpu: 2\n"
            "data:\n  train_batch_size: 8\n" + data + "trainer:\n  nnodes: 1\n  n_gpus_per_node: 2\n")


SIZED = sized()


def sized_plan(tmp_path, layers: int, extra: str = "", cfg=None):
    model = tmp_path / f"m{layers}"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(dict(QWEN2_7B, num_hidden_layers=layers)))
    return plan_of(conf(tmp_path, extra, cfg=cfg), params=parse_params(str(model)))


def test_stages_are_sized_by_calls_and_layers_not_parameters(tmp_path):
    """8 prompts x n 2 over 2 ranks = 8 rows a rank: 2 log-prob calls (micro 4), 4 ref calls (micro 2),
    4 x 2 epochs = 8 update calls; each call's MB grows with the layers; the parameter count alone changes
    nothing (msprobe writes records per call, whatever a tensor's size)."""
    from verl_pdbg_conf.run.estimate import COST_BASIS

    est = sized_plan(tmp_path, 24, SIZED).estimate
    calls = {s.stage: s.calls for s in est.stages}
    assert calls == {"actor_compute_log_prob": 2, "ref_compute_log_prob": 4, "actor_update": 8}
    fit = COST_BASIS["levels"]["L1"]
    for s in est.stages:
        kind = fit["forward_backward" if s.stage == "actor_update" else "forward"]
        mb = s.calls * (kind["mb_per_call"] + kind["mb_per_layer_call"] * 24)
        assert s.mb_per_step == pytest.approx((mb / COST_BASIS["spread"], mb * COST_BASIS["spread"]))
        assert s.basis == f"fitted: {s.calls} call(s) x 24 layers"
        assert 0 < s.extra_s[0] < s.extra_s[1]
    deeper = sized_plan(tmp_path, 48, SIZED).estimate
    assert deeper.total_mb[0] > est.total_mb[0]
    wider = build_plan(load_yaml(str(conf(tmp_path, SIZED))), Options(base_dir=str(tmp_path)),
                       params=parse_params("70e9")).estimate  # no layers: the guide's figures, unscaled
    same = build_plan(load_yaml(str(conf(tmp_path, SIZED))), Options(base_dir=str(tmp_path)),
                      params=parse_params("0.5e9")).estimate
    assert wider.total_mb == same.total_mb and {s.basis for s in wider.stages} == {"measured"}
    assert any("layers are not known" in n for n in wider.notes)


def test_dynamic_batches_and_missing_micro_sizes_fall_back_to_the_guide(tmp_path):
    dyn = sized_plan(tmp_path, 24, sized("    use_dynamic_bsz: true\n")).estimate
    basis = {s.stage: s.basis for s in dyn.stages}
    assert basis["actor_update"] == "measured" and basis["actor_compute_log_prob"].startswith("fitted")
    assert any("calls per step are not known" in n for n in dyn.notes)
    bare = sized_plan(tmp_path, 24).estimate  # no batch size: no calls
    assert {s.calls for s in bare.stages} == {None}


def test_mix_level_adds_both_fits(tmp_path):
    one = {lv: sized_plan(tmp_path, 24, SIZED, cfg=dict(L1, level=lv)).estimate.total_mb[0] for lv in ("L0", "L1")}
    mix = sized_plan(tmp_path, 24, SIZED, cfg=dict(L1, level="mix")).estimate.total_mb[0]
    assert mix == pytest.approx(one["L0"] + one["L1"])


def test_parameter_count_from_an_hf_config(tmp_path):
    assert BASIS_PARAMS == pytest.approx(494e6, rel=0.01)  # Qwen2-0.5B
    assert params_from_hf_config(QWEN2_7B) == pytest.approx(7.62e9, rel=0.01)
    model = tmp_path / "models" / "Qwen2-7B-Instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(QWEN2_7B))
    p = parse_params(str(model))
    assert p.count == pytest.approx(7.62e9, rel=0.01) and "config.json" in p.source
    for text, n in (("7B", 7e9), ("0.5b", 5e8), ("500M", 5e8), ("7000000000", 7e9)):
        assert parse_params(text).count == n
    assert parse_params("not-a-size") is None


def test_model_path_in_the_config_is_used(tmp_path):
    model = tmp_path / "qwen"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN2_7B))
    plan = plan_of(conf(tmp_path, "  model:\n    path: qwen\n"))
    # `model` sits under actor_rollout_ref (the conf's last top-level key)
    assert plan.estimate.params.count == pytest.approx(7.62e9, rel=0.01)
    assert "actor_rollout_ref.model.path" in plan.estimate.params.source


def test_model_size_from_a_hub_name(tmp_path):
    plan = plan_of(conf(tmp_path, "  model:\n    path: Qwen/Qwen2.5-7B-Instruct\n"))
    assert plan.estimate.params.count == 7e9 and "name" in plan.estimate.params.source


def test_critic_warmup_skips_the_actor_update(tmp_path):
    plan = plan_of(conf(tmp_path, "trainer:\n  critic_warmup: 2\n"))
    assert "step_1/actor_update" not in plan.dirs and "step_2/actor_update" in plan.dirs
    assert plan.skipped and "critic_warmup" in plan.skipped[0][1]


def test_continuous_steps_land_in_the_first_steps_directory(tmp_path):
    p = conf(tmp_path, steps="[1, 2, 3, 5]")
    p.write_text(p.read_text().replace("  save_path:", "  profile_continuous_steps: True\n  save_path:"))
    plan = plan_of(p, runtime="verl")
    assert sorted({d.split("/")[0] for d in plan.dirs}) == ["step_1", "step_5"]
    assert plan_of(p, runtime="pdbg").dirs[-1] == "step_5/actor_update"
    assert len({d.split("/")[0] for d in plan_of(p, runtime="pdbg").dirs}) == 4


def test_pdbg_runtime_collects_the_critic(tmp_path):
    extra = ("critic:\n  enable: True\n  profiler:\n    enable: True\n"
             "algorithm:\n  adv_estimator: gae\n")
    stages = ACTOR_REF + ["compute_values", "critic_update"]
    verl = plan_of(conf(tmp_path, extra, stages=stages), runtime="verl")
    pdbg = plan_of(conf(tmp_path, extra, stages=stages), runtime="pdbg")
    assert "critic_update" not in verl.stages and "critic_update" in verl.not_collected
    assert pdbg.stages == ["actor_compute_log_prob", "ref_compute_log_prob", "critic_update", "actor_update"]
    assert pdbg.gates["critic_update"] == "critic.profiler"
    assert "like actor_update (not measured)" in {s.basis for s in pdbg.estimate.stages}


def test_not_plannable_without_the_tool(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("global_profiler:\n  tool: nsys\n  steps: [1]\n")
    with pytest.raises(NotPlannable):
        plan_of(p)


def test_unknown_levels_and_tensor_task_are_said(tmp_path):
    assert not plan_of(conf(tmp_path, cfg=dict(L1, level="debug"))).estimate.available
    tensor = plan_of(conf(tmp_path, cfg=dict(L1, task="tensor")))
    assert any("tensor" in n for n in tensor.estimate.notes)


# ------------------------------------------------------------------ the command

def test_cli_plan_text_json_and_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    p = conf(tmp_path)
    assert main(["--plan", str(p), "--params", "7B"]) == 0
    out = capsys.readouterr().out
    assert "step_2/actor_update/" in out and "ESTIMATE (not a measurement)" in out and "7.00B" in out
    assert main(["--plan", "-f", "json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (plan,) = doc["plans"]
    assert plan["ranks"] == "all" and plan["estimate"]["label"] == "estimate"
    assert plan["directories"][0] == "outputs/profile/step_1/actor_compute_log_prob"
    bad = tmp_path / "bad.yaml"
    bad.write_text(p.read_text().replace("actor_update]", "actor_updat]"))
    assert main(["--plan", str(bad)]) == 1
    assert "ESTIMATE" not in capsys.readouterr().out
    assert main(["--plan", str(p), "--params", "lots"]) == 2


def test_cli_plan_of_a_launch_script(capsys, monkeypatch):
    monkeypatch.chdir(EX / "scripts")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert main(["--plan", "positive/run_qwen2-0.5b_grpo_pdbg.sh"]) == 0
    out = capsys.readouterr().out
    assert "plan for positive/run_qwen2-0.5b_grpo_pdbg.sh:19" in out
    assert "0..7 (trainer.nnodes x trainer.n_gpus_per_node = 8)" in out
    assert "Qwen/Qwen2-0.5B-Instruct" in out  # model size from the name in the script


# ------------------------------------------------------------------ no model, the time figures

def test_without_a_model_the_plan_says_so_and_names_the_key(tmp_path):
    text = render_text(plan_of(conf(tmp_path)))
    assert "no model given (actor_rollout_ref.model.path is not set): figures are for Qwen2-0.5B" in text
    assert "actor_rollout_ref.model.path=/path/to/hf_model" in text


def test_verls_placeholder_model_is_not_taken_for_the_users():
    """verl's ppo_trainer sets actor_rollout_ref.model.path to ~/models/deepseek-llm-7b-chat: a value of
    verl's defaults, not a model the user gave, so nothing is scaled to 7B."""
    from verl_pdbg_conf.verl_facts.compose import compose_verl

    doc = compose_verl([], ["+profiler=precision_debugger_l1"]).document
    plan = build_plan(doc, Options())
    assert plan.estimate.params.count is None and plan.estimate.scale == 1.0
    assert "verl's placeholder '~/models/deepseek-llm-7b-chat'" in render_text(plan)
    given = compose_verl([], ["+profiler=precision_debugger_l1",
                              "actor_rollout_ref.model.path='~/models/deepseek-llm-7b-chat'"]).document
    assert build_plan(given, Options()).estimate.params.count == 7e9  # the same path, given by the user


def test_a_model_whose_size_is_not_known_is_named(tmp_path):
    text = render_text(plan_of(conf(tmp_path, "  model:\n    path: /nowhere/my-model\n")))
    assert "the size of actor_rollout_ref.model.path '/nowhere/my-model' is not known here" in text


def test_time_is_measured_only_for_the_measured_stages(tmp_path):
    measured = render_text(plan_of(conf(tmp_path)))
    assert "a profiled step took 9.5x-10.4x a normal step at the basis (measured)" in measured
    from verl_pdbg_conf.verl_facts.compose import compose_verl

    doc = compose_verl([], ["+profiler=precision_debugger_l1_critic", "actor_rollout_ref.actor.use_kl_loss=True"])
    more = render_text(build_plan(doc.document, Options()))
    assert "critic_update" in more
    assert "took" not in more.split("time:")[1].split("\n")[0]
    assert "from the guide's measured L1 9.5x-10.4x (actor_compute_log_prob, ref_compute_log_prob, actor_update)" \
        in more


def test_readme_cost_figures_are_the_tools_measured_ones(tmp_path):
    """README's "3x to 10x" is the guide's measured L0 and L1 slowdowns, as the plan prints them."""
    import re

    low = plan_of(conf(tmp_path, cfg=dict(L1, level="L0"))).estimate.measured_inflation["L0"]
    high = plan_of(conf(tmp_path)).estimate.measured_inflation["L1"]
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    lo, hi = map(int, re.search(r"profiled step costs (\d+)x to (\d+)x", readme).groups())
    assert (lo, hi) == (round(low[0]), round(high[1]))


def test_tensor_note_points_at_figures_where_they_are(tmp_path):
    text = render_text(plan_of(conf(tmp_path, cfg=dict(L1, task="tensor"))))
    assert "figures below" not in text and "figures count only dump.json's statistics and are far too low" in text


def test_tensor_task_adds_the_tensors_data_where_tokens_and_hidden_size_are_known(tmp_path):
    stats = sized_plan(tmp_path, 24, SIZED).estimate
    tensor = sized_plan(tmp_path, 24, sized(data="  max_prompt_length: 100\n  max_response_length: 28\n"),
                        cfg=dict(L1, task="tensor")).estimate
    # 8 rows a rank x 128 tokens, times the update's 2 epochs
    assert {s.stage: s.basis.split("tensors of ")[-1] for s in tensor.stages} == {
        "actor_compute_log_prob": "1024 tokens x hidden 3584", "ref_compute_log_prob": "1024 tokens x hidden 3584",
        "actor_update": "2048 tokens x hidden 3584"}
    assert all(t.mb_per_step[0] > 10 * s.mb_per_step[0] for t, s in zip(tensor.stages, stats.stages))
    assert not any("far too low" in n for n in tensor.notes)


def test_the_time_range_runs_from_the_fastest_rate_measured():
    """verl's trainer on CPU: critic_update at L1 wrote 1.095 MB in 0.37 s extra, faster per MB than the actor's
    stages the fit's rate comes from (docs/profiling-cost.md): the range's low end is the fastest rate measured,
    so that stage lies inside it; the high end is still the guide's Ascend rate."""
    from verl_pdbg_conf.run import estimate as E

    fit = E.COST_BASIS["levels"]["L1"]
    assert 0 < fit["seconds_per_mb_low"] < fit["seconds_per_mb"]
    lo, hi = E._extra_s("L1", "critic_update", (1.095, 1.095))
    assert lo <= 0.371 and 0.37 <= hi  # the measured point itself is the low end (0.3701 s)
    assert hi >= 1.095 * E.guide_seconds_per_mb("L1")[1]
    assert lo == pytest.approx(fit["seconds_per_stage"]["forward_backward"] + 1.095 * fit["seconds_per_mb_low"])
