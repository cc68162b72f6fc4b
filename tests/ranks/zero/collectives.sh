#!/usr/bin/env bash
# The collectives reduce_scatter, all_gather and rank_broadcast (README,
# "Many ranks"): tests/ranks/zero/collectives.c on one rank without mpirun and
# on 2, 3 and 4 ranks under it, against known values.
#
#   collectives.sh COLLECTIVES_EXE
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
exe=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
command -v mpirun > /dev/null || { echo "FAIL: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 1; }
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
"$exe"
for np in 2 3 4; do
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" "$exe"
done
echo "zero.collectives: ok"
