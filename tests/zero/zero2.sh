#!/usr/bin/env bash
# shard = zero2 (README, "Many ranks"): gradients, optimizer state and the
# fp32 master partitioned across the ranks, against one rank with the
# same global batch.
#
#   zero2.sh KILN CASE   CASE: mlp | cnn | precision | resume | plan
#
# As tests/ranks.sh (tests/ranks_helpers.bash): 20 steps' losses and the
# final params and optimizer state (rtol 1e-5), mpirun --oversubscribe,
# one thread per rank (lib.sh). The mlp's 235146 params, its buckets and
# dense.3.b (10 elements) divide by neither 3 nor 4: slices are padded.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
case_=$2
here=$(cd "$(dirname "$0")/.." && pwd)
new_tmpdir
source "$here/ranks_helpers.bash"
shard_args=(--shard zero2)

case $case_ in
mlp)
  build mlp
  one ref "$tmp/mlp" --batch 48
  for np in 2 3 4; do
    ranks "$np" z$np "$tmp/mlp" --batch $((48 / np))
    same ref z$np
  done
  # One bucket per param (bucket = 0): six reduce-scatters.
  ranks 3 b0 "$tmp/mlp" --batch 16 --bucket 0
  same ref b0
  # accumulate 2: each micro-batch's slice summed into this rank's slice
  # of the accumulator; with clipping by the global norm (clip = 0.05
  # clips: the control below).
  one acc "$tmp/mlp" --batch 24 --accumulate 2 --set clip=0.05
  one accnoclip "$tmp/mlp" --batch 24 --accumulate 2
  differ acc accnoclip
  ranks 3 zacc "$tmp/mlp" --batch 8 --accumulate 2 --set clip=0.05
  same acc zacc
  # The control: KILN_MPI=0 makes each process a run of its own.
  KILN_MPI=0 ranks 2 ctl "$tmp/mlp" --batch 24
  differ ref ctl
  # The start-up lines name the mode and the memory per rank.
  "${mpi[@]}" -np 2 "$tmp/mlp" --data synthetic:600 --steps 1 --eval-every 0 --shard zero2 > "$tmp/out.txt"
  grep -q "^ranks: world 2 (mpirun (Open MPI)), shard zero2" "$tmp/out.txt" &&
    grep -q "^memory per rank (2 ranks, shard zero2, gradients, optimizer state and fp32 master partitioned)" "$tmp/out.txt" ||
    { echo "FAIL: the start-up lines do not say zero2"; grep -E "^(ranks|memory)" "$tmp/out.txt"; exit 1; }
  ;;
cnn)
  # Batch norm per rank (tests/ranks.sh, cnn): the reference accumulates
  # N micro-batches of the ranks' size; running statistics left out.
  build fashion_cnn
  for np in 2 3; do
    one ref$np "$tmp/fashion_cnn" --batch 4 --accumulate "$np"
    ranks "$np" z$np "$tmp/fashion_cnn" --batch 4
    same ref$np z$np running_
  done
  ;;
precision)
  # bf16 on 4 ranks (on 3, dp and zero alike differ from one rank by 3e-5:
  # tests/zero/zero1.sh, precision), fp16 on 3 with a loss scale that
  # overflows at first: every rank skips the steps one rank skips.
  build mlp
  one bf16 "$tmp/mlp" --batch 24 --precision bf16
  ranks 4 zbf16 "$tmp/mlp" --batch 6 --precision bf16
  same bf16 zbf16
  # bf16 with accumulate 2: each micro-batch's gradient reduce-scattered
  # into the fp32 accumulator's slice.
  one bf16acc "$tmp/mlp" --batch 12 --accumulate 2 --precision bf16
  ranks 4 zbf16acc "$tmp/mlp" --batch 3 --accumulate 2 --precision bf16
  same bf16acc zbf16acc
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  one fp16 "$tmp/mlp" --batch 8 --accumulate 3 --precision fp16 --set "$ls"
  ranks 3 zfp16 "$tmp/mlp" --batch 8 --precision fp16 --set "$ls"
  same fp16 zfp16
  skipped=$(grep '"type": "train"' "$tmp/zfp16.json" | tail -1 | sed 's/.*"skipped": \([0-9]*\).*/\1/')
  [ "$skipped" -gt 0 ] || { echo "FAIL: the fp16 case skipped no step, so it tests nothing"; exit 1; }
  echo "ok: zero2 fp16 skipped $skipped steps on every rank, as one rank did"
  ;;
resume)
  # Saved on 4 ranks at step 10 with accumulate 2 (the file holds the
  # usual full state, accumulators included), resumed on 2 (zero2) and on
  # 1 (dp): steps 11-20 as in an uninterrupted 4-rank run.
  build mlp
  ranks 4 full "$tmp/mlp" --batch 6 --accumulate 2
  ranks 4 half "$tmp/mlp" --batch 6 --accumulate 2 --steps 10
  "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --shard zero2 --batch 12 --accumulate 2 --resume "$tmp/half.ckpt" \
    --metrics "$tmp/on2.json" > /dev/null
  "$tmp/mlp" "${common[@]}" --batch 24 --accumulate 2 --resume "$tmp/half.ckpt" --metrics "$tmp/on1.json" > /dev/null
  for m in on2 on1; do
    compare losses "$tmp/full.json" "$tmp/$m.json" 1e-5 || { echo "FAIL: resumed $m differs from the 4-rank run"; exit 1; }
  done
  # The checkpoint names what one rank's does.
  one onehalf "$tmp/mlp" --batch 24 --accumulate 2 --steps 10
  diff <("$kiln" ckpt "$tmp/onehalf.ckpt" | sed -n '/^  name/,$p' | awk '{print $1, $2, $3, $4}' | sort) \
       <("$kiln" ckpt "$tmp/half.ckpt" | sed -n '/^  name/,$p' | awk '{print $1, $2, $3, $4}' | sort) ||
    { echo "FAIL: the 4-rank zero2 checkpoint does not hold one rank's values"; exit 1; }
  ;;
plan)
  # Each bucket is reduce-scattered in backward as soon as its gradients
  # are complete: with bucket = 140000 the first bucket (dense.3 and
  # dense.2's gradients, and dense.1.b) before dense.1.w's gradient, the
  # last, is computed.
  "$kiln" ir examples/mlp.kl --after schedule --ranks 3 --set shard=zero2 --set bucket=140000 > "$tmp/s.kir"
  [ "$(grep -c '^  backward %zero2\.[0-9]*\.grad : .* = reduce_scatter(' "$tmp/s.kir")" -eq 2 ] ||
    { echo "FAIL: expected two reduce-scatters in backward"; grep reduce_scatter "$tmp/s.kir"; exit 1; }
  rs=$(grep -n '%zero2.0.grad : .* = reduce_scatter(' "$tmp/s.kir" | cut -d: -f1)
  last=$(grep -n '%dense.1.w.grad : .* = matmul(' "$tmp/s.kir" | cut -d: -f1)
  [ "$rs" -lt "$last" ] || { echo "FAIL: the first bucket's reduce-scatter (line $rs) waits for the last gradient (line $last)"; exit 1; }
  ! grep -qE '^  update .*[(, ]%dense\.[0-9]\.[wb]\.grad[,)]' "$tmp/s.kir" ||
    { echo "FAIL: the update phase still reads a whole gradient"; exit 1; }
  # Memory per rank at N = 4 (Psi = 235146): params whole (0.94 MB),
  # gradients, Adam's m and v and the fp32 master in quarters; against
  # the formula with Kiln's bytes (fp32 params and gradients) within 5%,
  # and ZeRO's own (K = 12) printed beside it.
  "$kiln" ir examples/mlp.kl --after memplan --ranks 4 --set shard=zero2 > "$tmp/mem.kir"
  line=$(grep "^# memory per rank" "$tmp/mem.kir")
  echo "$line"
  [[ $line == "# memory per rank (4 ranks, shard zero2, gradients, optimizer state and fp32 master partitioned): params 0.94 MB, gradients 0.24 MB, optimizer state 0.47 MB, fp32 master slices 0.24 MB, total 1.88 MB; zero2 formula with Kiln's bytes (4 + (4 + 12) / N) Psi = 1.88 MB (measured / formula "* ]] ||
    { echo "FAIL: zero2's memory per rank is not the known figures"; exit 1; }
  for p in fp32 bf16; do
    for z in zero1 zero2; do
      ratio=$("$kiln" ir examples/mlp.kl --after memplan --ranks 4 --set shard=$z --set precision=$p |
        sed -n 's/^# memory per rank.*(measured \/ formula \([0-9.]*\)).*/\1/p')
      awk -v r="$ratio" 'BEGIN { exit !(r >= 0.95 && r <= 1.05) }' ||
        { echo "FAIL: $z $p: measured / formula '$ratio' is not within 5%"; exit 1; }
      echo "ok: $z $p at N = 4: measured / formula $ratio"
    done
  done
  # The arena at batch 8 with a bucket per param: the whole gradients end
  # at their reduce-scatter (dp keeps them to the update's all-reduce).
  arena() { "$kiln" ir examples/mlp.kl --after memplan --ranks 4 --batch 8 --set bucket=0 --set shard="$1" |
    sed -n 's/^# memplan: arena \([0-9.]*\) MB.*/\1/p'; }
  dp=$(arena dp) z2=$(arena zero2)
  echo "arena at batch 8, bucket 0, 4 ranks: dp $dp MB, zero2 $z2 MB"
  awk -v a="$z2" -v b="$dp" 'BEGIN { exit !(a < 0.7 * b) }' || { echo "FAIL: zero2's arena is not below dp's"; exit 1; }
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "zero2.$case_: ok"
