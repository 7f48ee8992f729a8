#!/usr/bin/env bash
# The GPU figures on a machine with a CUDA GPU and 16 cores, in one go, the most wanted first:
# the scaling rows (1, 8, 15 and 4 EnvRunners under the scale rule, the scale preset at 1, 8 and 15,
# then 15 at 256 steps each),
# ms per minibatch step against its rows, then the GPU tests, which a 9.5-minute call may cut
# short. Logs go to the folder given (default ./gpu_figures); docs/results/scaling.md holds the
# last figures.
#   bash benchmarks/gpu_figures.sh [out-dir]        # RUNNERS="1 2 4 8 15" for other scaling rows
set -uo pipefail
out=$(mkdir -p "${1:-gpu_figures}" && cd "${1:-gpu_figures}" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc;
  python3 -c "import sys, torch, ray, mujoco; print('python', sys.version.split()[0], 'torch', torch.__version__, 'ray', ray.__version__, 'mujoco', mujoco.__version__)"; } 2>&1 | tee "$out/device.txt"
# shellcheck disable=SC2086
timeout 300 python3 benchmarks/scaling.py --runners ${RUNNERS:-1 8 15 4} --steps-per-runner 1024 \
  --envs-per-runner 2 --seconds 4 --learner-iterations 0 2>&1 | grep -v -e "WARNING" -e "core_worker" | tee "$out/scaling.log"
# The scale preset (rllib_geppo.presets.SCALE) at 1, 8 and 15 EnvRunners: the rows that test the
# learner study's predictions (docs/results/learner_steps/README.md).
timeout 150 python3 benchmarks/scaling.py --runners 1 8 15 --steps-per-runner 1024 --envs-per-runner 2 \
  --seconds 4 --learner-iterations 0 --preset scale 2>&1 | grep -v -e "WARNING" -e "core_worker" | tee "$out/scaling_preset.log"
# The 16-core setting that docs/cluster_and_gpu.md suggests: 15 EnvRunners at 256 steps (n = 3,840).
timeout 80 python3 benchmarks/scaling.py --runners 15 --steps-per-runner 256 --envs-per-runner 2 \
  --seconds 4 --learner-iterations 0 2>&1 | grep -v -e "WARNING" -e "core_worker" | tee "$out/scaling_15x256.log"
timeout 110 python3 benchmarks/minibatch_rows.py --rows 128 1024 4096 --steps 50 2>&1 | grep -v -e "WARNING" | tee "$out/minibatch_rows.log"
timeout 130 python3 -m pytest -m gpu tests/learner/test_gpu.py -v -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
