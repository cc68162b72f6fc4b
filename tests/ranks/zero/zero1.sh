#!/usr/bin/env bash
# shard = zero1 (README, "Many ranks"): optimizer state partitioned across
# the ranks, against one rank with the same global batch.
#
#   zero1.sh KILN CASE   CASE: mlp | cnn | precision | resume | refused
#
# As tests/ranks/data_parallel.sh: 20 steps' losses (rtol 1e-5) and the final params and
# optimizer state of the checkpoints (tests/ranks/compare.py, rtol 1e-5;
# bf16/fp16 within their bound, tests/ranks/helpers.bash),
# mpirun --oversubscribe, one thread per rank (lib.sh). The mlp's
# dense.3.b has 10 elements and the buckets 235146 or 34442, none of which
# 3 or 4 divides: the last ranks' slices are padded.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
source "$testdir/ranks/helpers.bash"
shard_args=(--shard zero1)

case $case_ in
mlp)
  build mlp
  one ref "$tmp/mlp" --batch 48
  for np in 2 3 4; do
    ranks "$np" z$np "$tmp/mlp" --batch $((48 / np))
    same ref z$np
  done
  # Two buckets (the first weight alone, the five others), and one per
  # param; 3 ranks.
  [ "$("$kiln" ir examples/mlp.kl --after shard --ranks 3 --set shard=zero1 --set bucket=140000 | grep -c ' = reduce_scatter(')" -eq 2 ] ||
    { echo "FAIL: bucket = 140000 should make two reduce-scatters of the mlp's six gradients"; exit 1; }
  ranks 3 b140k "$tmp/mlp" --batch 16 --bucket 140000
  same ref b140k
  ranks 3 b0 "$tmp/mlp" --batch 16 --bucket 0
  same ref b0
  # Clipping by the global norm (the slices' squared norms all-reduced):
  # clip = 0.05 changes the losses, and 3 ranks follow one.
  one clip "$tmp/mlp" --batch 48 --set clip=0.05
  if compare losses "$tmp/ref.json" "$tmp/clip.json" 1e-5 > /dev/null; then
    echo "FAIL: clip = 0.05 clips nothing, so the case tests nothing"; exit 1
  fi
  ranks 3 zclip "$tmp/mlp" --batch 16 --set clip=0.05
  same clip zclip
  # accumulate 2: micro-batches of 24 on one rank, of 8 on each of 3.
  one acc "$tmp/mlp" --batch 24 --accumulate 2
  ranks 3 zacc "$tmp/mlp" --batch 8 --accumulate 2
  same acc zacc
  # The control: KILN_MPI=0 makes each process a run of its own.
  solo 2 ctl "$tmp/mlp" --batch 24
  if compare losses "$tmp/ref.json" "$tmp/ctl.json" 1e-5 > /dev/null; then
    echo "FAIL: independent runs match the reference: the comparison sees nothing"; exit 1
  fi
  ;;
cnn)
  # Batch norm per rank (tests/ranks/data_parallel.sh, cnn): the reference accumulates
  # N micro-batches of the ranks' size; running statistics left out.
  build fashion_cnn
  for np in 2 3; do
    one ref$np "$tmp/fashion_cnn" --batch 4 --accumulate "$np"
    ranks "$np" z$np "$tmp/fashion_cnn" --batch 4
    same ref$np z$np running_
  done
  ;;
resume)
  # Saved on 4 ranks (the file holds the usual full optimizer state: the
  # same names and values as one rank's), resumed on 2 (zero1) and on 1
  # (zero1, a no-op there, and dp).
  build mlp
  one ref "$tmp/mlp" --batch 48
  ranks 4 full "$tmp/mlp" --batch 12
  same ref full
  ranks 4 half "$tmp/mlp" --batch 12 --steps 10
  "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --shard zero1 --batch 24 --resume "$tmp/half.ckpt" --metrics "$tmp/on2.json" > /dev/null
  "$tmp/mlp" "${common[@]}" --batch 48 --resume "$tmp/half.ckpt" --metrics "$tmp/on1.json" > /dev/null
  "$tmp/mlp" "${common[@]}" --shard zero1 --batch 48 --resume "$tmp/half.ckpt" --metrics "$tmp/on1z.json" > /dev/null
  # And a dp checkpoint resumed under zero1 on 3 ranks.
  one dphalf "$tmp/mlp" --batch 48 --steps 10
  "${mpi[@]}" -np 3 "$tmp/mlp" "${common[@]}" --shard zero1 --batch 16 --resume "$tmp/dphalf.ckpt" --metrics "$tmp/on3.json" > /dev/null
  for m in on2 on1 on1z on3; do
    compare losses "$tmp/full.json" "$tmp/$m.json" 1e-5 || { echo "FAIL: resumed $m differs from the 4-rank run"; exit 1; }
  done
  ;;
precision)
  # bf16 and fp16: fp32 master slices and optimizer state partitioned,
  # the 16-bit copies gathered after the update; 4 ranks (padded slices:
  # 235146 elements). Compared within the 16-bit bound (near,
  # tests/ranks/helpers.bash: 2 u sqrt(20)): the ranks sum the gradients
  # in another order than one rank does, and a value within the last fp32
  # bit of a 16-bit rounding boundary rounds the other way.
  build mlp
  one bf16 "$tmp/mlp" --batch 24 --precision bf16
  ranks 4 zbf16 "$tmp/mlp" --batch 6 --precision bf16
  near bf16 bf16 zbf16
  # The 16-bit copies are what forward reads: without their gather the
  # ranks would train on the initial weights. The control: one rank of
  # another batch is outside the bound.
  one bf16b "$tmp/mlp" --batch 12 --precision bf16
  far bf16 bf16 bf16b
  # fp16 with a loss scale that overflows at first: the inf/NaN flag is
  # the all-reduced squared norm of the slices, so every rank skips the
  # steps one rank skips with 3 micro-batches of the ranks' size, and
  # backs off the same loss scale.
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  one fp16 "$tmp/mlp" --batch 8 --accumulate 3 --precision fp16 --set "$ls"
  ranks 3 zfp16 "$tmp/mlp" --batch 8 --precision fp16 --set "$ls"
  near fp16 fp16 zfp16
  one fp16b "$tmp/mlp" --batch 4 --accumulate 3 --precision fp16 --set "$ls"
  far fp16 fp16 fp16b
  skipped=$(grep '"type": "train"' "$tmp/zfp16.json" | tail -1 | sed 's/.*"skipped": \([0-9]*\).*/\1/')
  [ "$skipped" -gt 0 ] || { echo "FAIL: the fp16 case skipped no step, so it tests nothing"; exit 1; }
  echo "ok: zero1 fp16 skipped $skipped steps on every rank, as one rank did"
  ;;
refused)
  build mlp
  # A stage that does not exist, refused by every rank.
  if "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --shard zero4 > /dev/null 2> "$tmp/err.txt"; then
    echo "FAIL: --shard zero4 was accepted"; exit 1
  fi
  grep -q "shard must be none, dp, zero1, zero2 or zero3" "$tmp/err.txt" || { echo "FAIL: no clear error for zero4"; cat "$tmp/err.txt"; exit 1; }
  # Memory per rank at N = 4 from the plan against ZeRO's stage 1 with
  # fp32 params and gradients, (4 + 4 + 12 / N) Psi, Psi = 235146: params
  # and gradients whole (0.94 MB each), Adam's m and v (0.47 MB) and the
  # fp32 master (0.24 MB) in quarters (the mlp pads 2 elements).
  "$kiln" ir examples/mlp.kl --after memplan --ranks 4 --set shard=zero1 > "$tmp/mem.kir"
  grep -q "^# memory per rank (4 ranks, shard zero1, optimizer state and fp32 master partitioned): params 0.94 MB, gradients 0.94 MB, optimizer state 0.47 MB, fp32 master slices 0.24 MB, total 2.59 MB; zero1 formula with Kiln's bytes (4 + 4 + 12 / N) Psi = 2.59 MB (measured / formula 1.0000)" "$tmp/mem.kir" ||
    { echo "FAIL: kiln ir --ranks 4, zero1: the memory per rank is not the known figures"; grep "^# memory" "$tmp/mem.kir"; exit 1; }
  # The start-up line names the mode.
  "${mpi[@]}" -np 2 "$tmp/mlp" --data synthetic:600 --steps 1 --eval-every 0 --shard zero1 > "$tmp/out.txt"
  grep -q "^ranks: world 2 (mpirun (Open MPI)), shard zero1" "$tmp/out.txt" ||
    { echo "FAIL: the start-up line does not say zero1"; grep "^ranks" "$tmp/out.txt"; exit 1; }
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "zero1.$case_: ok"
