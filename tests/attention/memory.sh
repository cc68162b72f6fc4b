#!/usr/bin/env bash
# The memory plan of attention at T = 256, 1024, 4096 (batch 1, 4 heads,
# d = 64, training: forward and backward): the fused op's arena grows as T
# (its largest buffers are [.., T, d] rows and the [.., T] log-sum-exp),
# the composed matmul + softmax + matmul form's as T^2 (the scores and
# probabilities). Prints one line per (form, T) with the arena from
# `kiln ir --after memplan`, then checks the growth from T = 1024 to 4096:
# at most 4.5x fused (linear: 4x), at least 12x composed (quadratic: 16x),
# and no fused arena as large as one head-batch of f32 scores.
#
#   memory.sh KILN
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
dir=$tmp
model() { # FORM T
  local t=$2
  cat <<KL
model m {
  param q : f32[1, 4, $t, 64] init = normal(std = 1)
  param k : f32[1, 4, $t, 64] init = normal(std = 1)
  param v : f32[1, 4, $t, 64] init = normal(std = 1)
KL
  if [ "$1" = fused ]; then
    echo "  loss = mean(attention(q, k, v))"
  else
    echo "  allowed = reshape(arange($t), [$t, 1]) >= arange($t)"
    echo "  loss = mean(softmax(where(allowed, q @ transpose(k) * 0.125, -1e9)) @ v)"
  fi
  echo "}"
}
declare -A arena
printf '%-9s %6s %14s %16s\n' form T arena_bytes "scores [4,T,T] f32"
for form in fused composed; do
  for t in 256 1024 4096; do
    model $form $t > "$dir/$form$t.kl"
    line=$("$kiln" ir "$dir/$form$t.kl" --after memplan --format timeline | head -1)
    # "# m: arena 12.34 MB (...)": the exact bytes are the last row's end.
    bytes=$("$kiln" ir "$dir/$form$t.kl" --after memplan --format timeline |
            awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { if ($2 > m) m = $2 } END { print m + 0 }')
    arena[$form$t]=$bytes
    printf '%-9s %6d %14d %16d   %s\n' $form $t "$bytes" $((4 * t * t * 4)) "${line#\# m: }"
  done
done
awk -v f1="${arena[fused1024]}" -v f4="${arena[fused4096]}" -v c1="${arena[composed1024]}" -v c4="${arena[composed4096]}" 'BEGIN {
  printf "growth 1024 -> 4096: fused %.2fx, composed %.2fx\n", f4 / f1, c4 / c1
  if (!(f4 <= 4.5 * f1)) { print "FAIL: the fused arena grows faster than T"; exit 1 }
  if (!(c4 >= 12 * c1)) { print "FAIL: the composed arena does not grow as T^2 (is the comparison still measuring?)"; exit 1 }
  if (!(f4 < 4 * 4096 * 4096 * 4)) { print "FAIL: the fused arena holds a T x T buffer"; exit 1 }
}'
