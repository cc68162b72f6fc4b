#!/usr/bin/env bash
# CPU attention, fused against composed: the training step (forward and
# backward) of attention alone, 4 heads of d = 32 (the GPT example's),
# 2048 query rows per head (batch = 2048 / T), params q, k, v, loss =
# mean(attention(q, k, v)), three ways:
#   native     the fused op through the CPU backend's hand-written kernels
#              (runtime/cpu/cpu_attn.c, the default)
#   generated  the fused op through the kernel IR's C (KILN_CPU_ATTENTION=generated)
#   composed   softmax(where(causal mask, q @ k^T * scale, -1e9)) @ v: BLAS
#              GEMMs and a [batch, 4, T, T] score tensor
# Prints the median ms of a step (`kiln bench --json`, fused plan) and
# the ratios, one line per (T, threads).
#
#   bench/attn_cpu.sh [REPEATS]      KILN=path/to/kiln (default ./build/kiln);
#                                    TS="128 256" (default "128 256 1024"): the T values
set -euo pipefail
kiln=${KILN:-./build/kiln}
repeats=${1:-9}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model() { # FORM T
  local t=$2 b=$((2048 / $2))
  cat <<KL
model m {
  param q : f32[$b, 4, $t, 32] init = normal(std = 1)
  param k : f32[$b, 4, $t, 32] init = normal(std = 1)
  param v : f32[$b, 4, $t, 32] init = normal(std = 1)
KL
  if [ "$1" = fused ]; then
    echo "  loss = mean(attention(q, k, v))"
  else
    echo "  allowed = reshape(arange($t), [$t, 1]) >= arange($t)"
    echo "  loss = mean(softmax(where(allowed, q @ transpose(k) * 0.17677669529663687, -1e9)) @ v)"
  fi
  echo "}"
}
step_ms() { # FILE THREADS [ENV...]
  local f=$1 th=$2
  shift 2
  env "$@" "$kiln" bench "$f" --threads "$th" --repeats "$repeats" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["step_ms"])'
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%5s %7s %11s %13s %12s %16s %16s\n' T threads native_ms generated_ms composed_ms composed/native generated/native
for t in ${TS:-128 256 1024}; do
  model fused $t > "$dir/fused$t.kl"
  model composed $t > "$dir/composed$t.kl"
  for th in 1 2; do
    n=$(step_ms "$dir/fused$t.kl" $th KILN_CPU_ATTENTION=native)
    g=$(step_ms "$dir/fused$t.kl" $th KILN_CPU_ATTENTION=generated)
    c=$(step_ms "$dir/composed$t.kl" $th)
    awk -v t=$t -v th=$th -v n=$n -v g=$g -v c=$c \
      'BEGIN { printf "%5d %7d %11.2f %13.2f %12.2f %15.2fx %15.2fx\n", t, th, n, g, c, c / n, g / n }'
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
