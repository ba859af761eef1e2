#!/usr/bin/env bash
# expect: override 8 5
# expect: override 9 5
# A config group option the tree does not have (a fork without model_engine/veomni): Hydra stops
# there, and the overrides it would refuse next are still reported, each at its line.
python3 -m verl.trainer.main_ppo \
    trainer.total_epochs=1 \
    model_engine=no_such_engine \
    trainer.no_such_key=1 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32
