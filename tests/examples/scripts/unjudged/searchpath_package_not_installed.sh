#!/usr/bin/env bash
# expect: launch-script 8 5
# Shaped like verl main's run_qwen3_5_35b_megatron_lite.sh: a search path package that is not
# installed where the check runs. The overrides that need its configs are one warning (the root
# cause), not one error each.
python3 -m verl.trainer.main_ppo \
    model_engine=no_such_engine_here \
    hydra.searchpath=[pkg://verl_pdbg_not_installed_pkg.config] \
    actor_rollout_ref.actor.engine.ep=2 \
    actor_rollout_ref.actor.engine.cp=1 \
    trainer.total_epochs=1
