#!/usr/bin/env bash
# Pack what a lent GPU machine lacks (it has Python and torch, not Ray, gymnasium or MuJoCo) into
# one xz archive under the carry limit (64 MiB): this venv's site-packages without torch and its
# CUDA libraries, plotting, build tools, tests and Ray's parts that RLlib's training does not
# import. The device unpacks it and puts it on PYTHONPATH (benchmarks/device/run.sh).
#   bash benchmarks/device/pack.sh [archive]        # default: device/site-packages.tar.xz
set -euo pipefail
cd "$(dirname "$0")/../.."
archive=${1:-device/site-packages.tar.xz}
mkdir -p "$(dirname "$archive")"
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
tar -C "$site" -cf - \
  --exclude='torch' --exclude='torch-*' --exclude='nvidia*' --exclude='triton*' \
  --exclude='sympy*' --exclude='networkx*' --exclude='mpmath*' --exclude='functorch' \
  --exclude='pip' --exclude='pip-*' --exclude='setuptools*' --exclude='_distutils_hack' \
  --exclude='matplotlib*' --exclude='mpl_toolkits' --exclude='fontTools*' --exclude='PIL' \
  --exclude='pillow*' --exclude='OpenGL*' --exclude='kiwisolver*' --exclude='contourpy*' \
  --exclude='seaborn*' --exclude='pygments*' --exclude='rllib_geppo*' --exclude='__editable__*' \
  --exclude='*/tests' --exclude='*/test' --exclude='__pycache__' --exclude='*.pyi' \
  --exclude='ray/dashboard/client' --exclude='ray/serve' --exclude='ray/data' \
  --exclude='ray/llm' --exclude='ray/jars' --exclude='ray/cpp' --exclude='ray/autoscaler/gcp' \
  --exclude='ray/autoscaler/aws' --exclude='ray/autoscaler/azure' --exclude='pyarrow/include' \
  --exclude='pyarrow/src' --exclude='*.a' \
  . | xz -T0 -9 > "$archive"
ls -l "$archive"
