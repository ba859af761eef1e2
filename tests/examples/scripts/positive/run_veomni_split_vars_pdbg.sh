#!/usr/bin/env bash
# Shaped like verl main's examples/grpo_trainer/run_qwen3_5_35b_a3b_veomni.sh: override groups in
# multi-line strings, one built from the others (`ACTOR_CONFIG="$ACTOR_CONFIG $ACTOR_VEOMNI_CONFIG"`),
# passed unquoted inside an array: bash splits them into words on blanks and newlines.
set -xeuo pipefail

usp_size=${usp_size:-2}
model_path=${model_path:-$HOME/model/Qwen3-8B}
model_engine=veomni

ACTOR_VEOMNI_CONFIG="
    actor_rollout_ref.actor.veomni.param_offload=True \
    actor_rollout_ref.actor.veomni.ulysses_parallel_size=$usp_size"

ACTOR_CONFIG="
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.path=$model_path \
    actor_rollout_ref.actor.ppo_mini_batch_size=32"
ACTOR_CONFIG="$ACTOR_CONFIG $ACTOR_VEOMNI_CONFIG"

PDBG_CONFIG="global_profiler.tool=precision_debugger
    global_profiler.steps=[1,2]
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json
    actor_rollout_ref.actor.profiler.enable=True"
EMPTY=""

EXTRA=(
    model_engine=$model_engine
    $ACTOR_CONFIG
    $PDBG_CONFIG
)

python -m verl.trainer.main_ppo \
    "${EXTRA[@]}" $EMPTY \
    trainer.total_epochs=1
