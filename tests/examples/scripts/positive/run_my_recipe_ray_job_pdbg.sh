#!/bin/bash
# A recipe's own main_ppo copy, submitted as a Ray job; its @hydra.main config sits beside it.
set -xeuo pipefail
RAY_ADDRESS=${RAY_ADDRESS:-"http://localhost:8265"}
WORKING_DIR=${WORKING_DIR:-"${PWD}"}

ray job submit --no-wait --address "${RAY_ADDRESS}" \
    --runtime-env-json='{"env_vars": {"NCCL_DEBUG": "WARN"}}' \
    --working-dir "${WORKING_DIR}" \
    -- python3 -m my_recipe.main_ppo \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1
