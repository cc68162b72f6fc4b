#!/usr/bin/env bash
# Fusion regressions fail here: the CNN's fused plan has fewer kernels than
# the unfused one, and each pattern makes the groups it should.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
model=examples/fashion_cnn.kl
fused=$("$kiln" ir "$model" --kernels | grep -c '^void kk_')
unfused=$("$kiln" ir "$model" --kernels --no-fusion | grep -c '^void kk_')
echo "kernels: fused $fused, unfused $unfused"
[ "$fused" -lt "$unfused" ] || { echo "FAIL: fusion did not reduce the kernel count"; exit 1; }

ir=$("$kiln" ir "$model")
# The ops of each group, by pattern: "pattern: op op op" per group.
groups=$(printf '%s\n' "$ir" | kiln_ir_groups)
printf '%s\n' "$groups"
expect() { kiln_expect_groups "$1" "$2" "$groups"; }
expect 1 "elementwise: cast div sub div"
expect 2 "batchnorm: batchnorm relu"
expect 2 "batchnorm_grad: relu_grad batchnorm_grad"
expect 1 "softmax_cross_entropy: cross_entropy accuracy cross_entropy_grad"
expect 1 "gemm_epilogue: matmul add relu"
expect 1 "gemm_epilogue: matmul relu_grad sum_to"
expect 2 "pool: maxpool"
# All ten parameter updates in one multi-tensor kernel (up to 15 Adam
# updates fit its 64 buffers).
expect 1 "optimizer:$(printf ' adam_update%.0s' $(seq 10))"
echo "fusion patterns as expected"
