#!/bin/bash
# expect: stage-unknown 14 5
set -xeuo pipefail
RAY_ADDRESS=${RAY_ADDRESS:-"http://localhost:8265"}

ray job submit --address "${RAY_ADDRESS}" \
    --working-dir "${PWD}" \
    -- python3 -m my_recipe.main_ppo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_compute_log_probs]'
