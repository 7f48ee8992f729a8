#!/usr/bin/env bash
# On a lent GPU machine (Python and torch, no Ray): unpack the archive benchmarks/device/pack.sh
# made, then the GPU tests, ms per minibatch step against its rows, and the scaling rows of 1 to
# 15 EnvRunners under the scale rule (benchmarks/gpu_figures.sh), in one call under 9 minutes:
#   bash benchmarks/device/pack.sh                    # here: device/site-packages.tar.xz
#   device tool: run(command="bash benchmarks/device/run.sh", carry=["device"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
site=$(mktemp -d)
tar -xJf device/site-packages.tar.xz -C "$site"
export PYTHONPATH="$PWD:$site"
bash benchmarks/gpu_figures.sh "${OUT:-gpu_figures}"
