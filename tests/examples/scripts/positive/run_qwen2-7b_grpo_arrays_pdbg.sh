#!/usr/bin/env bash
# GRPO with the overrides grouped in bash arrays (the style of verl's megatron/LoRA examples),
# profiling the actor and the reference policy with msprobe's PrecisionDebugger.
set -xeuo pipefail

project_name='verl_grpo_example_gsm8k'
exp_name='qwen2_7b_pdbg'
train_files="['$HOME/data/gsm8k/train.parquet']"
MSPROBE_CONFIG=configs/statistics_l1.json

DATA=(
    data.train_files="$train_files"
    data.train_batch_size=128
    data.max_prompt_length=1024
    # data.shuffle=False
    data.truncation='error'
)

ACTOR=(
    actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
)
ACTOR+=(actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2)

PROFILER=(
    global_profiler.tool=precision_debugger
    global_profiler.steps='[1,2]'
    global_profiler.save_path="outputs/profile/${exp_name}"
    +global_profiler.global_tool_config.precision_debugger.config_path=$MSPROBE_CONFIG
    +global_profiler.global_tool_config.precision_debugger.stages='[actor_compute_log_prob,ref_compute_log_prob,actor_update]'
    actor_rollout_ref.actor.profiler.enable=True
)

TRAINER=(trainer.logger='["console"]' trainer.project_name="$project_name" trainer.experiment_name="$exp_name"
         trainer.n_gpus_per_node=8 trainer.nnodes=1 trainer.total_epochs=1)

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    "${DATA[@]}" \
    "${ACTOR[@]}" \
    "${PROFILER[@]}" \
    ${TRAINER[*]} "$@"
