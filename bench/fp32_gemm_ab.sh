#!/usr/bin/env bash
# fp32 GEMM libraries against each other in whole training steps, one
# run: each example (MLP, CNN, GPT) at fp32 with --fp32-gemm openblas and
# --fp32-gemm onednn, alternated run by run, the median timed_ms_per_step
# of each and the ratio onednn / openblas. One thread.
#
#   bench/fp32_gemm_ab.sh [STEPS] [REPEATS]     (defaults: 30 5)
#
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this command alone
# (a workplace may pin OpenBLAS to AVX2 kernels with them); the OpenBLAS
# core and what --fp32-gemm onednn runs are printed. The GPT reads the
# token files bench/pack_pystd.sh makes (packed first when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
steps=${1:-30}
repeats=${2:-5}
kiln=${KILN:-./build/kiln}
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f examples/data/pystd/train.tok ]; then
  KILN=$kiln bash bench/pack_pystd.sh /usr/lib/python3.11 examples/data/pystd > /dev/null
fi
models=(mlp fashion_cnn gpt)
for m in "${models[@]}"; do "$kiln" build "examples/$m.kl" -o "$tmp/$m" > /dev/null 2>&1; done
args() { # MODEL -> its data and batch flags
  case $1 in
    gpt) echo "--batch 16" ;;
    *) echo "--data /usr/share/datasets/fashion-mnist" ;;
  esac
}
# shellcheck disable=SC2046
choice=$("$tmp/mlp" --steps 1 --threads 1 --eval-every 0 --fp32-gemm onednn $(args mlp) 2>&1 | grep -o 'fp32 GEMMs: [^,]*' || true)
choice=${choice:-"--fp32-gemm onednn refused here"}
core=$(python3 -c '
import ctypes, ctypes.util
lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2> /dev/null || echo unknown)
echo "OpenBLAS core $core; onednn: $choice; --threads 1, $steps steps, median of $repeats"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for r in $(seq "$repeats"); do
  for m in "${models[@]}"; do
    for lib in openblas onednn; do
      # shellcheck disable=SC2046
      "$tmp/$m" --steps "$steps" --threads 1 --eval-every 0 --log-every 1000 --fp32-gemm "$lib" $(args "$m") \
        --metrics "$tmp/m.json" > /dev/null 2>&1 || { echo "$m --fp32-gemm $lib failed"; continue; }
      grep '"type": "summary"' "$tmp/m.json" | sed 's/.*"timed_ms_per_step": \([^,}]*\)[,}].*/\1/' >> "$tmp/$m.$lib"
      rm -f "$tmp/m.json"
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %14s %14s %9s\n' model "openblas ms" "onednn ms" ratio
for m in "${models[@]}"; do
  [ -s "$tmp/$m.openblas" ] && [ -s "$tmp/$m.onednn" ] || continue
  a=$(median < "$tmp/$m.openblas") b=$(median < "$tmp/$m.onednn")
  printf '%-12s %14.3f %14.3f %8.2fx   (runs: %s | %s)\n' "$m" "$a" "$b" "$(python3 -c "print($b / $a)")" \
    "$(tr '\n' ' ' < "$tmp/$m.openblas")" "$(tr '\n' ' ' < "$tmp/$m.onednn")"
done
