#!/bin/bash
# expect: launch-script 6 5
# verl's own tree (--config-path=config) has no `ppo_megatron_trainer_v2`: Hydra stops at once.
set -x
python3 -m verl.trainer.main_ppo --config-path=./config \
    --config-name='ppo_megatron_trainer_v2' \
    algorithm.adv_estimator=grpo \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1]' \
    actor_rollout_ref.actor.profiler.enable=True
