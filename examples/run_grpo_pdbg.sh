#!/usr/bin/env bash
# A GRPO launch script with the guide's precision_debugger flags and three mistakes, each caught
# before launch: verl-pdbg-validate examples/run_grpo_pdbg.sh
set -x
MSPROBE_CONFIG=conf/msprobe/statistics_l1.json   # relative: resolved where the job is launched

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    actor_rollout_ref.model.path=Qwen/Qwen2-0.5B-Instruct \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[0,1]' \
    global_profiler.save_path=outputs/profile \
    +global_profiler.global_tool_config.precision_debugger.config_path=$MSPROBE_CONFIG \
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_compute_logprob,ref_compute_log_prob,actor_update]' \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.n_gpus_per_node=8
