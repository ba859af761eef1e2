#!/usr/bin/env bash
# The last line ends in `\` and the file ends right after it (no newline): bash drops the `\`,
# every line above is passed.
python3 -m verl.trainer.main_ppo \
    global_profiler.tool=precision_debugger \
    global_profiler.steps=[1] \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    trainer.total_epochs=1 \