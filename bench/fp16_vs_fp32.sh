#!/usr/bin/env bash
# fp16 against fp32 step time on the CPU (issue 32 item 3): for each model,
# fp32 and fp16 runs alternated in one script (fp32, fp16, fp32, ...), one
# thread, median timed_ms_per_step of each and the ratio fp16 / fp32
# (below 1: fp16 is faster). A benchmark, not a test: on a loaded machine
# single runs vary by up to 2x; compare ratios from one run.
#
#   bench/fp16_vs_fp32.sh [KILN] [REPEATS] [MLP_STEPS] [CNN_STEPS]
#                                     (defaults: build/kiln 3 1500 60)
set -euo pipefail
kiln=${1:-build/kiln} repeats=${2:-3} mlp_steps=${3:-1500} cnn_steps=${4:-60}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One thread, OpenBLAS left to pick its own kernels (bench/precision.sh).
run() {  # run MODEL STEPS PRECISION
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 "$kiln" run "$1" --steps "$2" --device cpu \
    --threads 1 --eval-every 0 --log-every 100000 --precision "$3" --data "$data" --metrics "$tmp/m.json" > /dev/null 2>&1
  sed -n 's/.*"type": "summary".*"timed_ms_per_step": \([^,}]*\)[,}].*/\1/p' "$tmp/m.json"
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
# The ISA that decides fp16's cost on a CPU: F16C conversions only, or
# AVX512_FP16 arithmetic, AMX tiles (docs/internals/cpu-16bit.md).
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'f16c|avx2|avx512f|avx512bw|avx512_bf16|avx512_fp16|amx_tile|amx_bf16|amx_fp16' | tr '\n' ' ')
echo "isa: ${isa:-none of f16c avx2 avx512f avx512_bf16 avx512_fp16 amx}($(nproc) cores online)"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for spec in "examples/mlp.kl $mlp_steps" "examples/fashion_cnn.kl $cnn_steps"; do
  read -r model steps <<< "$spec"
  name=$(basename "$model" .kl)
  for p in fp32 fp16; do run "$model" 2 "$p" > /dev/null; done  # compile the kernels, untimed
  for _ in $(seq "$repeats"); do
    for p in fp32 fp16; do run "$model" "$steps" "$p" >> "$tmp/$name.$p"; done
  done
  if grep -qvx '[0-9.]*[1-9][0-9.]*' "$tmp/$name.fp32" "$tmp/$name.fp16"; then
    echo "$name: no timed steps in $steps (the first steps are not timed): give more" >&2
    exit 1
  fi
  a=$(median < "$tmp/$name.fp32") b=$(median < "$tmp/$name.fp16")
  # The quickest run of each too: on a shared machine the least disturbed.
  c=$(sort -g "$tmp/$name.fp32" | head -1) d=$(sort -g "$tmp/$name.fp16" | head -1)
  printf '%-12s %5s steps  median fp32 %8.3f ms  fp16 %8.3f ms  fp16/fp32 %5.3fx;  quickest %5.3fx   (fp32: %s; fp16: %s)\n' \
    "$name" "$steps" "$a" "$b" "$(awk -v a="$b" -v b="$a" 'BEGIN {print a / b}')" \
    "$(awk -v a="$d" -v b="$c" 'BEGIN {print a / b}')" "$(tr '\n' ' ' < "$tmp/$name.fp32")" "$(tr '\n' ' ' < "$tmp/$name.fp16")"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
