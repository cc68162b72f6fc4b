#!/usr/bin/env bash
# zero_bubble against 1f1b at P = 2, m = 8, one thread per rank: a deep
# MLP (784 -> 6 x 1024 -> 10, batch 32 a micro-batch: every layer's
# input-gradient and weight-gradient GEMMs alike), the two schedules run
# in turn ROUNDS times (default 5) of STEPS steps (default 30); the median
# ms a step of each round's steps after the first five, their ratio, and
# one --profile run each for the measured bubble beside the theoretical.
# Both schedules compute the same bits (pipeline.zero_bubble); only time
# differs. Timings on a shared machine are noisy: compare in one run.
# SCHEDULES (default "1f1b zero_bubble") names the schedules compared,
# the first the base of the ratios; interleaved:V is interleaved with
# pipeline_virtual_stages = V (the MLP's 7 layers allow V up to 3).
#
#   [SCHEDULES="1f1b zero_bubble interleaved:2 interleaved:3"] bench/pipeline_zb.sh KILN [ROUNDS] [STEPS]
set -euo pipefail
kiln=${1:?usage: bench/pipeline_zb.sh KILN [ROUNDS] [STEPS]}
rounds=${2:-5}
steps=${3:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/deep.kl" <<'KL'
def dense(x: f32[..., k], units) {
  param w : [k, units] init = kaiming
  param b : [units]    init = zeros
  return x @ w + b
}
model deep {
  input image : u8[batch, 1, 28, 28]
  input label : i32[batch]
  x = f32(flatten(image)) / 255
  x = relu(dense(x, 1024))
  x = relu(dense(x, 1024))
  x = relu(dense(x, 1024))
  x = relu(dense(x, 1024))
  x = relu(dense(x, 1024))
  x = relu(dense(x, 1024))
  loss = cross_entropy(dense(x, 10), label)
}
train {
  data      = idx("/usr/share/datasets/fashion-mnist")
  batch     = 32
  accumulate = 8
  optimizer = adamw(lr = 1e-3)
  seed      = 1
}
KL
"$kiln" build "$tmp/deep.kl" -o "$tmp/deep" > /dev/null
export OMP_NUM_THREADS=1
read -r -a schedules <<< "${SCHEDULES:-1f1b zero_bubble}"
run() { # SCHEDULE[:V] ARGS...
  local s=${1%%:*} v=
  [ "$s" = "$1" ] || v=${1#*:}
  shift
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2 "$tmp/deep" --data synthetic:20000 --threads 1 \
    --eval-every 0 --log-every 1 --set pipeline_parallel=2 --set pipeline_schedule="$s" ${v:+--set pipeline_virtual_stages=$v} "$@"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
for r in $(seq "$rounds"); do
  line="round $r:"
  for s in "${schedules[@]}"; do
    run "$s" --steps "$steps" --quiet --metrics "$tmp/$s.$r.json" > /dev/null
    python3 -c 'import json, sys
print(*[r["ms_per_step"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "train" and r["step"] > 5])' \
      "$tmp/$s.$r.json" | tr ' ' '\n' | median > "$tmp/$s.$r.med"
    line="$line $s $(cat "$tmp/$s.$r.med") ms,"
  done
  echo "${line%,} a step"
done
base=${schedules[0]}
b=$(cat "$tmp/$base".*.med | median)
line="median of the rounds' medians: $base $b ms"
for s in "${schedules[@]:1}"; do
  x=$(cat "$tmp/$s".*.med | median)
  line="$line, $s $x ms ($s / $base = $(awk -v a="$x" -v b="$b" 'BEGIN {printf "%.3f", a / b}'))"
done
echo "$line a step"
for s in "${schedules[@]}"; do
  echo "$s:"
  run "$s" --steps 12 --profile | grep -A3 "^pipeline bubble"
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
