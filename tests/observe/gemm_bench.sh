#!/usr/bin/env bash
# kiln bench --gemms (tools/bench_gemm.c) lists every GEMM of the plans:
# per model, the calls per step and the FLOPs of its rows (calls x FLOP)
# add up to `kiln counters`' gemm_calls and gemm_flops of the training
# step (the plan's own numbers), and every cell is a GFLOP/s figure with
# its share of the measured sgemm peak (or n/a for bf16 without oneDNN).
# No timing is asserted.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }
"$kiln" bench --gemms examples/mlp.kl examples/fashion_cnn.kl --repeats 1 --threads 1 --batch 16 > "$tmp/out" 2>&1 || fail "exit $?"
head -1 "$tmp/out"
grep -q '^kiln bench --gemms: cpu, 1 thread.*OpenBLAS core [A-Za-z0-9]*; .*sgemm peak [0-9.]* GFLOP/s' "$tmp/out" || fail "no header"
for m in mlp fashion_cnn; do
  "$kiln" counters "examples/$m.kl" --batch 16 > "$tmp/c" 2>&1 || { cat "$tmp/c"; fail "kiln counters $m"; }
  calls=$(awk '$1 == "gemm_calls" { print $2 }' "$tmp/c")
  flops=$(awk '$1 == "gemm_flops" { print $2 }' "$tmp/c")
  got=$(awk -F'|' -v m="$m.kl" '$2 == " " m " " { c += $6; f += $6 * $7 } END { printf "%d %.0f", c, f }' "$tmp/out")
  echo "$m: bench rows $got (calls, FLOPs); kiln counters $calls $flops"
  [ "${got% *}" = "$calls" ] || fail "$m: $got calls, kiln counters says $calls"
  [ "${got#* }" = "$flops" ] || fail "$m: ${got#* } FLOPs, kiln counters says $flops"
done
bad=$(grep '^| [a-z_]*\.kl ' "$tmp/out" | awk -F'|' '{ for (i = 8; i <= 10; i++) if ($i !~ /^ [0-9.]+ \([0-9]+%\) $/ && $i != " n/a ") print }')
[ -z "$bad" ] || fail "cells that are not 'GFLOP/s (share%)': $bad"
echo "every row: GFLOP/s with its share of the peak"
