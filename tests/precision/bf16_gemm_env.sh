#!/usr/bin/env bash
# KILN_BF16_GEMM forces who runs bf16 GEMMs where no --bf16-gemm does (the
# way tools and tests without that flag reach the fallback path):
#  - KILN_BF16_GEMM=openblas: the start-up line says so, and the CNN's bf16
#    losses are those of --bf16-gemm openblas, bit for bit (the same path);
#  - --bf16-gemm wins over the variable;
#  - a bad value is refused, naming the variable, with a non-zero exit.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn"
run() { # OUT ARGS...
  local out=$1; shift
  "$tmp/cnn" --device cpu --threads 1 --precision bf16 --data synthetic:256 --steps 3 --eval-every 0 --log-every 1 \
    --metrics "$out.json" "$@" > "$out.log" 2>&1
  train_losses "$out.json" > "$out.loss"
}

if KILN_BF16_GEMM=mkl "$tmp/cnn" --device cpu --steps 1 --data synthetic:256 > "$tmp/bad.log" 2>&1; then
  echo "FAIL: KILN_BF16_GEMM=mkl was accepted"; exit 1
fi
grep -q "KILN_BF16_GEMM must be auto, onednn, kiln or openblas, got 'mkl'" "$tmp/bad.log" || { cat "$tmp/bad.log"; exit 1; }
echo "KILN_BF16_GEMM=mkl: refused"

KILN_BF16_GEMM=openblas run "$tmp/env"
grep -q 'bf16 GEMMs: [A-Za-z]* sgemm, widened (KILN_BF16_GEMM=openblas)' "$tmp/env.log" || { cat "$tmp/env.log"; exit 1; }
run "$tmp/flag" --bf16-gemm openblas
cmp "$tmp/env.loss" "$tmp/flag.loss" || { echo "FAIL: KILN_BF16_GEMM=openblas and --bf16-gemm openblas differ"; paste "$tmp/env.loss" "$tmp/flag.loss"; exit 1; }
[ "$(wc -l < "$tmp/env.loss")" = 3 ] || { echo "FAIL: expected 3 losses"; cat "$tmp/env.json"; exit 1; }
echo "KILN_BF16_GEMM=openblas: the losses of --bf16-gemm openblas: $(tr '\n' ' ' < "$tmp/env.loss")"

KILN_BF16_GEMM=mkl run "$tmp/wins" --bf16-gemm openblas
grep -q 'bf16 GEMMs: [A-Za-z]* sgemm, widened (--bf16-gemm openblas)' "$tmp/wins.log" || { cat "$tmp/wins.log"; exit 1; }
echo "--bf16-gemm wins over KILN_BF16_GEMM"
