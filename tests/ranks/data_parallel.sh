#!/usr/bin/env bash
# Many ranks (README, "Many ranks"): the same executable under mpirun,
# data parallel, against one rank with the same global batch.
#
#   data_parallel.sh KILN CASE   CASE: launch | mlp | cnn | precision | resume | kill |
#                              settings_differ | timeout
#
# The comparisons and launches: tests/ranks/helpers.bash.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"

case $case_ in
launch)
  build mlp
  # Without a launcher: one rank, MPI never opened, as before.
  "$tmp/mlp" "${loud[@]}" --steps 2 > "$tmp/one.txt"
  grep -q "^ranks: world 1 (no MPI launcher), shard none (one rank)" "$tmp/one.txt" ||
    { echo "FAIL: a run without mpirun does not say it is one rank"; cat "$tmp/one.txt"; exit 1; }
  # Under mpirun: rank 0 alone prints (one start-up line, one summary).
  "${mpi[@]}" -np 3 "$tmp/mlp" "${loud[@]}" --batch 8 > "$tmp/three.txt"
  grep -q "^ranks: world 3 (mpirun (Open MPI)), shard dp" "$tmp/three.txt" &&
    grep -q "effective batch 24 (batch 8 x accumulate 1 x ranks 3)" "$tmp/three.txt" &&
    [ "$(grep -c '^done:' "$tmp/three.txt")" -eq 1 ] && [ "$(grep -c '^ranks:' "$tmp/three.txt")" -eq 1 ] ||
    { echo "FAIL: 3 ranks: expected one start-up line naming world 3 and one summary"; cat "$tmp/three.txt"; exit 1; }
  # lr_scaling counts the ranks: batch 8 x 3 ranks against base batch 8.
  "${mpi[@]}" -np 3 "$tmp/mlp" "${loud[@]}" --steps 1 --batch 8 --set lr_scaling=linear --set base_batch=8 > "$tmp/lr.txt"
  grep -q "lr 0.003 (linear scaling of 0.001 from base batch 8)" "$tmp/lr.txt" ||
    { echo "FAIL: lr_scaling does not count the ranks"; grep "effective" "$tmp/lr.txt"; exit 1; }
  grep -q "^memory per rank (3 ranks, shard dp" "$tmp/three.txt" ||
    { echo "FAIL: no memory per rank at start-up"; exit 1; }
  echo "ok: one rank without mpirun, rank 0 alone prints under mpirun"
  # The memory per rank against ZeRO's formulas, Psi = 235146 (the mlp's
  # params; fp32 Adam: 4 + 4 + 8 bytes per param, which is dp's 16 Psi):
  # 16 Psi = 3.76 MB, zero1 4 Psi + 12 Psi / 4 = 1.65 MB, zero2 2 Psi +
  # 14 Psi / 4 = 1.29 MB, zero3 16 Psi / 4 = 0.94 MB.
  "$kiln" ir examples/mlp.kl --after memplan --ranks 4 > "$tmp/mem.kir"
  grep -q "^# memory per rank (4 ranks, shard dp, everything replicated): params 0.94 MB, gradients 0.94 MB, optimizer and other state 1.88 MB, total 3.76 MB = 16.00 bytes per param; ZeRO formulas (K = 12, Psi = 235146 params): dp 16 Psi = 3.76 MB, zero1 1.65 MB, zero2 1.29 MB, zero3 0.94 MB" "$tmp/mem.kir" ||
    { echo "FAIL: kiln ir --ranks 4: the memory per rank is not the known figures"; grep "^# memory" "$tmp/mem.kir"; exit 1; }
  echo "ok: memory per rank against the ZeRO formulas"
  # The control: KILN_MPI=0 makes each process of mpirun a run of its
  # own (batch 24 each), which must not match the 48-sample reference:
  # the comparison can fail.
  one ref "$tmp/mlp" --batch 48
  solo 2 ctl "$tmp/mlp" --batch 24
  if compare losses "$tmp/ref.json" "$tmp/ctl.json" 1e-5 > /dev/null; then
    echo "FAIL: independent runs of batch 24 match the batch-48 run: the comparison sees nothing"; exit 1
  fi
  echo "ok: the control (KILN_MPI=0: two independent runs) differs from the reference"
  # Settings that are not built are refused by every rank, and the job ends.
  if "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --tensor-parallel 2 > /dev/null 2> "$tmp/err.txt"; then
    echo "FAIL: --tensor-parallel 2 without a split was accepted"; exit 1
  fi
  grep -q "tensor_parallel = 2, but no call is marked split" "$tmp/err.txt" ||
    { echo "FAIL: no clear error for --tensor-parallel 2"; cat "$tmp/err.txt"; exit 1; }
  # An error on rank 0 alone (it alone writes files) ends the job.
  if "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --save "$tmp/no/such/dir/x.ckpt" > /dev/null 2> "$tmp/err.txt"; then
    echo "FAIL: an unwritable --save was accepted"; exit 1
  fi
  grep -q "no/such/dir" "$tmp/err.txt" || { echo "FAIL: the error does not name the path"; cat "$tmp/err.txt"; exit 1; }
  echo "ok: zero3 refused; an error on rank 0 ends the job"
  ;;
mlp)
  # No batch norm: N ranks of batch 48/N against one rank of batch 48.
  # dense.3.b has 10 elements (not a multiple of 3 or 4).
  build mlp
  one ref "$tmp/mlp" --batch 48
  for np in 2 3 4; do
    ranks "$np" r$np "$tmp/mlp" --batch $((48 / np))
    same ref r$np
  done
  # Buckets: one all_reduce per gradient (0), and 140000 bytes: the first
  # weight (802816 bytes) alone, the five others in one bucket.
  ranks 2 b0 "$tmp/mlp" --batch 24 --bucket 0
  same ref b0
  [ "$("$kiln" ir examples/mlp.kl --after shard --ranks 3 --set bucket=140000 | grep -c ' = all_reduce(')" -eq 2 ] ||
    { echo "FAIL: bucket = 140000 should make two all-reduces of the mlp's six gradients"; exit 1; }
  ranks 3 b140k "$tmp/mlp" --batch 16 --bucket 140000
  same ref b140k
  # accumulate 2: micro-batches of 24 on one rank, of 8 on each of 3.
  one acc "$tmp/mlp" --batch 24 --accumulate 2
  ranks 3 racc "$tmp/mlp" --batch 8 --accumulate 2
  same acc racc
  ;;
cnn)
  # Batch norm normalises over each rank's own samples (as PyTorch's DDP
  # without SyncBatchNorm), so the reference is one rank with N
  # micro-batches of the same size accumulated; the running statistics
  # (averaged across ranks after each step, updated N times in a row on
  # one rank) are left out of the comparison.
  build fashion_cnn
  for np in 2 3; do
    one ref$np "$tmp/fashion_cnn" --batch 4 --accumulate "$np"
    ranks "$np" r$np "$tmp/fashion_cnn" --batch 4
    same ref$np r$np running_
  done
  ;;
precision)
  build mlp
  # bf16 and fp16 within their bound (near, tests/ranks/helpers.bash: the
  # ranks sum the gradients in another order, and a value at a 16-bit
  # rounding boundary may round the other way); the control, half the
  # batch on one rank, outside it.
  one bf16 "$tmp/mlp" --batch 24 --precision bf16
  ranks 2 rbf16 "$tmp/mlp" --batch 12 --precision bf16
  near bf16 bf16 rbf16
  ranks 3 r3bf16 "$tmp/mlp" --batch 8 --precision bf16
  near bf16 bf16 r3bf16
  one bf16b "$tmp/mlp" --batch 12 --precision bf16
  far bf16 bf16 bf16b
  # fp16 with a loss scale that overflows at first: a step is skipped on
  # every rank when any rank's f16 gradients overflow, as it is on one
  # rank when any micro-batch's do (so the reference accumulates 3
  # micro-batches of the ranks' size).
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  one fp16 "$tmp/mlp" --batch 8 --accumulate 3 --precision fp16 --set "$ls"
  ranks 3 rfp16 "$tmp/mlp" --batch 8 --precision fp16 --set "$ls"
  near fp16 fp16 rfp16
  skipped=$(grep '"type": "train"' "$tmp/rfp16.json" | tail -1 | sed 's/.*"skipped": \([0-9]*\).*/\1/')
  [ "$skipped" -gt 0 ] || { echo "FAIL: the fp16 case skipped no step, so it tests nothing"; exit 1; }
  echo "ok: fp16 skipped $skipped steps on every rank, as one rank did"
  ;;
resume)
  # Saved on 4 ranks at step 10, resumed on 2 and on 1 with the same
  # global batch: steps 11-20 as in an uninterrupted 4-rank run.
  build mlp
  ranks 4 full "$tmp/mlp" --batch 6
  ranks 4 half "$tmp/mlp" --batch 6 --steps 10
  "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --batch 12 --resume "$tmp/half.ckpt" --metrics "$tmp/on2.json" > /dev/null
  "$tmp/mlp" "${common[@]}" --batch 24 --resume "$tmp/half.ckpt" --metrics "$tmp/on1.json" > /dev/null
  for m in on2 on1; do
    compare losses "$tmp/full.json" "$tmp/$m.json" 1e-5 || { echo "FAIL: resumed $m differs from the 4-rank run"; exit 1; }
  done
  # Periodic checkpoints on 2 ranks: every rank joins the averaging of
  # batch norm's statistics, rank 0 writes; step 10's file is the one a
  # 10-step run ends with (over the same lr schedule span, which the
  # checkpoint records: the longer run's).
  build fashion_cnn
  ranks 2 per "$tmp/fashion_cnn" --batch 4 --save-every 10
  span=$("$kiln" ckpt "$tmp/per.ckpt.step-10" | sed -n 's/^lr schedule: spans \([0-9]*\) steps.*/\1/p')
  ranks 2 ten "$tmp/fashion_cnn" --batch 4 --steps 10 --schedule-steps "$span"
  cmp "$tmp/ten.ckpt" "$tmp/per.ckpt.step-10" || { echo "FAIL: 2 ranks: --save-every 10 wrote another step 10"; exit 1; }
  # --eval-only is one rank's: refused under mpirun, not run twice.
  if "${mpi[@]}" -np 2 "$tmp/fashion_cnn" --eval-only --resume "$tmp/ten.ckpt" > /dev/null 2> "$tmp/eo.txt"; then
    echo "FAIL: --eval-only ran on 2 ranks"; exit 1
  fi
  grep -q "eval-only runs on one rank" "$tmp/eo.txt" || { echo "FAIL: no clear error"; cat "$tmp/eo.txt"; exit 1; }
  ;;
kill)
  # A rank killed mid-run ends the job with an error, never a hang.
  build mlp
  (set +e; cd "$tmp" && timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
     sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' "$tmp/mlp" \
     --data synthetic:4000 --batch 8 --epochs 1000 --eval-every 0 --log-every 50 > out.txt 2> err.txt
   echo $? > rc) &
  job=$!
  for _ in $(seq 300); do [ -s "$tmp/pid.1" ] && grep -q "step" "$tmp/out.txt" 2> /dev/null && break; sleep 0.1; done
  [ -s "$tmp/pid.1" ] || { echo "FAIL: rank 1 did not start"; exit 1; }
  kill -9 "$(cat "$tmp/pid.1")"
  t0=$(date +%s)
  wait "$job" || true
  took=$(($(date +%s) - t0))
  rc=$(cat "$tmp/rc")
  echo "the job ended $took s after rank 1 was killed, exit $rc"
  tail -3 "$tmp/err.txt"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: exit $rc (124: it hung until the timeout)"; exit 1; }
  [ "$took" -le 30 ] || { echo "FAIL: took $took s (over 30)"; exit 1; }
  grep -q "rank 1.*signal 9" "$tmp/err.txt" || { echo "FAIL: the error does not name rank 1 and the signal"; exit 1; }
  ;;
settings_differ)
  # One rank started with another setting: every rank refuses before the
  # first step, rank 0 naming the setting, the rank and both values
  # (driver/train_agree.c); never a hang (under timeout 60: 124 fails)
  # nor a run that trains apart and exits 0.
  build mlp
  base=("$tmp/mlp" "${common[@]}" --batch 8 --steps 3)
  differs() {
    local want=$1 rc=0; shift
    timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 "${base[@]}" : -np 1 "${base[@]}" "$@" \
      > /dev/null 2> "$tmp/err.txt" || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: rank 1 with $*: exit $rc (0: trained apart; 124: hung)"; cat "$tmp/err.txt"; exit 1; }
    grep -qF "$want" "$tmp/err.txt" || { echo "FAIL: rank 1 with $*: the error does not say '$want'"; cat "$tmp/err.txt"; exit 1; }
    echo "ok: rank 1 with $*: $(grep -m1 -o "rank 1 has.*" "$tmp/err.txt")"
  }
  differs "rank 1 has optimizer's lr = 0.01, rank 0 has lr = 0.001" --lr 0.01
  differs "rank 1 has shard = zero2, rank 0 has shard = (the default)" --shard zero2
  differs "rank 1 has precision = bf16, rank 0 has precision = (the default)" --precision bf16
  differs "rank 1 has seed = 7" --seed 7
  differs "rank 1 has batch = 4, rank 0 has batch = 8" --batch 4
  # Per-rank settings may differ (threads, comm_timeout): the job trains.
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 "${base[@]}" : -np 1 "${base[@]}" --threads 2 \
    --comm-timeout 100 > /dev/null || { echo "FAIL: ranks with other --threads and --comm-timeout were refused"; exit 1; }
  echo "ok: other --threads and --comm-timeout on one rank are allowed"
  ;;
timeout)
  # A rank stopped (SIGSTOP) mid-run: the others' collective times out
  # after --comm-timeout seconds, the error names the collective and the
  # rank that did not arrive, and the job ends non-zero (MPI_Abort)
  # within a bound, never a hang.
  build mlp
  (set +e; cd "$tmp" && timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
     sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' "$tmp/mlp" \
     --data synthetic:4000 --batch 8 --epochs 1000 --eval-every 0 --log-every 50 --comm-timeout 3 > out.txt 2> err.txt
   echo $? > rc) &
  job=$!
  for _ in $(seq 300); do [ -s "$tmp/pid.1" ] && grep -q "step" "$tmp/out.txt" 2> /dev/null && break; sleep 0.1; done
  [ -s "$tmp/pid.1" ] || { echo "FAIL: rank 1 did not start"; exit 1; }
  stopped=$(cat "$tmp/pid.1")
  kill -STOP "$stopped"
  t0=$(date +%s)
  wait "$job" || true
  took=$(($(date +%s) - t0))
  kill -KILL "$stopped" 2> /dev/null || true
  rc=$(cat "$tmp/rc")
  echo "the job ended $took s after rank 1 was stopped, exit $rc"
  grep "did not arrive" "$tmp/err.txt" | head -2
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: exit $rc (124: it hung until the timeout)"; tail -5 "$tmp/err.txt"; exit 1; }
  [ "$took" -ge 3 ] && [ "$took" -le 20 ] || { echo "FAIL: took $took s (3 s timeout: expected 3-20 s)"; exit 1; }
  grep -q "rank 0: .* did not complete within 3 s (comm_timeout): rank 1 did not arrive (rank 0 waited)" "$tmp/err.txt" ||
    { echo "FAIL: the error does not name the collective and rank 1"; cat "$tmp/err.txt"; exit 1; }
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "ranks.$case_: ok"
