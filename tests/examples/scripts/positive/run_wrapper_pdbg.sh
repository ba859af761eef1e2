#!/bin/bash
# A wrapper: the overrides it adds reach main_ppo through the base script's "$@".
set -x
bash "$(dirname "$0")/common/base_grpo.sh" \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[2]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True
