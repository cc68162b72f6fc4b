#!/usr/bin/env bash
# Test accuracy of the CNN (or MODEL) after EPOCHS epochs in fp32, bf16 and
# fp16, one thread, same seed: the accuracy side of bench/precision.sh.
#
#   bench/precision_accuracy.sh [EPOCHS] [MODEL]      (defaults: 3 fashion_cnn)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3}
model=${2:-fashion_cnn}
kiln=./build/kiln
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kiln" build "examples/$model.kl" -o "$tmp/model" > /dev/null
for p in fp32 bf16 fp16; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$tmp/model" --device cpu --threads 1 --epochs "$epochs" --precision "$p" \
    --log-every 1000 --metrics "$tmp/$p.json" > "$tmp/$p.log" 2>&1
  acc=$(grep '"type": "eval"' "$tmp/$p.json" | tail -1 | sed 's/.*"accuracy": \([^,}]*\).*/\1/')
  gemm=$(grep -m1 -o 'bf16 GEMMs: [^,]*' "$tmp/$p.log" || true)
  printf '%-12s %-5s %d epochs: test accuracy %s   (%s)\n' "$model" "$p" "$epochs" "$acc" "$gemm"
done
