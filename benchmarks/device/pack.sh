#!/usr/bin/env bash
# Pack what a lent GPU machine lacks for benchmarks/gpu_figures.sh. That machine has Python 3.12
# with torch, numpy, scipy, pandas and pyarrow, but not Ray, gymnasium or MuJoCo, and one call
# carries at most 64 MiB. So: download the CPython 3.12 Linux wheels of this venv's versions of
# the missing packages, unpack them, drop what training never imports (Ray's Java, C++, Serve,
# LLM and cloud launchers, tests, headers) and write device/site-cp312.tar.xz (about 36 MiB).
#   bash benchmarks/device/pack.sh                  # then benchmarks/device/run.sh, in one call
set -euo pipefail
cd "$(dirname "$0")/../.."
PY_VERSION=${PY_VERSION:-3.12}
missing=(ray gymnasium farama-notifications mujoco mujoco-core glfw pyopengl dm-tree lz4 ormsgpack
         tensorboardx jsonschema jsonschema-specifications referencing rpds-py pydantic pydantic-core
         annotated-types typing-inspection websockets)
normalise() { awk -F'==' '{name = tolower($1); gsub(/[_.]/, "-", name); print name "==" $2}'; }
# This venv's version of each package, so that the device runs what the tests here ran.
pins=$(.venv/bin/python -m pip list --format=freeze | normalise | grep -E "^($(IFS='|'; echo "${missing[*]}"))==")
(( $(wc -l <<<"$pins") == ${#missing[@]} )) || { echo "this venv lacks some of: ${missing[*]}" >&2; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
platforms=(); for tag in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28; do
  platforms+=(--platform "${tag}_x86_64"); done
# shellcheck disable=SC2086
.venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
  --python-version "$PY_VERSION" "${platforms[@]}" -d "$work/wheels" $pins
mkdir "$work/site"
for wheel in "$work"/wheels/*.whl; do unzip -q -o "$wheel" -d "$work/site"; done
mkdir -p device
tar -C "$work/site" -cf - --exclude='__pycache__' --exclude='*/tests' --exclude='*/test' \
  --exclude='*_test.py' --exclude='*.pyi' --exclude='*.a' --exclude='ray/dashboard/client' \
  --exclude='ray/serve' --exclude='ray/llm' --exclude='ray/jars' --exclude='ray/cpp' \
  --exclude='ray/autoscaler/gcp' --exclude='ray/autoscaler/aws' --exclude='ray/autoscaler/azure' \
  --exclude='mujoco/include' --exclude='mujoco/doc' . | xz -T0 -9 > device/site-cp312.tar.xz
mib=$(( $(stat -c %s device/site-cp312.tar.xz) / 1048576 ))
echo "device/site-cp312.tar.xz: ${mib} MiB (Python $PY_VERSION)"
(( mib < 60 )) || { echo "over 60 MiB: prune more" >&2; exit 1; }
