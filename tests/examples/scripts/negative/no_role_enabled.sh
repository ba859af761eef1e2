#!/bin/bash
# expect: role-disabled 12 5
# The guide's "Minimal CLI example" without the role lines: no role profiler gates a stage.
set -x

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    global_profiler.steps='[1,2]' \
    global_profiler.save_path=outputs/profile \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    global_profiler.tool=precision_debugger \
    trainer.total_epochs=15
