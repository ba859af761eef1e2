#!/bin/bash
# The interpreter named by a variable and the shell replaced by `exec` (as container entry
# scripts do): still verl's main_ppo, composed and judged.
set -euo pipefail
PYTHON_BIN=${PYTHON_BIN:-python3}

exec "${PYTHON_BIN}" -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,2]' \
    global_profiler.save_path=outputs/profile \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    actor_rollout_ref.ref.profiler.enable=True \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_compute_log_prob,ref_compute_log_prob,actor_update]' \
    trainer.total_epochs=1
