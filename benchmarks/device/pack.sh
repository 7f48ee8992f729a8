#!/usr/bin/env bash
# Pack what a lent GPU machine lacks (it has Python and torch, not Ray, gymnasium or MuJoCo): this
# venv's site-packages without torch and its CUDA libraries, plotting, build tools, tests and the
# parts of Ray that RLlib's training does not import, as xz archives of at most 60 MiB each, since
# one device call carries at most 64 MiB: device/part-1.tar.xz (Ray), part-2 (pyarrow), part-3
# (the rest). Carry them in successive calls while the machine stays warm (benchmarks/device/run.sh).
#   nice bash benchmarks/device/pack.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p device
common=(--exclude='__pycache__' --exclude='*/tests' --exclude='*/test' --exclude='*.pyi' --exclude='*.a')
in_site() { (cd "$site" && for p in "$@"; do compgen -G "$p"; done); }  # site-packages names matching globs
pack() {  # archive, then tar's options and the site-packages entries it holds
  local archive=$1; shift
  tar -C "$site" -cf - "${common[@]}" "$@" | xz -T0 -9 > "device/$archive"
  local mib=$(( $(stat -c %s "device/$archive") / 1048576 ))
  echo "device/$archive: ${mib} MiB"
  (( mib < 60 )) || { echo "device/$archive is over 60 MiB: prune more" >&2; exit 1; }
}
pack part-1.tar.xz --exclude='ray/dashboard/client' --exclude='ray/serve' \
  --exclude='ray/llm' --exclude='ray/jars' --exclude='ray/cpp' --exclude='ray/autoscaler/gcp' \
  --exclude='ray/autoscaler/aws' --exclude='ray/autoscaler/azure' $(in_site 'ray' 'ray-*.dist-info')
pack part-2.tar.xz --exclude='pyarrow/include' --exclude='pyarrow/src' $(in_site 'pyarrow' 'pyarrow-*.dist-info')
rest=$(cd "$site" && ls -d * | grep -v -E '^(ray|pyarrow|torch|nvidia|triton|sympy|networkx|mpmath|functorch|pip|setuptools|_distutils_hack|matplotlib|mpl_toolkits|fontTools|PIL|pillow|OpenGL|kiwisolver|contourpy|seaborn|pygments|rllib_geppo|__editable__)' )
# shellcheck disable=SC2086
pack part-3.tar.xz $rest
