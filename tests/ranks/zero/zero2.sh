#!/usr/bin/env bash
# shard = zero2 (README, "Many ranks"): gradients, optimizer state and the
# fp32 master partitioned across the ranks, against one rank with the
# same global batch.
#
#   zero2.sh KILN CASE   CASE: mlp | cnn | precision | resume | plan
#
# mlp, cnn, precision and resume: tests/ranks/zero/stage_cases.bash (shared with
# zero3.sh); plan here.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
source "$testdir/ranks/helpers.bash"

z=zero2 z_what="gradients, optimizer state and fp32 master partitioned" cnn_ranks="2 3"
source "$here/ranks/zero/stage_cases.bash"

case $case_ in
mlp | cnn | precision | resume)
  zero_stage_case "$case_" ;;
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
