#!/bin/bash
# A user config directory, named the way verl's multi-turn examples name theirs: from the
# directory the script is launched in.
set -x
ulimit -n 65535

PROJECT_DIR="$(pwd)"
CONFIG_PATH="$PROJECT_DIR/tests/examples/scripts/positive/config"

python3 -m verl.trainer.main_ppo \
    --config-path="$CONFIG_PATH" \
    --config-name='gsm8k_multiturn_pdbg' \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_update,ref_compute_log_prob]' \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1 $@
