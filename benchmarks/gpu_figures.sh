#!/usr/bin/env bash
# The GPU tests and the GPU benchmarks on a machine with a CUDA GPU, in one go, in under 10
# minutes; logs go to the folder given (default ./gpu_figures). docs/results/scaling.md holds
# the last figures.
#   bash benchmarks/gpu_figures.sh [out-dir]        # RUNNERS="1 2 4 8 15" for other scaling rows
set -uo pipefail
out=$(mkdir -p "${1:-gpu_figures}" && cd "${1:-gpu_figures}" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc;
  python3 -c "import torch, ray, mujoco; print('torch', torch.__version__, 'ray', ray.__version__, 'mujoco', mujoco.__version__)"; } 2>&1 | tee "$out/device.txt"
timeout 150 python3 -m pytest -m gpu tests/test_gpu.py -v -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
timeout 120 python3 benchmarks/minibatch_rows.py --steps 50 2>&1 | grep -v -e "WARNING" | tee "$out/minibatch_rows.log"
# shellcheck disable=SC2086
timeout 270 python3 benchmarks/scaling.py --runners ${RUNNERS:-1 4 8 15} --steps-per-runner 1024 \
  --envs-per-runner 2 --seconds 5 2>&1 | grep -v -e "WARNING" -e "core_worker" | tee "$out/scaling.log"
