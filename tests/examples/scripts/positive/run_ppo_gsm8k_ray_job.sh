#!/bin/bash
# PPO with a critic on gsm8k, submitted as a Ray job (shaped like verl's
# examples/ppo_trainer scripts). Paths come from the environment: they are not judged.
set -xeuo pipefail

project_name='PPO'
exp_name='ppo-qwen2.5-0.5b-pdbg'
RAY_ADDRESS=${RAY_ADDRESS:-"http://localhost:8265"}
WORKING_DIR=${WORKING_DIR:-"${PWD}"}
MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen2.5-0.5B-Instruct"}
TRAIN_FILE=${TRAIN_FILE:-"${HOME}/data/gsm8k/train.parquet"}
TEST_FILE=${TEST_FILE:-"${HOME}/data/gsm8k/test.parquet"}

ray job submit --no-wait --address "${RAY_ADDRESS}" \
    --working-dir "${WORKING_DIR}" \
    -- python3 -u -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    data.train_files="${TRAIN_FILE}" \
    data.val_files="${TEST_FILE}" \
    data.train_batch_size=256 \
    data.max_prompt_length=512 \
    data.max_response_length=512 \
    actor_rollout_ref.model.path="${MODEL_PATH}" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    critic.optim.lr=1e-5 \
    critic.model.path="${MODEL_PATH}" \
    critic.ppo_micro_batch_size_per_gpu=4 \
    algorithm.use_kl_in_reward=False \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,10]' \
    global_profiler.save_path="outputs/profile/${exp_name}" \
    ++global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    ++global_profiler.global_tool_config.precision_debugger.strict=False \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.logger=['console'] \
    trainer.project_name="${project_name}" \
    trainer.experiment_name="${exp_name}" \
    trainer.n_gpus_per_node=4 \
    trainer.nnodes=1 \
    trainer.total_training_steps=20 \
    trainer.total_epochs=1 2>&1 | tee "ppo_${exp_name}.log"
