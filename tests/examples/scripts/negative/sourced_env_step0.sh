#!/bin/bash
# expect: steps-range 10 5
set -x
. "$(dirname "$0")/common/env_step0.sh"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps=$PDBG_STEPS \
    +global_profiler.global_tool_config.precision_debugger.config_path=$MSPROBE_CONFIG \
    actor_rollout_ref.actor.profiler.enable=True
