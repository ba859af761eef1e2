#!/bin/bash
# expect: steps-range 9 5
# `exec $PYTHON -m ...`: the launch is seen through the variable interpreter, and judged.
set -e
PYTHON=${PYTHON:-python3}
exec $PYTHON -m verl.trainer.main_ppo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[0,2]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True
