#!/usr/bin/env bash
# expect: stage-unknown 15 5
set -xeuo pipefail

ACTOR=(
    actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct
    actor_rollout_ref.actor.use_kl_loss=True
)

PROFILER=(
    global_profiler.tool=precision_debugger
    global_profiler.steps='[1,2]'
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json
    actor_rollout_ref.actor.profiler.enable=True
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_update,ref_compute_logprob]'
)

python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "${ACTOR[@]}" "${PROFILER[@]}" "$@"
