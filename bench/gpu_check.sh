#!/usr/bin/env bash
# The GPU check of bench/gpu_check.py in one command of at most 8 minutes, for a lent device
# machine (the library's `device` tool), or its dry run here: bench/gpu_check.sh --device cpu.
# Uses .venv when there is one, else the machine's python3 (a device machine's holds a CUDA
# torch). Options go to bench/gpu_check.py (--help lists them). Writes bench/results/gpu_check.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # vqlc_core from this checkout, installed or not
exec timeout --signal=INT 480 "$PY" bench/gpu_check.py "$@"
