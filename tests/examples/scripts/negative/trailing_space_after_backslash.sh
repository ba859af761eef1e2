#!/bin/bash
# expect: launch-script 8 33
# A space after the backslash on line 8 ends the command there.
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps=[1,2] \ 
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True
