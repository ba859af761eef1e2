#!/usr/bin/env bash
# expect: routing-replay-rollout 15 5
# R3 routing replay on a Megatron MoE actor, its rollout profiled against the trainer. Shaped like
# verl's examples/router_replay/run_qwen30_a3b_megatron_vllm.sh, which sets
# actor_rollout_ref.rollout.enable_rollout_routing_replay=True beside R3: without it the rollout
# returns no routed_experts and the actor's first compute_log_prob fails.
set -xeuo pipefail

python3 -m verl.trainer.main_ppo --config-path=config \
    --config-name='ppo_megatron_trainer.yaml' \
    +profiler=precision_debugger_rollout \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B \
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.router_replay.mode=R3 \
    actor_rollout_ref.rollout.name=vllm \
    trainer.total_epochs=1 "$@"
