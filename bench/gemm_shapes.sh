#!/usr/bin/env bash
# The GEMM library comparison on the plans' own shapes (issue 17,
# deliverable 5): every distinct GEMM of the examples' fp32 training plans
# (matmuls and im2col convolutions) through the CPU backend as fp32
# (OpenBLAS sgemm), bf16 (oneDNN, where the CPU has bf16 instructions) and
# f16 (the backend's path), in GFLOP/s and as a share of the machine's
# sgemm peak measured in the same run (2048^3). One thread, CPU time.
#
#   bench/gemm_shapes.sh [REPEATS] [MODELS...]   (defaults: 20 fashion_cnn mlp)
#
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this command alone
# (a workplace may pin OpenBLAS to AVX2 kernels with them); the OpenBLAS
# core in use is printed in the first line.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-20}
shift $(( $# >= 1 ? 1 : 0 )) || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(fashion_cnn mlp)
kiln=./build/kiln
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
files=()
for m in "${models[@]}"; do files+=("examples/$m.kl"); done
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-} in the environment; unset for the run"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$kiln" bench --gemms "${files[@]}" --repeats "$repeats" --threads 1
