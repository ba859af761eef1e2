#!/bin/bash
# expect: launch-script 6 1
# After a `cd` to a directory only known at launch time, the entry module cannot be found: its
# config cannot be known, one warning, nothing judged.
cd "$WORKDIR"
"${PYTHON_BIN}" -m recipe.absent.main_dapo \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[0]' \
    no_such_section.key=1
