#!/bin/bash
# The base script the wrappers next to it call with their own overrides.
set -x
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.use_kl_loss=True \
    trainer.total_epochs=1 \
    "$@"
