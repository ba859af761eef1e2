#!/bin/bash
# expect: config-path-invalid 13 5
set -x
export HYDRA_FULL_ERROR=1
CONFIG_DIR=configs

HYDRA_FULL_ERROR=1 python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    +global_profiler.global_tool_config.precision_debugger.config_path="${CONFIG_DIR}/msprobe_config.json" \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=15 2>&1 | tee run.log
