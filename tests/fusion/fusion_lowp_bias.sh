#!/usr/bin/env bash
# fp16's and bf16's bias gradients fuse with their GEMM's epilogue as
# fp32's do (issue 32 item 3): the MLP's relu_grad, its widening cast and
# the column sum (sum_to) in one kernel with the GEMM that makes dy, the
# sum reading the stored 16-bit values (passes/fusion.c
# column_sum_of_stored, codegen/k_colsum.c), so no fp32 copy of dy is
# stored and read back by a reduction kernel of its own.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
model=examples/mlp.kl
count() { "$kiln" ir "$model" --set precision="$1" --kernels | grep -c '^void kk_'; }
fp32=$(count fp32)
for prec in fp16 bf16; do
  groups=$("$kiln" ir "$model" --set precision="$prec" | kiln_ir_groups)
  printf '%s: %s\n' "$prec" "$(printf '%s\n' "$groups" | grep -E 'sum_to' | tr '\n' ';')"
  kiln_expect_groups 2 "gemm_epilogue: matmul relu_grad cast sum_to" "$groups"
  # Only the last layer's bias gradient (of the loss gradient) is a
  # reduction of its own, as at fp32.
  kiln_expect_groups 1 "reduction: sum_to" "$groups"
  n=$(count "$prec")
  echo "$prec kernels $n, fp32 $fp32"
done
echo "16-bit bias gradients fused"
