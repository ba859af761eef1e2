#!/bin/bash
# expect: steps-type 9 5
set -x
PROFILE_STEP=3
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps=$PROFILE_STEP \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=15
