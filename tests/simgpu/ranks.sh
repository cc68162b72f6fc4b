#!/usr/bin/env bash
# Many ranks on the simulated device (docs/guides/gpu.md, "Many ranks on
# the simulated device"): mpirun jobs on --device cuda with
# KILN_SIMULATED_GPU=h200, each rank on its own device (its local rank),
# their collectives through the simulated NCCL (tests/simgpu/sim_nccl.c),
# against the same jobs on CPU ranks: 20 steps' losses and the final
# params and optimizer state (tests/ranks/helpers.bash's `same`, rtol
# 1e-5: the GEMMs sum in another order; bf16 with `near`). Every run must
# be free of the simulator's reports ("simulated device:" on stderr).
#
#   ranks.sh KILN CASE   CASE: dp | zero1 | zero2 | zero3 | tp | np3 | bf16 |
#                              no_graph | mismatch | kill | timeout
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"
export KILN_SIMULATED_GPU_COUNT=8
# gpu N NAME EXE ARGS...: N ranks on the simulated device (not --quiet: rank
# 0's start-up line names the device); its output in NAME.out and NAME.err.
gpu() {
  local np=$1 n=$2 exe=$3; shift 3
  KILN_SIMULATED_GPU=h200 "${mpi[@]}" -np "$np" "$exe" "${loud[@]}" --device cuda \
    ${shard_args[@]+"${shard_args[@]}"} --metrics "$tmp/$n.json" --save "$tmp/$n.ckpt" "$@" > "$tmp/$n.out" 2> "$tmp/$n.err" ||
    { echo "FAIL: $np ranks on the simulated device ($*)"; grep -E "error|simulated device:|signal" "$tmp/$n.err" | head -8; exit 1; }
  grep -q "cuda: NVIDIA H200 (simulated device)" "$tmp/$n.out" ||
    { echo "FAIL: the run does not say it is on the simulated device"; exit 1; }
  if grep -q "simulated device:" "$tmp/$n.err"; then
    echo "FAIL: the simulator reported:"; grep "simulated device:" "$tmp/$n.err" | head -5; exit 1
  fi
}
# pair N ARGS...: N CPU ranks and N simulated-device ranks, the same.
pair() {
  local np=$1; shift
  ranks "$np" cpu$np "$tmp/m" --device cpu "$@"
  gpu "$np" gpu$np "$tmp/m" "$@"
  same cpu$np gpu$np
  echo "ok: $np ranks ${shard_args[*]:-dp} $*: the simulated device's run agrees with the CPU ranks'"
}
mlp() { "$kiln" build examples/mlp.kl -o "$tmp/m"; }

case $case_ in
dp)
  mlp
  pair 2 --batch 24
  # The control: one rank with half the global batch differs.
  one half "$tmp/m" --batch 24
  differ half gpu2
  ;;
zero1 | zero2 | zero3)
  mlp
  shard_args=(--shard "$case_")
  pair 2 --batch 24
  ;;
tp)
  # tests/ranks/tp_mlp.kl's column/row pair split over 2 ranks.
  "$kiln" build tests/ranks/tp_mlp.kl -o "$tmp/m"
  pair 2 --batch 24 --tensor-parallel 2
  ;;
np3)
  # 3 ranks, zero2: the buckets' slices padded (3 divides none of them).
  mlp
  shard_args=(--shard zero2)
  pair 3 --batch 16
  ;;
bf16)
  mlp
  ranks 2 cpu "$tmp/m" --device cpu --batch 24 --precision bf16
  gpu 2 gpu "$tmp/m" --batch 24 --precision bf16
  near bf16 cpu gpu
  echo "ok: 2 ranks bf16: the simulated device's run is within the bf16 bound of the CPU ranks'"
  ;;
no_graph)
  # Without CUDA graphs: the collectives are queued step by step.
  mlp
  shard_args=(--shard zero3)
  pair 2 --batch 24 --no-cuda-graph
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "simgpu.ranks.$case_: ok"
