#!/bin/bash
# A project's own entry module, found as Python finds `-m` from where the script runs: after
# `cd` into the script's folder, through the PYTHONPATH entry the script adds.
set -x
cd "$(dirname "$0")"
export PYTHONPATH="$(pwd)/..:${PYTHONPATH:-}"

$(which python3) -m my_recipe.main_ppo \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=../configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1
