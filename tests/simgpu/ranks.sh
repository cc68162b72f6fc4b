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
#   ranks.sh KILN CASE   CASE: dp | zero1 | zero2 | zero3 | tp | tp_dp | np3 | bf16 |
#                              no_graph | too_few | kill | timeout
#   ranks.sh KILN nccl_device NCCL_CHECK
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
tp_dp)
  # 4 ranks: tensor-parallel pairs and, across them, data-parallel pairs
  # (two NCCL communicators per rank on the one communication stream).
  "$kiln" build tests/ranks/tp_mlp.kl -o "$tmp/m"
  pair 4 --batch 12 --tensor-parallel 2
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
too_few)
  # More ranks on the machine than simulated devices: the rank without
  # one is refused by name, as on a real machine.
  mlp
  rc=0
  KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_COUNT=2 "${mpi[@]}" -np 3 "$tmp/m" "${common[@]}" --device cuda \
    > /dev/null 2> "$tmp/err.txt" || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: 3 ranks on 2 devices: exit $rc"; exit 1; }
  grep -q "rank 2 of 3 (local rank 2 of 3 on this machine): no GPU 2 (2 present)" "$tmp/err.txt" ||
    { echo "FAIL: rank 2 is not refused by name"; grep -v "^\[" "$tmp/err.txt" | head -5; exit 1; }
  echo "ok: $(grep -m1 -o "rank 2 of 3.*" "$tmp/err.txt")"
  ;;
kill | timeout)
  # kill: rank 1 killed (SIGKILL) mid-run; timeout: rank 1 stopped
  # (SIGSTOP), the others wait in the device's NCCL collectives. The job
  # ends non-zero with an error naming rank 1 within a bound, never a hang
  # (timeout 60: 124 fails).
  mlp
  [ "$case_" = timeout ] && limit=(--comm-timeout 3) || limit=()
  (set +e; cd "$tmp" && KILN_SIMULATED_GPU=h200 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
     sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' "$tmp/m" --device cuda \
     --data synthetic:4000 --batch 8 --epochs 1000 --eval-every 0 --log-every 50 ${limit[@]+"${limit[@]}"} > out.txt 2> err.txt
   echo $? > rc) &
  job=$!
  # (training: a progress line with its loss)
  for _ in $(seq 600); do [ -s "$tmp/pid.1" ] && grep -q "loss [0-9]" "$tmp/out.txt" 2> /dev/null && break; sleep 0.1; done
  [ -s "$tmp/pid.1" ] && grep -q "loss [0-9]" "$tmp/out.txt" || { echo "FAIL: the job did not start training"; cat "$tmp/err.txt"; exit 1; }
  # Mid-training. Each step rank 0 waits in two places for rank 1: in
  # the device's NCCL collectives (the host waits for the device to read
  # the loss) and in the loss sums' MPI all-reduce. comm_timeout watches
  # both (the backend's host_wait, the MPI collectives' watchdog);
  # without the first, a stop that lands in the device's collectives
  # hung the job until the 60 s timeout.
  sleep 0.5
  victim=$(cat "$tmp/pid.1")
  [ "$case_" = kill ] && kill -9 "$victim" || kill -STOP "$victim"
  t0=$(date +%s)
  wait "$job" || true
  took=$(($(date +%s) - t0))
  kill -KILL "$victim" 2> /dev/null || true
  rc=$(cat "$tmp/rc")
  echo "the job ended $took s after rank 1 was $([ "$case_" = kill ] && echo killed || echo stopped), exit $rc"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: exit $rc (124: it hung until the timeout)"; tail -5 "$tmp/err.txt"; exit 1; }
  if [ "$case_" = kill ]; then
    [ "$took" -le 30 ] || { echo "FAIL: took $took s (over 30)"; exit 1; }
    grep -q "rank 1.*signal 9" "$tmp/err.txt" || { echo "FAIL: the error does not name rank 1 and the signal"; cat "$tmp/err.txt"; exit 1; }
  else
    [ "$took" -ge 3 ] && [ "$took" -le 20 ] || { echo "FAIL: took $took s (3 s timeout: expected 3-20 s)"; exit 1; }
    grep -Eq "rank 0: (the GPU's queued work with its NCCL collectives \(.*\)|all_reduce sum of the loss and metric sums .*) did not complete within 3 s \(comm_timeout\): rank 1 did not arrive \(rank 0 waited\)" "$tmp/err.txt" ||
      { echo "FAIL: the error does not name what did not complete and rank 1"; grep -v "^\[" "$tmp/err.txt" | head; exit 1; }
    grep -m1 "did not arrive" "$tmp/err.txt"
  fi
  ;;
nccl_device)
  # The backend's collectives alone (tests/ranks/comm/nccl_check.c device,
  # its path the third argument): every kind in f32, bf16 and f16 on 2 and
  # 3 ranks, an odd count (reduce_scatter's operand padded on the device),
  # in place and not, bit for bit against what each collective means.
  check=${3:?nccl_check}
  for np in 2 3; do
    KILN_SIMULATED_GPU=h200 "${mpi[@]}" -np "$np" "$check" device > "$tmp/nd$np.out" 2> "$tmp/nd$np.err" ||
      { echo "FAIL: nccl_check device on $np ranks"; cat "$tmp/nd$np.out"; grep -v "^\[" "$tmp/nd$np.err" | head -5; exit 1; }
    [ "$(grep -c "^ok: rank [0-9] of $np: 24 collectives" "$tmp/nd$np.out")" -eq "$np" ] ||
      { echo "FAIL: not every rank of $np checked 24 collectives"; cat "$tmp/nd$np.out"; exit 1; }
    ! grep -q "simulated device:" "$tmp/nd$np.err" || { echo "FAIL: the simulator reported:"; grep "simulated device:" "$tmp/nd$np.err" | head -3; exit 1; }
    echo "ok: $np ranks: $(grep -m1 '^ok' "$tmp/nd$np.out")"
  done
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "simgpu.ranks.$case_: ok"
