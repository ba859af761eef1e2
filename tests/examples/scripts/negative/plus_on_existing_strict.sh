#!/bin/bash
# expect: override 11 5
# `+key=` only adds keys that are absent: strict is already in verl's config (False).
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,2]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    +global_profiler.global_tool_config.precision_debugger.strict=True \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=15
