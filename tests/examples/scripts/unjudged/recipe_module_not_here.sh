#!/bin/bash
# expect: launch-script 5 1
# A recipe's own trainer whose source is not in this repository: its config cannot be known.
set -x
python3 -m recipe.dapo.main_dapo \
    data.train_batch_size=512 \
    algorithm.filter_groups.enable=True \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[0]'
