#!/usr/bin/env bash
# expect: override 7 5
# The array's first elements are passed whatever the `if` below does: the misspelled megatron key
# is refused by Hydra, at the line where it is written.
EXTRA=(
    model_engine=megatron
    actor_rollout_ref.actor.megatron.tensor_model_paralel_size=2
)
if [ "${INFER_BACKEND:-vllm}" = sglang ]; then
    EXTRA+=(+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=flashinfer)
fi
python3 -m verl.trainer.main_ppo "${EXTRA[@]}" trainer.total_epochs=1
