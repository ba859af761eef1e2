#!/bin/bash
# expect: launch-script 9 5
# The config directory comes from the environment: its overrides cannot be judged (composing
# them against verl's default config would report errors that are not there). One warning.
set -x
CONFIG_PATH=${CONFIG_PATH:?set CONFIG_PATH}

python3 -m verl.trainer.main_ppo \
    --config-path="$CONFIG_PATH" \
    --config-name=my_grpo \
    my_section.only_in_my_config=1 \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[0]' \
    actor_rollout_ref.actor.profiler.enable=True "$@"
