#!/usr/bin/env bash
# On a lent GPU machine (Python 3.12 and torch, no Ray): unpack what benchmarks/device/pack.sh
# packed, check that GePPO imports and steps MuJoCo, then run benchmarks/gpu_figures.sh (the
# scaling rows, ms per minibatch step against its rows, the GPU tests), all in one device call:
#   run(command="bash benchmarks/device/run.sh", carry=["device/site-cp312.tar.xz"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/../.."
site=/tmp/geppo-site
mkdir -p "$site" && tar -xJf device/site-cp312.tar.xz -C "$site" || exit 1
export PYTHONPATH="$PWD:$site"  # MUJOCO_GL unset: nothing renders, and EGL may lack its loader
python3 -c "
import gymnasium as gym, ray, torch
import rllib_geppo
env = gym.make('Hopper-v5'); env.reset(seed=0); env.step(env.action_space.sample())
print('imports and Hopper-v5 step: ok; ray', ray.__version__, 'torch', torch.__version__)
" || exit 1
bash benchmarks/gpu_figures.sh "${OUT:-gpu_figures}"
