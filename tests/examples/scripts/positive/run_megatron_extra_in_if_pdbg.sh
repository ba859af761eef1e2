#!/usr/bin/env bash
# Shaped like verl main's examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh: the engine is chosen
# in an array that `if` blocks extend; its first elements (model_engine=megatron) are always passed,
# so the megatron keys compose. A value set by `[ ... ] && a=x || a=y` is one of the two.
set -xeuo pipefail

actor_pp=${actor_pp:-1}
[ "${actor_pp}" -gt 1 ] && actor_vpp=2 || actor_vpp=null

EXTRA=(
    model_engine=megatron
    actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=${BUCKET_MB:-4096}
)
if [ "${INFER_BACKEND:-vllm}" = trtllm ]; then
    EXTRA+=(
        +actor_rollout_ref.rollout.engine_kwargs.trtllm.batch_wait_timeout_iters=32
    )
fi
if [ -n "${MCORE_MODEL_PATH:-}" ]; then
    EXTRA+=(actor_rollout_ref.actor.megatron.dist_checkpointing_path=${MCORE_MODEL_PATH})
fi

python3 -m verl.trainer.main_ppo \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$actor_pp \
    actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=${actor_vpp} \
    global_profiler.tool=precision_debugger \
    global_profiler.steps='[1,2]' \
    +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \
    actor_rollout_ref.actor.profiler.enable=True \
    "${EXTRA[@]}"
