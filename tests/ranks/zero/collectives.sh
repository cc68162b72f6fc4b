#!/usr/bin/env bash
# The collectives reduce_scatter, all_gather and rank_broadcast (README,
# "Many ranks"): tests/ranks/zero/collectives.c on one rank without mpirun and
# on 2, 3 and 4 ranks under it, against known values.
#
#   collectives.sh COLLECTIVES_EXE
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
source "$testdir/ranks/helpers.bash"
exe=$1
"$exe"
for np in 2 3 4; do
  "${mpi[@]}" -np "$np" "$exe"
done
echo "zero.collectives: ok"
