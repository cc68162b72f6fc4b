#!/usr/bin/env bash
# A 3,000-line chain of mixed ops (about 10,000 ops as written: matmuls
# with activations, row sums, reshapes, exp, sigmoid; bench/depth.sh
# mixed) compiles through every pass in well under 30 s, with the kernels
# main made of it.
#
#   ir_long_chain.sh KILN
#
# Fusion's acyclicity walk once scanned the whole range of every group it
# met, and the gradient accumulation makes nested groups that span the
# backward pass: 43 s on this chain (116 s on the issue's machine, issue
# 32 item 23); near-linear now (docs/notes/irchain.md).
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
kiln=$1
new_tmpdir
model=$tmp/chain.kl
"$(dirname "$0")/../../bench/depth.sh" --model mixed 3000 > "$model"

start=$(date +%s%N)
rc=0
timeout 30 "$kiln" ir "$model" --after all > "$tmp/all.kir" || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "kiln ir --after all: ${ms} ms, exit $rc"
[ "$rc" -eq 0 ] || { echo "FAIL: kiln ir exited $rc (124: past the 30 s limit)"; exit 1; }

# The groups as the unbounded walk made them (counted on main's code):
# every matmul its own gemm kernel, and so on.
count() { grep -o "group [0-9]* $1\$" "$tmp/all.kir" | sort -u | wc -l; }
expect() {
  [ "$2" -eq "$3" ] || { echo "FAIL: $1: $2, expected $3"; exit 1; }
  echo "$1: $2"
}
expect "matmuls" "$(grep -c ' = matmul(' "$tmp/all.kir")" 5399
expect "gemm_epilogue groups" "$(count gemm_epilogue)" 5399
expect "elementwise groups" "$(count elementwise)" 4202
expect "reduction groups" "$(count reduction)" 1200
expect "groups" "$(grep -o 'group [0-9]* [a-z_]*$' "$tmp/all.kir" | sort -u | wc -l)" 10803
expect "nodes" "$(grep -c ' = ' "$tmp/all.kir")" 26421
