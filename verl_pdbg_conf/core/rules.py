"""Every rule id the validator emits, with its one-line meaning. Tests check that
each rule has a negative example (the rule fires) and a positive one (it does not)."""

RULES: dict[str, str] = {
    # reading files
    "file-not-found": "a file named on the command line or by config_path does not exist",
    "file-is-directory": "a path names a directory where a file is needed",
    "file-not-regular": "a path names a FIFO, socket or device",
    "file-unreadable": "a file cannot be read (permissions, symlink loop, I/O error)",
    "file-too-large": "a file is too large to be a config",
    "parse-error": "YAML or JSON that does not parse",
    "duplicate-key": "a key given twice in one mapping; the last one wins",
    "yaml-tag": "a YAML tag or key that a safe config loader refuses",
    "yaml-key": "a mapping key that is not a scalar",
    "interpolation": "an OmegaConf interpolation that cannot be resolved before the run",
    # msprobe config.json
    "msprobe-schema": "msprobe's config.json does not satisfy the judging msprobe release's rules",
    "msprobe-unknown-key": "a key msprobe silently ignores (unknown or legacy)",
    "msprobe-dump-path": "dump_path set in config.json; verl controls the output path",
    "msprobe-step-filter": "config.json `step` filter under verl's one-session-per-stage integration",
    "msprobe-task": "a task this integration cannot run on PyTorch",
    "msprobe-level": "a level that collects nothing or needs hardware or a model",
    "msprobe-dump-disabled": "dump_enable false or load-only mode: nothing is dumped",
    "msprobe-cross-field": "a combination of msprobe settings msprobe rejects or ignores",
    "msprobe-verl-pair": "a verl and msprobe release that cannot be installed together, or an msprobe without "
                         "the API that verl's backend calls",
    # verl global_profiler
    "tool-missing": "precision-debugger settings present but global_profiler.tool is not precision_debugger",
    "tool-unknown": "global_profiler.tool is not a tool verl knows",
    "verl-no-backend": "the verl that will run has no precision_debugger profiler (no backend, or no global_profiler)",
    "config-path-missing": "precision_debugger selected with no config_path",
    "config-path-invalid": "config_path does not name a readable .json file",
    "config-path-type": "config_path is not a string",
    "steps-none": "global_profiler.steps null or empty: nothing is profiled",
    "steps-type": "global_profiler.steps is not a list of integers",
    "steps-range": "a step below 1 or past the last training step is never profiled",
    "steps-duplicate": "a step listed twice",
    "steps-continuous": "profile_continuous_steps tags every step with the first step's number",
    "save-path": "save_path that msprobe or the file system will refuse",
    "stage-unknown": "a stage name verl does not know",
    "stage-duplicate": "a stage listed twice",
    "stage-ignored": "rollout_generate is never collected (verl's own backend skips it)",
    "rollout-env": "rollout_generate with this package's runtime: the vLLM side does not get VERL_PDBG_CONF_ROLLOUT, "
                   "gets settings it cannot read or that differ from the trainer's, or the engine is not vLLM",
    "rollout-eager": "rollout_generate collected while the rollout captures CUDA graphs / torch.compile "
                     "(enforce_eager not True)",
    "rollout-log-probs": "rollout_generate collected with calculate_log_probs False: no rollout_log_probs",
    "rollout-logprobs-mode": "the rollout's log-probs (logprobs_mode, temperature, top_k/top_p) are not comparable "
                             "with the actor's",
    "rollout-dtype": "the rollout and the actor's forward run in different dtypes",
    "rollout-task": "rollout_generate collected with msprobe task statistics: tokens cannot be aligned",
    "rollout-moe-routing": "an MoE model's rollout collected without its router modules: the routing cannot be "
                           "compared",
    # routing replay (MoE)
    "routing-replay-mode": "a router_replay.mode verl refuses (not one of its modes)",
    "routing-replay-ignored": "a routing-replay setting the workers never read, or rollout routes nothing replays",
    "routing-replay-rollout": "the rollout will not return the routed experts routing replay asks of it (R3 "
                              "without enable_rollout_routing_replay, an engine that never returns them, vLLM "
                              "without prefix caching)",
    "routing-replay-conflict": "R2 beside the rollout's routed experts, a combination verl refuses",
    "routing-replay-compare": "R3 replays the rollout's routes in actor_compute_log_prob: the routing compare "
                              "checks the replay",
    "stages-empty": "stages: [] collects nothing (null collects all)",
    "stages-type": "stages is not a list of strings",
    "stage-not-run": "a stage the target verl's workers never run",
    "stage-strict-crash": "with strict: True, the run raises at this stage",
    "strict-type": "strict is not a boolean",
    "role-disabled": "a selected stage whose gating role profiler is not enabled",
    "role-unused": "a role profiler enabled for none of the selected stages",
    "role-key": "a role profiler key this tool ignores or that verl rejects",
    "key-dropped": "a key verl silently drops",
    "key-unknown": "a key that verl's config tree does not have; the job fails to compose",
    "value-type": "a value of the wrong type for verl's config",
    "no-profiler-config": "the file has nothing this tool checks",
    "override": "a Hydra override that does not compose",
    "launch-script": "a launch script whose main_ppo invocation cannot be read as the shell would",
    # --inspect: a finished run's output against its configuration
    "dump-missing": "an expected step/stage/rank directory or dump.json is missing",
    "dump-empty": "a dump.json that is empty or holds no records",
    "dump-growth": "a dump.json that also holds earlier stages' records (runtime status not reset)",
    "dump-stray": "a directory under save_path that this configuration does not write",
    "dump-layout": "output that is not in the {save_path}/step_N/stage/stepM/rankR layout",
    "dump-construct": "a construct.json that is not msprobe's shape throughout: its module scopes are not used",
    "dump-stack": "a stack.json that is not msprobe's shape throughout: its call sites are not used",
    # verl-pdbg-compare: two runs' dumps, pair by pair
    "dump-corrupt": "a dump.json that is not valid JSON (truncated or overwritten) or not an msprobe dump",
    "dump-value": "a value or record of a dump.json that is not what msprobe writes: not compared",
    "compare-routing": "an MoE layer's routing could not be compared for some tokens (router records missing, "
                       "of the wrong shape, or expert numbers out of range)",
    "compare-routing-replay": "the actor's routers replay a routing record that is not the engine's choice for "
                              "that layer (a replay attached to the wrong layer, or another batch's record)",
    "compare-failed": "msprobe compare failed on a pair of dumps or wrote no result",
    "compare-pairing": "a (step, stage, rank) that is in one run only, or proc<pid> directories paired by order",
    "compare-metric": "the chosen metric is not in msprobe's result for this pair (another task or summary mode)",
}
