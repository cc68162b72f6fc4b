#!/usr/bin/env bash
# Step time of fp32, bf16 and fp16 training for both examples, in one run:
# each (model, precision) is timed REPEATS times, alternating, and the
# median of timed_ms_per_step is printed with its ratio to fp32.
#
#   bench/precision.sh [STEPS] [REPEATS] [MODELS...]     (defaults: 60 3 fashion_cnn mlp)
#
# One thread (--threads 1). OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are
# unset for the timed runs only (a workplace may pin OpenBLAS to AVX2
# kernels with them); the OpenBLAS core in use is printed. Set
# KILN_BENCH_PROFILE=1 to also print each low-precision run's --profile
# table (the ten most expensive kernels and GEMMs).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
repeats=${2:-3}
shift $(( $# >= 2 ? 2 : $# )) || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(fashion_cnn mlp)
kiln=./build/kiln
data=/usr/share/datasets/fashion-mnist
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clean_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)

core=$("${clean_env[@]}" python3 -c '
import ctypes, ctypes.util
lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2>/dev/null || echo unknown)
echo "OpenBLAS core: $core (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset), --threads 1, $steps steps, median of $repeats"
grep -o -m1 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/^/CPU bf16 instructions: /;s/$/\n/' || echo "CPU bf16 instructions: none"

for m in "${models[@]}"; do
  "$kiln" build "examples/$m.kl" -o "$tmp/$m" > /dev/null
  for p in fp32 bf16 fp16; do  # compile each plan's kernels once, untimed
    "${clean_env[@]}" "$tmp/$m" --steps 2 --device cpu --threads 1 --eval-every 0 --precision "$p" --data "$data" > /dev/null 2>&1
  done
done

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for m in "${models[@]}"; do
  for r in $(seq "$repeats"); do
    for p in fp32 bf16 fp16; do
      "${clean_env[@]}" "$tmp/$m" --steps "$steps" --device cpu --threads 1 --eval-every 0 --log-every 1000 --precision "$p" \
        --data "$data" --metrics "$tmp/$m.$p.$r.json" > "$tmp/$m.$p.$r.log"
      grep '"type": "summary"' "$tmp/$m.$p.$r.json" |
        sed 's/.*"timed_ms_per_step": \([^,}]*\)[,}].*/\1/' >> "$tmp/$m.$p.ms"
    done
  done
  backend=$(grep -m1 -o 'gemm[^,;)]*' "$tmp/$m.bf16.1.log" || true)
  fp32=$(median < "$tmp/$m.fp32.ms")
  for p in fp32 bf16 fp16; do
    ms=$(median < "$tmp/$m.$p.ms")
    printf '%-12s %-5s %8.3f ms/step  %5.2fx fp32   (runs: %s)\n' "$m" "$p" "$ms" \
      "$(awk -v a="$ms" -v b="$fp32" 'BEGIN {print a / b}')" "$(tr '\n' ' ' < "$tmp/$m.$p.ms")"
  done
  [ -z "$backend" ] || echo "$m bf16 start-up: $backend"
  if [ "${KILN_BENCH_PROFILE:-0}" = 1 ]; then
    for p in fp32 bf16 fp16; do
      echo "--- $m $p --profile"
      "${clean_env[@]}" "$tmp/$m" --steps "$steps" --device cpu --threads 1 --eval-every 0 --log-every 1000 --precision "$p" \
        --data "$data" --profile | sed -n '/^profile of the training step/,$p' | head -16
    done
  fi
done
