#!/usr/bin/env bash
# Who runs fp32 GEMMs on the CPU (runtime/cpu/cpu_dnnl.h): --fp32-gemm and
# KILN_FP32_GEMM, in the training executable and in kiln bench.
#  - openblas (flag or variable): the start-up line says so, and the two
#    give the same MLP losses bit for bit; the flag wins over the variable;
#  - onednn: where the CPU has AVX-512, the start-up line names oneDNN's
#    sgemm and the losses are within 1e-4 of OpenBLAS's (sums in another
#    order); elsewhere an error naming the reason, non-zero exit;
#  - auto: oneDNN exactly where onednn is accepted;
#  - bad values (kiln bench crashed on a bad KILN_BF16_GEMM), and the flag
#    on kiln bench's --gemms path, are refused with non-zero exits.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build examples/mlp.kl -o "$tmp/mlp"
run() { # OUT ARGS...
  local out=$1; shift
  "$tmp/mlp" --device cpu --threads 1 --data synthetic:512 --steps 5 --eval-every 0 --log-every 1 \
    --metrics "$out.json" "$@" > "$out.log" 2>&1
  train_losses "$out.json" > "$out.loss"
}
refused() { # WHAT EXPECTED-TEXT COMMAND...
  local what=$1 text=$2; shift 2
  if "$@" > "$tmp/bad.log" 2>&1; then echo "FAIL: $what was accepted"; exit 1; fi
  grep -q -- "$text" "$tmp/bad.log" || { echo "FAIL: $what: expected '$text'"; cat "$tmp/bad.log"; exit 1; }
  echo "$what: refused"
}
refused "--fp32-gemm mkl" "--fp32-gemm must be auto, onednn or openblas, got 'mkl'" \
  "$tmp/mlp" --device cpu --steps 1 --data synthetic:512 --fp32-gemm mkl
refused "KILN_FP32_GEMM=mkl" "KILN_FP32_GEMM must be auto, onednn or openblas, got 'mkl'" \
  env KILN_FP32_GEMM=mkl "$tmp/mlp" --device cpu --steps 1 --data synthetic:512
refused "kiln bench --fp32-gemm mkl" "--fp32-gemm must be auto, onednn or openblas" \
  "$kiln" bench examples/mlp.kl --repeats 1 --fp32-gemm mkl
refused "kiln bench with KILN_BF16_GEMM=mkl" "KILN_BF16_GEMM must be auto, onednn, kiln or openblas, got 'mkl'" \
  env KILN_BF16_GEMM=mkl "$kiln" bench examples/mlp.kl --repeats 1
refused "kiln bench --gemms --fp32-gemm" "--gemms times every library itself" \
  "$kiln" bench --gemms examples/mlp.kl --fp32-gemm openblas

run "$tmp/flag" --fp32-gemm openblas
grep -q 'fp32 GEMMs: OpenBLAS sgemm (--fp32-gemm openblas)' "$tmp/flag.log" || { cat "$tmp/flag.log"; exit 1; }
KILN_FP32_GEMM=openblas run "$tmp/env"
grep -q 'fp32 GEMMs: OpenBLAS sgemm (KILN_FP32_GEMM=openblas)' "$tmp/env.log" || { cat "$tmp/env.log"; exit 1; }
cmp "$tmp/env.loss" "$tmp/flag.loss" || { echo "FAIL: KILN_FP32_GEMM=openblas and --fp32-gemm openblas differ"; exit 1; }
[ "$(wc -l < "$tmp/flag.loss")" = 5 ] || { echo "FAIL: expected 5 losses"; cat "$tmp/flag.json"; exit 1; }
KILN_FP32_GEMM=mkl run "$tmp/wins" --fp32-gemm openblas
grep -q 'fp32 GEMMs: OpenBLAS sgemm (--fp32-gemm openblas)' "$tmp/wins.log" || { cat "$tmp/wins.log"; exit 1; }
echo "openblas: flag and variable agree bit for bit; the flag wins"
"$kiln" bench examples/mlp.kl --repeats 1 --fp32-gemm openblas > "$tmp/bench.log" 2>&1 || { cat "$tmp/bench.log"; exit 1; }
grep -q 'fp32 GEMMs: OpenBLAS sgemm (--fp32-gemm openblas)' "$tmp/bench.log" || { cat "$tmp/bench.log"; exit 1; }
echo "kiln bench --fp32-gemm openblas: named in its first line"

run "$tmp/auto"
if "$tmp/mlp" --device cpu --threads 1 --data synthetic:512 --steps 1 --eval-every 0 --fp32-gemm onednn > "$tmp/one.log" 2>&1; then
  run "$tmp/dnn" --fp32-gemm onednn
  grep -q 'fp32 GEMMs: oneDNN [0-9.]* sgemm (AVX-512)' "$tmp/dnn.log" || { cat "$tmp/dnn.log"; exit 1; }
  grep -q 'fp32 GEMMs: oneDNN' "$tmp/auto.log" || { echo "FAIL: auto did not take oneDNN where onednn runs"; cat "$tmp/auto.log"; exit 1; }
  paste "$tmp/dnn.loss" "$tmp/flag.loss" | python3 -c '
import sys
for line in sys.stdin:
    a, b = map(float, line.split())
    assert abs(a - b) <= 1e-4 * abs(b), f"oneDNN {a} against OpenBLAS {b}"
' || { echo "FAIL: oneDNN's losses are not OpenBLAS's within 1e-4"; exit 1; }
  echo "onednn: oneDNN's sgemm, losses within 1e-4 of OpenBLAS's: $(tr '\n' ' ' < "$tmp/dnn.loss")"
else
  grep -q -- '--fp32-gemm onednn: ' "$tmp/one.log" || { cat "$tmp/one.log"; exit 1; }
  grep -q 'fp32 GEMMs: OpenBLAS sgemm (' "$tmp/auto.log" || { echo "FAIL: auto did not fall back"; cat "$tmp/auto.log"; exit 1; }
  echo "onednn refused here ($(grep -o -- '--fp32-gemm onednn: .*' "$tmp/one.log" | head -1)); auto falls back to OpenBLAS"
fi
