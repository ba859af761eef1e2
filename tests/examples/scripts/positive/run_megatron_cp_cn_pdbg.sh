#!/bin/bash
# Megatron backend chosen the way verl's own scripts do it: --config-path=config is resolved by
# Hydra against verl/trainer/ (where main_ppo declares @hydra.main), i.e. verl's own configs.
set -x

python3 -m verl.trainer.main_ppo --config-path=config \
    --config-name='ppo_megatron_trainer.yaml' \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.actor.use_kl_loss=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[3]' \
    global_profiler.save_path=outputs/profile \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1 $@
