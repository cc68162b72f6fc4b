#!/usr/bin/env bash
# Step time of fp32, bf16 and fp16 training for both examples, in one run:
# each (model, variant) is timed REPEATS times, alternating, and the
# median of timed_ms_per_step is printed with its ratio to fp32. Variants:
# fp32, bf16 (bf16 GEMMs as the start-up line says: oneDNN where the CPU
# has bf16 instructions), bf16-openblas (--bf16-gemm openblas: operands
# widened to fp32 for OpenBLAS, the path before oneDNN), fp16.
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
startup=$("${clean_env[@]}" "$kiln" run examples/mlp.kl --steps 1 --device cpu --threads 1 --eval-every 0 --data synthetic:256 2>&1 || true)
echo "$(grep -o 'fp32 GEMMs: [^,]*' <<< "$startup" || echo 'fp32 GEMMs: unknown') (widened bf16 GEMMs too)"
echo "$(grep -oE '(^|, )f16 GEMMs: [^,]*' <<< "$startup" | sed 's/^, //' || echo 'f16 GEMMs: unknown')"
grep -o -m1 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/^/CPU bf16 instructions: /;s/$/\n/' || echo "CPU bf16 instructions: none"

variants=(fp32 bf16 bf16-openblas fp16)
flags() { # VARIANT -> the executable's flags
  case $1 in
    bf16-openblas) echo "--precision bf16 --bf16-gemm openblas" ;;
    *) echo "--precision $1" ;;
  esac
}
for m in "${models[@]}"; do
  "$kiln" build "examples/$m.kl" -o "$tmp/$m" > /dev/null
  for p in "${variants[@]}"; do  # compile each plan's kernels once, untimed
    # shellcheck disable=SC2046
    "${clean_env[@]}" "$tmp/$m" --steps 2 --device cpu --threads 1 --eval-every 0 $(flags "$p") --data "$data" > /dev/null 2>&1
  done
done

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for m in "${models[@]}"; do
  for r in $(seq "$repeats"); do
    for p in "${variants[@]}"; do
      # shellcheck disable=SC2046
      "${clean_env[@]}" "$tmp/$m" --steps "$steps" --device cpu --threads 1 --eval-every 0 --log-every 1000 $(flags "$p") \
        --data "$data" --metrics "$tmp/$m.$p.$r.json" > "$tmp/$m.$p.$r.log" 2>&1
      grep '"type": "summary"' "$tmp/$m.$p.$r.json" |
        sed 's/.*"timed_ms_per_step": \([^,}]*\)[,}].*/\1/' >> "$tmp/$m.$p.ms"
    done
  done
  backend=$(grep -m1 -o 'bf16 GEMMs: [^,]*' "$tmp/$m.bf16.1.log" || true)
  fp32=$(median < "$tmp/$m.fp32.ms")
  for p in "${variants[@]}"; do
    ms=$(median < "$tmp/$m.$p.ms")
    printf '%-12s %-13s %8.3f ms/step  %5.2fx fp32   (runs: %s)\n' "$m" "$p" "$ms" \
      "$(awk -v a="$ms" -v b="$fp32" 'BEGIN {print a / b}')" "$(tr '\n' ' ' < "$tmp/$m.$p.ms")"
  done
  [ -z "$backend" ] || echo "$m bf16 start-up line: $backend"
  if [ "${KILN_BENCH_PROFILE:-0}" = 1 ]; then
    for p in "${variants[@]}"; do
      echo "--- $m $p --profile"
      # shellcheck disable=SC2046
      "${clean_env[@]}" "$tmp/$m" --steps "$steps" --device cpu --threads 1 --eval-every 0 --log-every 1000 $(flags "$p") \
        --data "$data" --profile | sed -n '/^profile of the training step/,$p' | head -16
    done
  fi
done
