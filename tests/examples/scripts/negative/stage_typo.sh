#!/bin/bash
# expect: stage-unknown 15 5
set -x
MSPROBE_CONFIG=configs/statistics_l1.json

python3 -u -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,2]' \
    global_profiler.save_path=outputs/profile \
    +global_profiler.global_tool_config.precision_debugger.config_path=$MSPROBE_CONFIG \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_update,actor_compute_logprob]' \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=15 $@
