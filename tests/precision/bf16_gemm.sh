#!/usr/bin/env bash
# bf16 GEMMs on the CPU, end to end (the CNN, bf16, one thread):
#  - the start-up line names who runs them (oneDNN or OpenBLAS, and why);
#  - through oneDNN, two runs give the same losses bit for bit;
#  - oneDNN and OpenBLAS (widened operands) give the same losses within
#    bf16 rounding (both accumulate in fp32, in different orders);
#  - --bf16-gemm with an unknown library, or onednn where it cannot run,
#    is refused with the reason and a non-zero exit.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn"
run() { # LIB OUT
  "$tmp/cnn" --device cpu --threads 1 --precision bf16 --data synthetic:512 --steps 6 --eval-every 0 --log-every 1 \
    --bf16-gemm "$1" --metrics "$2.json" > "$2.log" 2>&1
  train_losses "$2.json" > "$2.loss"
}

if "$tmp/cnn" --device cpu --steps 1 --bf16-gemm mkl > "$tmp/bad.log" 2>&1; then
  echo "FAIL: --bf16-gemm mkl was accepted"; exit 1
fi
grep -q "bf16-gemm must be auto, onednn, kiln or openblas, got 'mkl'" "$tmp/bad.log" || { cat "$tmp/bad.log"; exit 1; }
echo "--bf16-gemm mkl: refused"

run openblas "$tmp/blas"
grep -q 'bf16 GEMMs: [A-Za-z]* sgemm, widened (--bf16-gemm openblas)' "$tmp/blas.log" || { cat "$tmp/blas.log"; exit 1; }
if ! run onednn "$tmp/dnn1"; then
  grep -q -- '--bf16-gemm onednn: ' "$tmp/dnn1.log" || { echo "FAIL: onednn refused without a reason"; cat "$tmp/dnn1.log"; exit 1; }
  "$tmp/cnn" --device cpu --steps 1 --data synthetic:512 --eval-every 0 > "$tmp/auto.log" 2>&1
  grep -q 'bf16 GEMMs: .*sgemm, widened (' "$tmp/auto.log" || { cat "$tmp/auto.log"; exit 1; }
  echo "SKIP: oneDNN cannot run bf16 GEMMs here: $(grep -o 'onednn: .*' "$tmp/dnn1.log" | head -1)"
  exit 77
fi
grep -q 'bf16 GEMMs: oneDNN [0-9.]* (' "$tmp/dnn1.log" || { cat "$tmp/dnn1.log"; exit 1; }
run onednn "$tmp/dnn2"
cmp "$tmp/dnn1.loss" "$tmp/dnn2.loss" || { echo "FAIL: two oneDNN runs differ"; paste "$tmp/dnn1.loss" "$tmp/dnn2.loss"; exit 1; }
echo "oneDNN: two runs give the same losses: $(tr '\n' ' ' < "$tmp/dnn1.loss")"
paste "$tmp/dnn1.loss" "$tmp/blas.loss" | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d > 0.02 * ($2 < 0 ? -$2 : $2) + 1e-3) bad = bad " step " NR ": " $1 " vs " $2; n++ }
  END { if (n != 6 || bad != "") { print "FAIL: oneDNN and OpenBLAS losses differ:" bad; exit 1 } }'
echo "oneDNN against OpenBLAS: losses within 2%: $(paste -d/ "$tmp/dnn1.loss" "$tmp/blas.loss" | tr '\n' ' ')"
