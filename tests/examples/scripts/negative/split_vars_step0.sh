#!/usr/bin/env bash
# expect: steps-range 8 5
# A profiler group in a string built from others, passed unquoted: bash splits it, and the step 0
# is reported where it is written.
set -x
BASE="trainer.total_epochs=1 trainer.nnodes=1"
PDBG="global_profiler.tool=precision_debugger
    global_profiler.steps=[0,1]
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json
    actor_rollout_ref.actor.profiler.enable=True"
ARGS="$BASE $PDBG"

python3 -m verl.trainer.main_ppo $ARGS
