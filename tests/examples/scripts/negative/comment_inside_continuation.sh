#!/usr/bin/env bash
# expect: launch-script 17 5
# A comment line inside the `\` continuation ends the command: the profiler lines after
# it never reach main_ppo (bash runs them as a command of their own, which fails).
set -x

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,2]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    # precision debugger roles
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=15 $@
