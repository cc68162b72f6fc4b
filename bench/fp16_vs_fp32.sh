#!/usr/bin/env bash
# fp16 against fp32 step time on the CPU (issue 32 item 3): for each model,
# fp32 and fp16 runs alternated in one script (fp32, fp16, fp32, ...), one
# thread, the median of each and the ratio fp16 / fp32 (below 1: fp16 is
# faster), of two measures:
#   - wall: timed_ms_per_step, the run's wall-clock time a step;
#   - cpu: the process's CPU time a step over the run (host_cpu_percent x
#     seconds / steps), which other jobs on a shared machine move much
#     less than wall time (a descheduled step costs wall time, not CPU
#     time; they still share caches and memory bandwidth).
# A benchmark, not a test: on a loaded machine single runs vary by up to
# 2x; compare ratios from one run. The environment passes through, so
# `KILN_GEMM_REUSE=off bash bench/fp16_vs_fp32.sh` measures without the
# kept widened operands (docs/internals/cpu-16bit.md).
#
#   bench/fp16_vs_fp32.sh [KILN] [REPEATS] [MLP_STEPS] [CNN_STEPS]
#                                     (defaults: build/kiln 3 1500 60)
set -euo pipefail
kiln=${1:-build/kiln} repeats=${2:-3} mlp_steps=${3:-1500} cnn_steps=${4:-60}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One thread, OpenBLAS left to pick its own kernels (bench/precision.sh).
# Prints "WALL_MS CPU_MS" a step.
run() {  # run MODEL STEPS PRECISION
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 "$kiln" run "$1" --steps "$2" --device cpu \
    --threads 1 --eval-every 0 --log-every 100000 --precision "$3" --data "$data" --metrics "$tmp/m.json" > /dev/null 2>&1
  grep '"type": "summary"' "$tmp/m.json" | tr ',' '\n' | awk -F': ' -v steps="$2" '
    $1 ~ /"seconds"/ && !s {sec = $2; s = 1} $1 ~ /timed_ms_per_step/ {wall = $2} $1 ~ /host_cpu_percent/ {cpu = $2}
    END {printf "%s %.4f\n", wall, cpu / 100 * sec * 1000 / steps}'
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
  if awk '$1 + 0 <= 0 {bad = 1} END {exit !bad}' "$tmp/$name.fp32" "$tmp/$name.fp16"; then
    echo "$name: no timed steps in $steps (the first steps are not timed): give more" >&2
    exit 1
  fi
  for col in 1 2; do
    what=$([ $col = 1 ] && echo wall || echo cpu)
    a=$(cut -d' ' -f$col "$tmp/$name.fp32" | median) b=$(cut -d' ' -f$col "$tmp/$name.fp16" | median)
    # The quickest run of each too: on a shared machine the least disturbed.
    c=$(cut -d' ' -f$col "$tmp/$name.fp32" | sort -g | head -1) d=$(cut -d' ' -f$col "$tmp/$name.fp16" | sort -g | head -1)
    printf '%-12s %5s steps  %-4s median fp32 %8.3f ms  fp16 %8.3f ms  fp16/fp32 %5.3fx;  quickest %5.3fx   (fp32: %s; fp16: %s)\n' \
      "$name" "$steps" "$what" "$a" "$b" "$(awk -v a="$b" -v b="$a" 'BEGIN {print a / b}')" \
      "$(awk -v a="$d" -v b="$c" 'BEGIN {print a / b}')" "$(cut -d' ' -f$col "$tmp/$name.fp32" | tr '\n' ' ')" \
      "$(cut -d' ' -f$col "$tmp/$name.fp16" | tr '\n' ' ')"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
