#!/usr/bin/env bash
# kiln build --cuda-arch embeds one CUBIN per kernel and architecture, and
# the executable still trains (on the CPU, where there is no GPU).
#
#   build_cuda_arch.sh KILN MODEL
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kiln" build "$model" -o "$tmp/exe" --cuda-arch sm_80,sm_90 2> "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
n=$(nm "$tmp/exe" | grep -c ' kl_cubin_' || true)
if [ "$n" -lt 2 ] || [ $((n % 2)) -ne 0 ]; then
  echo "FAIL: $n CUBINs embedded (want one per kernel and architecture)"
  exit 1
fi
"$tmp/exe" --steps 2 --data synthetic:300 --quiet > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
grep -q '^done: 2 steps' "$tmp/run.log" || { cat "$tmp/run.log"; exit 1; }
echo "$n CUBINs embedded ($((n / 2)) kernels x 2 architectures); the executable trains"
