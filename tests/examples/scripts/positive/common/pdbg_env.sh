# Shared settings, sourced by the launch scripts next to it.
export VLLM_USE_V1=1
MSPROBE_CONFIG=configs/statistics_l1.json
PDBG_STEPS='[1,2]'
PDBG_STAGES='[actor_compute_log_prob,actor_update]'
PROFILE_DIR=outputs/profile
