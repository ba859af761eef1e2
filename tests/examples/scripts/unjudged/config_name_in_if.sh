#!/usr/bin/env bash
# expect: launch-script 17 5
# The config name is chosen in an `if` (the style of verl's gspo/sapo examples): one warning.
set -xeuo pipefail
backend=${BACKEND:-fsdp}
ACTOR_CONFIG="actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.001"

if [[ $backend == "megatron" ]]; then
    CONFIG_NAME=ppo_megatron_trainer
    ACTOR_CONFIG="$ACTOR_CONFIG actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"
else
    CONFIG_NAME=ppo_trainer
    ACTOR_CONFIG="$ACTOR_CONFIG actor_rollout_ref.actor.fsdp_config.param_offload=True"
fi

python3 -m verl.trainer.main_ppo --config-path=./config \
    --config-name=$CONFIG_NAME \
    $ACTOR_CONFIG \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    actor_rollout_ref.actor.profiler.enable=True
