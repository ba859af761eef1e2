#!/bin/bash
# expect: stage-unknown 14 5
# The project's entry module is found through the script's `cd` and its PYTHONPATH entry; its
# @hydra.main config is composed, and the stage typo is found at its line.
set -x
pushd "$(dirname "$0")/.."
export PYTHONPATH=$PWD:$PYTHONPATH
cd negative
"${PYTHON:-python3}" -m my_recipe.main_ppo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=../configs/statistics_l1.json \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_update,actor_compute_logprob]' \
    actor_rollout_ref.actor.profiler.enable=True
