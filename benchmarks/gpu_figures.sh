#!/usr/bin/env bash
# The GPU tests and the scaling benchmark on a machine with a CUDA GPU, in one go; logs go to
# the folder given (default ./gpu_figures). docs/results/scaling.md holds the last figures.
#   bash benchmarks/gpu_figures.sh [out-dir]
set -uo pipefail
out=${1:-gpu_figures}
mkdir -p "$out"
cd "$(dirname "$0")/.."
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc;
  python3 -c "import torch, ray; print('torch', torch.__version__, 'ray', ray.__version__)"; } 2>&1 | tee "$out/device.txt"
timeout 300 python3 -m pytest -m gpu tests/test_gpu.py -v -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
timeout 420 python3 benchmarks/scaling.py --seconds 8 2>&1 | grep -v -e "WARNING" -e "core_worker" | tee "$out/scaling.log"
timeout 300 python3 benchmarks/learner_step.py --gpu --rounds 5 2>&1 | grep -v -e "WARNING" | tee "$out/learner_step.log"
