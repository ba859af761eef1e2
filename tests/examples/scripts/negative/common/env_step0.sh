# sourced by ../sourced_env_step0.sh
PDBG_STEPS='[0,5]'
MSPROBE_CONFIG=configs/statistics_l1.json
