#!/bin/bash
# expect: steps-range 5 5
set -x
bash "$(dirname "$0")/../positive/common/base_grpo.sh" \
    global_profiler.steps='[0]' \
    global_profiler.tool=precision_debugger \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True
