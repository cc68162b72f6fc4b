#!/usr/bin/env bash
# The causal model of tests/language/causal.kl (attention as mask + matmul +
# softmax + matmul) and tests/attention/causal_fused.kl (the same with the
# fused op) train to the same losses: every step within 1e-4 relative,
# one thread. With precision = bf16 the fused model trains too (the op
# runs in f32 between bf16 GEMMs) and its loss falls.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
work=$tmp
train() { # MODEL NAME [ARGS]
  local m=$1 name=$2
  shift 2
  "$kiln" run "$m" --threads 1 --eval-every 0 --log-every 1 --quiet --metrics "$work/$name.json" "$@" > "$work/$name.out" 2>&1 ||
    { echo "FAIL: $m did not train"; cat "$work/$name.out"; exit 1; }
  train_losses "$work/$name.json" > "$work/$name.loss"
}
train tests/language/causal.kl composed
train tests/attention/causal_fused.kl fused
train tests/attention/causal_fused.kl fused_bf16 --set precision=bf16
paste "$work/composed.loss" "$work/fused.loss" "$work/fused_bf16.loss" > "$work/all"
awk '
  { n++; e = ($1 - $2) / $1; e = e < 0 ? -e : e; if (e > worst) worst = e }
  n <= 4 { first += $3 } { last[n % 4] = $3 }
  END {
    l = last[0] + last[1] + last[2] + last[3]
    printf "%d steps: composed %s -> %s, fused %s -> %s, worst relative difference %.2g; bf16 fused mean of the first 4 steps %.4f, of the last 4 %.4f\n",
      n, c1, $1, f1, $2, worst, first / 4, l / 4
    if (n < 16) { print "FAIL: too few steps"; exit 1 }
    if (!(worst <= 1e-4)) { print "FAIL: fused and composed losses differ"; exit 1 }
    if (!(l < 0.95 * first)) { print "FAIL: the bf16 fused model did not learn"; exit 1 }
  }
  NR == 1 { c1 = $1; f1 = $2 }' "$work/all"
