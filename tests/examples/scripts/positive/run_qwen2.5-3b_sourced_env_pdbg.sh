#!/bin/bash
# Settings come from a file sourced next to the script (the style of verl's NPU examples).
set -xeuo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${SCRIPT_DIR}/common/pdbg_env.sh"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=False \
    global_profiler.tool=precision_debugger \
    global_profiler.steps="$PDBG_STEPS" \
    global_profiler.save_path=$PROFILE_DIR \
    +global_profiler.global_tool_config.precision_debugger.config_path=$MSPROBE_CONFIG \
    +global_profiler.global_tool_config.precision_debugger.stages="$PDBG_STAGES" \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1
