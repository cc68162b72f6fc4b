#!/usr/bin/env bash
# kiln bench --device cuda on the simulated device: every kernel and GEMM
# of the MLP's step is timed through the CUDA backend's events, the
# fused and unfused totals are printed, and the header says the timings
# are the host emulation's, meaningless for a GPU (also in --json).
#   bench.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
export KILN_SIMULATED_GPU=h200
"$kiln" bench examples/mlp.kl --device cuda --repeats 1 --batch 8 > "$tmp/bench.txt" 2> "$tmp/bench.err" ||
  { bad "kiln bench --device cuda failed"; tail -5 "$tmp/bench.err"; exit 1; }
grep -q "^kiln bench examples/mlp.kl: cuda: NVIDIA H200 (simulated device)" "$tmp/bench.txt" &&
  ok "the header names the simulated device" || bad "the header does not name the simulated device"
grep -qx "timings: the simulated device's host emulation, meaningless for a GPU's speed" "$tmp/bench.txt" &&
  ok "the timings are labelled meaningless" || bad "no label on the timings"
kernels=$(grep -cE '^[0-9]+ +kk_' "$tmp/bench.txt")
gemms=$(grep -cE '^[0-9]+ +gemm \(cuBLASLt\)' "$tmp/bench.txt")
[ "$kernels" -gt 0 ] && [ "$gemms" -gt 0 ] && ok "$kernels kernel rows and $gemms cuBLASLt GEMM rows" ||
  bad "expected kernel and GEMM rows ($kernels, $gemms)"
grep -q '^unfused plan: [0-9.]* ms per step' "$tmp/bench.txt" && ok "the unfused plan is timed" || bad "no unfused total"
"$kiln" bench examples/mlp.kl --device cuda --repeats 1 --batch 8 --json > "$tmp/bench.json" 2> /dev/null &&
  grep -q '"simulated_device": true' "$tmp/bench.json" && ok "--json says simulated_device" ||
  bad "--json does not say simulated_device"
exit $fail
