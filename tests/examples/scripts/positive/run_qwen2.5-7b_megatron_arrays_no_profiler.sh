#!/usr/bin/env bash
# Megatron GRPO with grouped overrides and verl's own megatron config, submitted as a Ray job;
# no profiler yet (the guide's lines are inserted into it by the tests).
set -xeuo pipefail

NODES=${NODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
MODEL_PATH=${MODEL_PATH:-"$HOME/models/Qwen2.5-7B-Instruct"}

DATA=(
    data.train_files="['$HOME/data/gsm8k/train.parquet']"
    data.val_files="['$HOME/data/gsm8k/test.parquet']"
    data.train_batch_size=256
    data.max_prompt_length=1024
    data.max_response_length=2048
)
MODEL=(actor_rollout_ref.model.path="$MODEL_PATH" actor_rollout_ref.model.use_fused_kernels=True)
ACTOR=(
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=64
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
)
ROLLOUT=(actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8
         actor_rollout_ref.rollout.tensor_model_parallel_size=4)
TRAINER=(
    trainer.logger='["console","wandb"]'
    trainer.project_name=verl_grpo_megatron
    trainer.experiment_name=qwen2.5_7b
    trainer.n_gpus_per_node=$GPUS_PER_NODE
    trainer.nnodes=$NODES
    trainer.total_epochs=1
)

ray job submit --address "${RAY_ADDRESS:-http://127.0.0.1:8265}" -- \
    python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_megatron_trainer.yaml' \
    algorithm.adv_estimator=grpo \
    "${DATA[@]}" \
    "${MODEL[@]}" \
    "${ACTOR[@]}" \
    "${ROLLOUT[@]}" \
    "${TRAINER[@]}" "$@"
