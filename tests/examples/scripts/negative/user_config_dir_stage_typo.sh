#!/bin/bash
# expect: stage-unknown 11 5
set -x
PROJECT_DIR="$(pwd)"
CONFIG_PATH="$PROJECT_DIR/tests/examples/scripts/positive/config"

python3 -m verl.trainer.main_ppo \
    --config-path="$CONFIG_PATH" \
    --config-name='gsm8k_multiturn_pdbg' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_updte]' \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1 $@
