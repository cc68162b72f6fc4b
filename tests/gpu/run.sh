#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU (written for one H200,
# 16 cores), in under 8 minutes. From the repository root:
#
#   tests/gpu/run.sh                 # everything, ends with one table
#   tests/gpu/run.sh --cpu-only      # the same flow on the CPU backend (checks the script itself)
#   tests/gpu/run.sh --quick         # small sizes (with --cpu-only: what ctest runs)
#   tests/gpu/run.sh --build DIR     # use an existing build instead of building build-gpu/
#
# Stages (each records a row of the table; a failing stage does not stop
# the others):
#   1. build Kiln (Release) in build-gpu/
#   2. every CUDA kernel and GEMM of every example (train/eval, fused/
#      unfused, fp32/bf16/fp16) against the CPU backend on fresh random
#      inputs, relative-error bounds per dtype (kernel_check --device cuda)
#   3. 20 training steps of each example (fp32 and bf16) on the CPU and on
#      the GPU, the per-step losses compared
#   4. fashion_cnn trained to the end on the GPU: test accuracy (goal 0.92;
#      needs Fashion-MNIST, else synthetic data and no accuracy)
#   5. kiln bench on the GPU: fused elementwise and batch-norm kernels'
#      share of a device-to-device copy's bandwidth (goal 80%), fusion gain
#   6. step time with and without CUDA graphs
#   7. the same models in PyTorch eager and torch.compile, same batch,
#      optimizer and initial weights (goal: Kiln faster than torch.compile)
# Everything lands in BUILD/gpu-run/ (logs, JSON, table.md).
set -uo pipefail
cd "$(dirname "$0")/../.."

build=build-gpu
reuse=0
cpu_only=0
quick=0
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-only) cpu_only=1 ;;
    --quick) quick=1 ;;
    --build) build=$2; reuse=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

start=$(date +%s)
out=$build/gpu-run
mkdir -p "$build" && rm -rf "$out" && mkdir -p "$out"
results=$out/results.tsv
: > "$results"
failed=0
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${3:-}" "${4:-}" >> "$results"; [ "${4:-}" = FAIL ] && failed=1; return 0; }
elapsed() { echo $(( $(date +%s) - start )); }
log() { echo "[$(elapsed) s] $*"; }
get() { grep -P "^$1\t" "$2" | head -1 | cut -f2; }  # key file -> value
report() { python3 tests/gpu/report.py "$@"; }

dev=cuda
[ $cpu_only = 1 ] && dev=cpu
data=${KILN_DATA:-/usr/share/datasets/fashion-mnist}
real_data=1
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  data=synthetic:60000
  real_data=0
fi
steps20=20 bench_batch=512 bench_repeats=20 graph_steps=300 torch_steps=300 check_batch=32
if [ $quick = 1 ]; then
  steps20=5 bench_batch=32 bench_repeats=3 graph_steps=20 torch_steps=30 check_batch=4
  data=synthetic:2000
  real_data=0
fi
models="mlp fashion_cnn"

# ---- 1. build ----
if [ $reuse = 0 ]; then
  log "1. building Kiln (Release) in $build"
  if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
     cmake --build "$build" -j"$(nproc)" >> "$out/build.log" 2>&1; then
    row "build" "Release, $(grep -o 'CUDA backend: .*' "$out/build.log" | head -1)" "" ok
  else
    tail -30 "$out/build.log"
    row "build" "failed (see $out/build.log)" "" FAIL
    report table "$results"
    exit 1
  fi
fi
kiln=$build/kiln
check=$build/tests/cuda/kernel_check
if [ $cpu_only = 1 ]; then
  row "device" "none: --cpu-only runs the flow on the CPU backend"
elif command -v nvidia-smi > /dev/null; then
  row "device" "$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | head -1)"
fi
export KILN_CACHE_DIR=$out/cache

# ---- 2. every kernel against the CPU ----
if [ $quick = 1 ]; then
  row "kernels vs CPU" "skipped in --quick (ctest runs kernel_check --emulate)"
else
  mode="--device cuda"
  [ $cpu_only = 1 ] && mode=--emulate
  log "2. kernel_check $mode: every kernel of every example against the CPU backend"
  seed=$(( $(date +%s) % 100000 ))
  timeout 240 "$check" $mode --batch $check_batch --seed $seed examples/*.kl > "$out/kernels.log" 2>&1
  rc=$?
  tail -4 "$out/kernels.log"
  summary=$(grep -E '^examples/.*distinct kernels' "$out/kernels.log" |
    sed -E 's/^examples\/([a-z_]+)\.kl: ([0-9]+) distinct kernels.* ([0-9]+) failures.*/\1 \2 kernels, \3 failures/' | paste -sd ';' - | sed 's/;/; /g')
  worst=$(grep -oE 'worst relative error [^;]*' "$out/kernels.log" | tail -1)
  if [ $rc = 0 ]; then
    row "kernels vs CPU (seed $seed, batch $check_batch)" "$summary; $worst" "bounds f32 1e-4, bf16 1.6e-2, f16 2e-3" ok
  elif [ $rc = 124 ]; then
    row "kernels vs CPU" "timed out (see $out/kernels.log)" "" FAIL
  else
    row "kernels vs CPU (seed $seed)" "${summary:-no summary}; see $out/kernels.log" "0 failures" FAIL
  fi
fi

# ---- 3. 20 steps on both backends ----
log "3. $steps20 training steps of each example on the CPU and on $dev"
for m in $models; do
  if ! "$kiln" build "examples/$m.kl" -o "$out/$m" > "$out/$m.build.log" 2>&1; then
    row "$m: build" "failed (see $out/$m.build.log)" "" FAIL
    continue
  fi
  # fp32, and bf16 (low-precision storage and GEMM operands: a looser bound).
  for prec in fp32 bf16; do
    bound=1e-2
    [ $prec = bf16 ] && bound=5e-2
    # The two backends at once (the GPU run barely uses the CPU).
    for d in $(echo cpu $dev | tr ' ' '\n' | sort -u); do
      timeout 120 "$out/$m" --device $d --precision $prec --steps $steps20 --log-every 1 --seed 1 --data "$data" --quiet \
        --metrics "$out/$m.$prec.$d.steps.json" > "$out/$m.$prec.$d.steps.log" 2>&1 &
    done
    wait
    t=$out/$m.$prec.losses.tsv
    if report losses "$out/$m.$prec.cpu.steps.json" "$out/$m.$prec.$dev.steps.json" $bound > "$t" 2>&1; then v=ok; else v=FAIL; fi
    row "$m $prec: $steps20 steps, CPU vs $dev" "losses $(get last_loss "$t") at the end; max relative difference $(get max_rel_diff "$t")" "$bound" $v
  done
done

# ---- 4. fashion_cnn to the end on the GPU ----
if [ $cpu_only = 1 ] || [ $real_data = 0 ]; then
  row "fashion_cnn trained on the GPU" "n/a ($([ $cpu_only = 1 ] && echo --cpu-only || echo no Fashion-MNIST at $data))" ">= 0.92"
else
  log "4. fashion_cnn trained to the end on the GPU"
  t0=$(date +%s)
  timeout 150 "$out/fashion_cnn" --device cuda --data "$data" --quiet --metrics "$out/cnn_full.json" > "$out/cnn_full.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  acc=$(report summary "$out/cnn_full.json" final_ 2>/dev/null | cut -f2)
  if [ $rc = 0 ] && python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.92 else 1)" 2>/dev/null; then v=ok; else v=FAIL; fi
  row "fashion_cnn trained on the GPU" "test accuracy ${acc:-n/a} after the train block's epochs, ${secs} s (exit $rc)" ">= 0.92" $v
fi

# ---- 5. kiln bench on the GPU ----
log "5. kiln bench --device $dev (batch $bench_batch)"
for m in fashion_cnn mlp; do
  if timeout 150 "$kiln" bench "examples/$m.kl" --device $dev --batch $bench_batch --repeats $bench_repeats --json \
       > "$out/bench_$m.json" 2> "$out/bench_$m.log" && report bench "$out/bench_$m.json" > "$out/bench_$m.tsv"; then
    share=$(get share_elementwise_batchnorm "$out/bench_$m.tsv")
    goal=">= 80%"
    v=$(python3 -c "print('ok' if float('${share%\%}') >= 80 else 'below goal')")
    [ $cpu_only = 1 ] && { goal="(CPU: memcpy bandwidth)"; v=""; }
    row "$m: fused elementwise + batch-norm kernels" "$share of copy bandwidth ($(get copy_gb_s "$out/bench_$m.tsv") GB/s); step $(get step_ms "$out/bench_$m.tsv") ms, fusion $(get fusion_speedup "$out/bench_$m.tsv")" "$goal" "$v"
  else
    row "$m: kiln bench" "failed (see $out/bench_$m.log)" "" FAIL
  fi
done

# ---- 6. CUDA graphs ----
if [ $cpu_only = 1 ]; then
  row "step time with / without CUDA graphs" "n/a (--cpu-only)"
else
  log "6. step time with and without CUDA graphs ($graph_steps steps)"
  for m in $models; do
    for g in graph nograph; do
      flag=""
      [ $g = nograph ] && flag=--no-cuda-graph
      timeout 120 "$out/$m" --device cuda --steps $graph_steps --data "$data" --quiet $flag \
        --metrics "$out/$m.$g.json" > "$out/$m.$g.log" 2>&1 || true
    done
    sps_g=$(report summary "$out/$m.graph.json" timed_samples_per_s 2>/dev/null | cut -f2)
    sps_n=$(report summary "$out/$m.nograph.json" timed_samples_per_s 2>/dev/null | cut -f2)
    row "$m: ms per step (batch 128), graphs / no graphs" \
      "$(python3 -c "print('%.3f / %.3f' % (128e3 / $sps_g, 128e3 / $sps_n))" 2>/dev/null || echo n/a)"
    echo "$m $sps_g" >> "$out/kiln_sps.txt"
  done
fi

# ---- 7. PyTorch eager and torch.compile ----
if [ $cpu_only = 1 ] || ! python3 -c "import torch, numpy; assert torch.cuda.is_available()" 2> /dev/null; then
  row "PyTorch eager / torch.compile" "n/a ($([ $cpu_only = 1 ] && echo --cpu-only || echo no PyTorch with CUDA))"
else
  for m in fashion_cnn mlp; do
    [ "$(elapsed)" -gt 330 ] && { row "$m: PyTorch" "skipped: out of time (8-minute budget)"; continue; }
    log "7. $m in PyTorch (eager, torch.compile), $torch_steps steps"
    "$out/$m" --device cuda --steps 1 --data "$data" --quiet --save-init "$out/$m.init.ckpt" > /dev/null 2>&1
    res=""
    for mode in eager compile; do
      timeout 120 python3 tests/gpu/torch_gpu.py $m "$out/$m.init.ckpt" "$data" $torch_steps $mode \
        --json "$out/torch_${m}_$mode.json" > "$out/torch_${m}_$mode.log" 2>&1 &&
        res="$res $mode $(report torch "$out/torch_${m}_$mode.json" | grep ms_per_step | cut -f2) ms"
    done
    kiln_sps=$(grep "^$m " "$out/kiln_sps.txt" 2>/dev/null | cut -d' ' -f2)
    verdict=$(python3 - "$out/torch_${m}_compile.json" "${kiln_sps:-0}" <<'EOF' 2>/dev/null
import json, sys
t = json.load(open(sys.argv[1]))["samples_per_s"]
k = float(sys.argv[2])
print("ok (%.2fx)" % (k / t) if k > t else "slower (%.2fx)" % (k / t))
EOF
)
    row "$m: PyTorch ms per step" "${res:- failed (see $out/torch_${m}_*.log)}" "Kiln faster than torch.compile" "${verdict:-n/a}"
  done
fi

log "done"
echo
report table "$results" | tee "$out/table.md"
echo
echo "total $(elapsed) s; logs and JSON in $out"
exit $failed
