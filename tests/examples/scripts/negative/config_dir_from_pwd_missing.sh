#!/usr/bin/env bash
# expect: launch-script 8 5
# Shaped like the sglang multi-turn e2e scripts of projects that dropped that example: the config
# directory is built from the launch directory, and it is not there, so Hydra fails at start-up.
set -x
PROJECT_DIR="$(pwd)"
python3 -m verl.trainer.main_ppo \
    --config-path="$PROJECT_DIR/examples/sglang_multiturn/config" \
    --config-name='gsm8k_multiturn_grpo' \
    trainer.total_epochs=1
