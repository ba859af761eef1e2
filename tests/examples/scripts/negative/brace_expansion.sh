#!/bin/bash
# expect: launch-script 12 5
# Unquoted {a,b} is brace-expanded by bash into two words before main_ppo sees it.
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,2]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    +actor_rollout_ref.model.override_config={attn_implementation:eager,use_cache:false} \
    trainer.total_epochs=15
