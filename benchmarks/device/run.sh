#!/usr/bin/env bash
# On a lent GPU machine (Python and torch, no Ray): unpack the parts benchmarks/device/pack.sh made
# into .device_site (an ignored folder, kept between calls while the machine stays warm); once
# all three are there, the GPU tests, ms per minibatch step against its rows, and the scaling
# rows of 1 to 15 EnvRunners under the scale rule (benchmarks/gpu_figures.sh), under 9 minutes:
#   device tool, in a row:  run(command="bash benchmarks/device/run.sh", carry=["device/part-1.tar.xz"])
#                           run(command="bash benchmarks/device/run.sh", carry=["device/part-2.tar.xz"])
#                           run(command="bash benchmarks/device/run.sh", carry=["device/part-3.tar.xz"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .device_site
for part in device/part-*.tar.xz; do
  [ -f "$part" ] && tar -xJf "$part" -C .device_site && touch ".device_site/.$(basename "$part")"
done
missing=$(for n in 1 2 3; do [ -f ".device_site/.part-$n.tar.xz" ] || echo "part-$n"; done)
if [ -n "$missing" ]; then echo "unpacked so far; still to carry: $missing"; exit 0; fi
export PYTHONPATH="$PWD:$PWD/.device_site"
bash benchmarks/gpu_figures.sh "${OUT:-gpu_figures}"
