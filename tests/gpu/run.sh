#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU (written for one H200,
# 16 cores), in under 8 minutes. From the repository root:
#
#   tests/gpu/run.sh                 # everything, ends with one table
#   tests/gpu/run.sh --cpu-only      # the same flow on the CPU backend (checks the script itself)
#   tests/gpu/run.sh --quick         # small sizes (with --cpu-only: what ctest runs)
#   tests/gpu/run.sh --build DIR     # use an existing build instead of building build-gpu/
#   tests/gpu/run.sh --kit DIR       # run from a kit of tests/gpu/kit.sh: nothing built
#                                    # (KIT/run.sh calls this; what a lent GPU machine runs)
#   tests/gpu/run.sh --out DIR       # where table.md, summary.json and logs.tar.gz go
#                                    # (default: BUILD/gpu-run; with --kit: $OUT, else KIT/out)
#   tests/gpu/run.sh --budget S      # seconds for all stages (default 450)
#
# Stages (each records a row of the table; a failing stage does not stop
# the others; each command has its own time limit, cut to what is left of
# the budget, and a stage that would start with under 15 s left is
# skipped, so one stuck stage cannot eat the run):
#   0. with --kit: the kit's files against its MANIFEST, its Fashion-MNIST
#      read by one training step; on a GPU: where the driver, NVRTC,
#      cuBLASLt and the CUDA headers are (the kit carries none of them)
#   1. build Kiln (Release) in build-gpu/ (not with --build or --kit);
#      then kiln doctor's verdicts (exit 0 when what Kiln needs fits)
#   2. every CUDA kernel and GEMM of every example (train/eval, fused/
#      unfused, fp32/bf16/fp16) against the CPU backend on fresh random
#      inputs, relative-error bounds per dtype (kernel_check --device cuda)
#   3. 20 training steps of each example (fp32 and bf16) on the CPU and on
#      the GPU, the per-step losses compared
#   3b. NCCL: every collective (f32/bf16/f16) through the CUDA backend's
#      NCCL path on one GPU, bit-exact (nccl_check device); then, where
#      mpirun exists, mlp under mpirun -np 1 on the GPU with shard dp and
#      zero2, its losses against stage 3's CPU run
#   4. fashion_cnn trained to the end on the GPU: test accuracy (goal 0.92;
#      needs Fashion-MNIST, else synthetic data and no accuracy); 4b. 300
#      traced steps: the sampler's NVML readings in the summary and as
#      the trace's GPU counter tracks
#   5. kiln bench on the GPU: fused elementwise and batch-norm kernels'
#      share of a device-to-device copy's bandwidth (goal 80%), fusion gain;
#      5b. GPT-2 124M's causal attention ([4, 12, 1024, 64]): the tiled
#      kernels against the CPU, and their time per step against the
#      generated kernels' (KILN_CUDA_ATTENTION=generated)
#   6. step time with and without CUDA graphs; 6b. cuBLASLt GEMM epilogues:
#      tests/cudalt/epilogues.kl's GEMM steps with their epilogues (bias,
#      ReLU, tanh GELU and their backward) in cuBLASLt against the CPU
#      (kernel_check), and the MLP's step time with and without them
#      (KILN_CUDA_LT_EPILOGUE=0)
#   7. the same models in PyTorch eager and torch.compile, same batch,
#      optimizer and initial weights (goal: Kiln faster than torch.compile),
#      with the machine's own python3
# table.md, summary.json and logs.tar.gz (every stage's log and JSON) are
# rewritten after every row, so a run cut short still leaves them.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=build-gpu
reuse=0
kit=""
dest=""
cpu_only=0
quick=0
budget=450
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-only) cpu_only=1 ;;
    --quick) quick=1 ;;
    --build) build=$2; reuse=1; shift ;;
    --kit) kit=$(cd "$2" && pwd) || exit 2; shift ;;
    --out) dest=$2; shift ;;
    --budget) budget=$2; shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

start=$(date +%s)
if [ -n "$kit" ]; then
  # Work in a temporary folder; only the table, the summary and the logs'
  # tarball go to the destination (the device tool returns 8 files).
  cd "$kit"
  work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu.XXXXXX")
  out=$work/run
  dest=${dest:-${OUT:-$kit/out}}
else
  work=$build
  out=$build/gpu-run
  dest=${dest:-$out}
  mkdir -p "$build"
fi
rm -rf "$out" && mkdir -p "$out" "$dest"
out=$(cd "$out" && pwd)
dest=$(cd "$dest" && pwd)
results=$out/results.tsv
: > "$results"
failed=0
base_ldp=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$base_ldp
# Python (the machine's own, with PyTorch) never sees the kit's libraries.
py() { LD_LIBRARY_PATH=$base_ldp python3 "$@"; }
report() { py tests/gpu/report.py "$@"; }
# The table, the JSON summary and (when they go elsewhere) the logs'
# tarball, rewritten whole after every row: a run killed at its limit
# still leaves them.
publish() {
  report table "$results" > "$dest/table.md.tmp" 2> /dev/null; mv -f "$dest/table.md.tmp" "$dest/table.md"
  report json "$results" "$dest/summary.json" elapsed_s="$(elapsed)" budget_s="$budget" \
    mode="$([ -n "$kit" ] && echo kit || echo build)$([ $cpu_only = 1 ] && echo ', cpu-only')$([ $quick = 1 ] && echo ', quick')" \
    kit="$([ -n "$kit" ] && head -1 "$kit/MANIFEST" 2> /dev/null)" 2> /dev/null
  if [ "$dest" != "$out" ]; then
    tar czf "$dest/logs.tar.gz.tmp" -C "$(dirname "$out")" --exclude=cache "$(basename "$out")" 2> /dev/null &&
      mv -f "$dest/logs.tar.gz.tmp" "$dest/logs.tar.gz"
  fi
}
row() { # CHECK RESULT [GOAL [VERDICT]]: one line of the table (tabs and newlines become spaces)
  local f=("$1" "$2" "${3:-}" "${4:-}")
  f=("${f[@]//$'\n'/ }")
  f=("${f[@]//$'\t'/ }")
  printf '%s\t%s\t%s\t%s\n' "${f[@]}" >> "$results"
  [ "${4:-}" = FAIL ] && failed=1
  publish
  return 0
}
elapsed() { echo $(( $(date +%s) - start )); }
log() { echo "[$(elapsed) s] $*"; }
get() { grep -P "^$1\t" "$2" | head -1 | cut -f2; }  # key file -> value
# Seconds for the next command: WANT, cut to the budget left (less 20 s to
# write the results); fails when under 15 s would be left.
left_for() {
  local left=$(( budget - $(elapsed) - 20 ))
  [ $left -ge 15 ] || return 1
  echo $(( $1 < left ? $1 : left ))
}
# limited WANT CMD...: CMD under its limit (exit 124 when cut; 125 when no
# time was left to start it).
limited() {
  local s
  s=$(left_for "$1") || return 125
  shift
  timeout -k 5 "$s" "$@"
}
why() { # STATUS [LOG]: why a command failed, for its row (limited's statuses, else the log's last line)
  case $1 in
    0) ;;
    124|137) echo "timed out; " ;;
    125) echo "skipped: out of time (budget $budget s); " ;;
    *) [ -n "${2:-}" ] && [ -s "$2" ] && echo "exit $1: $(grep -v '^[[:space:]]*$' "$2" | tail -1 | cut -c1-160); " ;;
  esac
}
finish() {
  trap - EXIT INT TERM
  publish
  [ -z "$kit" ] || rm -rf "$work"
}
trap finish EXIT
trap 'row "run" "stopped by a signal after $(elapsed) s" "" FAIL; exit 1' INT TERM

dev=cuda
[ $cpu_only = 1 ] && dev=cpu
data=${KILN_DATA:-/usr/share/datasets/fashion-mnist}
[ -n "$kit" ] && data=$kit/data/fashion-mnist
kit_data=$data
real_data=1
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  data=synthetic:60000
  real_data=0
fi
steps20=20 bench_batch=512 bench_repeats=20 graph_steps=300 torch_steps=300 check_batch=32
if [ $quick = 1 ]; then
  steps20=5 bench_batch=32 bench_repeats=3 graph_steps=20 torch_steps=30 check_batch=4
  data=synthetic:2000
fi
models="mlp fashion_cnn"

# ---- 0. the kit ----
if [ -n "$kit" ]; then
  log "0. the kit: files, libraries, data"
  kiln=$kit/bin/kiln
  check=$kit/bin/kernel_check
  exes=$kit/bin
  bad=$(cd "$kit" && awk '$1 == "file" {print $4 "  " $2}' MANIFEST | sha256sum -c --quiet 2>&1 | grep -v '^sha256sum: WARNING' | head -3)
  nfiles=$(grep -c '^file ' "$kit/MANIFEST")
  if [ -z "$bad" ]; then v=ok; else v=FAIL; fi
  row "kit: $(head -1 "$kit/MANIFEST")" "$nfiles files$([ -z "$bad" ] && echo ' match MANIFEST' || echo ": $bad"); $(grep '^cubins ' "$kit/MANIFEST")" "sha256 as made" $v
  need=$(awk '$1 == "glibc" {print $2}' "$kit/MANIFEST")
  have=$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{print $2}')
  if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ]; then v=ok; else v=FAIL; fi
  row "kit: glibc" "the binaries need ${need:-?}; this machine has ${have:-?}" ">= ${need:-?}" $v
  # The libraries beyond the base system, unpacked where the binaries find them.
  mkdir -p "$work/lib"
  unpacked=""
  for f in "$kit"/lib/*.xz; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .xz)
    # xz, else Python's lzma (a machine may lack xz)
    xz -dc "$f" > "$work/lib/$n" 2> /dev/null ||
      py -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f" > "$work/lib/$n" ||
      { row "kit: libraries" "cannot unpack $f" "" FAIL; continue; }
    unpacked="$unpacked $n"
  done
  export LD_LIBRARY_PATH=$work/lib${base_ldp:+:$base_ldp}
  nf=$(ldd "$kiln" "$check" "$exes"/mlp "$exes"/fashion_cnn 2>&1 | grep -c 'not found')
  if [ "$nf" = 0 ]; then v=ok; else v=FAIL; fi
  row "kit: libraries" "unpacked:${unpacked:- none}; unresolved: $nf" "0 unresolved" $v
  if [ $real_data = 1 ]; then
    # One step on the CPU from the kit's files: the same losses as in a
    # checkout (tests/gpu/kit_check.sh compares them).
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 limited 60 "$exes/mlp" --device cpu --threads 1 --seed 1 --steps 2 --log-every 1 --data "$kit_data" \
      --metrics "$out/kit_data.json" > "$out/kit_data.log" 2>&1
    rc=$?
    tests=$(sed -n 's/.*eval .*(\([0-9]*\) samples).*/\1/p' "$out/kit_data.log" | tail -1)
    losses=$(py -c 'import json, sys; print(" ".join("%.6g" % r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"))' "$out/kit_data.json" 2> /dev/null)
    if [ $rc = 0 ] && [ "$tests" = 10000 ]; then v=ok; else v=FAIL; fi
    row "kit: Fashion-MNIST" "mlp on the CPU from the kit's files: ${tests:-no} test images; losses ${losses:-n/a} (seed 1, 1 thread; exit $rc)" "10000 test images" $v
  else
    row "kit: Fashion-MNIST" "not in the kit: synthetic data, no accuracy"
  fi
fi

# ---- 1. build ----
if [ -z "$kit" ] && [ $reuse = 0 ]; then
  log "1. building Kiln (Release) in $build"
  if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
     cmake --build "$build" -j"$(nproc)" >> "$out/build.log" 2>&1; then
    row "build" "Release, $(grep -o 'CUDA backend: .*' "$out/build.log" | head -1)" "" ok
  else
    tail -30 "$out/build.log"
    row "build" "failed (see $out/build.log)" "" FAIL
    exit 1
  fi
fi
if [ -z "$kit" ]; then
  # Found by name: the build tree's layout may change.
  find_exe() { find "$build" -type f -name "$1" -perm -u+x -not -path '*/CMakeFiles/*' -printf '%d %p\n' | sort -n | head -1 | cut -d' ' -f2-; }
  kiln=$(find_exe kiln)
  check=$(find_exe kernel_check)
  exes=$out
fi
if [ $cpu_only = 1 ]; then
  row "device" "none: --cpu-only runs the flow on the CPU backend"
elif command -v nvidia-smi > /dev/null; then
  row "device" "$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | head -1)"
fi

# ---- what the CUDA backend opens at run time (never carried) ----
# The driver, NVRTC and cuBLASLt are opened with dlopen: from the loader's
# path, CUDA_HOME, the build's toolkit or /usr/local/cuda; else PyTorch's
# pip packages (nvidia-*) may hold NVRTC and cuBLASLt.
find_lib() { # SONAME... -> the first one's path
  local n d
  for n in "$@"; do
    for d in ${LD_LIBRARY_PATH//:/ } ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
             /usr/lib/x86_64-linux-gnu /usr/lib64; do
      [ -e "$d/$n" ] && { echo "$d/$n"; return 0; }
    done
    ldconfig -p 2> /dev/null | awk -v n="$n" '$1 == n {print $NF; f = 1; exit} END {exit !f}' && return 0
  done
  return 1
}
pip_nvidia() { # FILE -> its path under the python packages' nvidia/ folder
  local d
  for d in $(py -c 'import nvidia; print(" ".join(nvidia.__path__))' 2> /dev/null); do
    find "$d" -name "$1" 2> /dev/null | head -1 | grep . && return 0
  done
  return 1
}
if [ $cpu_only = 0 ]; then
  libs=""
  missing=""
  for names in "libcuda.so.1" "libnvrtc.so.13 libnvrtc.so.12" "libcublasLt.so.13 libcublasLt.so.12"; do
    p=$(find_lib $names) || p=""
    if [ -z "$p" ] && [ "$names" != libcuda.so.1 ]; then
      for n in $names; do p=$(pip_nvidia "$n") && break; done
    fi
    # dlopen by name finds it there too (after the kit's libraries).
    case ":$LD_LIBRARY_PATH:" in
      *":$(dirname "${p:-/}"):"*) ;;
      *) [ -n "$p" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$p") ;;
    esac
    libs="$libs${names%% *} ${p:-MISSING}; "
    [ -n "$p" ] || missing="$missing ${names%% *}"
  done
  inc=""
  for d in ${KILN_CUDA_INCLUDE:-} ${CUDA_HOME:+$CUDA_HOME/include} /usr/local/cuda/include; do
    [ -f "$d/cuda_bf16.h" ] && { inc=$d; break; }
  done
  if [ -z "$inc" ] && h=$(pip_nvidia cuda_bf16.h); then
    inc=$(dirname "$h")
    export KILN_CUDA_INCLUDE=$inc
  fi
  [ -n "$inc" ] || missing="$missing cuda_bf16.h"
  if [ -z "$missing" ]; then v=ok; else v=FAIL; fi
  row "CUDA libraries and headers" "${libs}headers ${inc:-MISSING}" "all found" $v
fi
cc_v=$( (${KILN_CC:-${CC:-cc}} --version 2> /dev/null || echo none) | head -1)
row "C compiler (CPU kernels of other settings, kernel_check's reference)" "${KILN_CC:-${CC:-cc}}: $cc_v"
export KILN_CACHE_DIR=$work/cache
[ -n "$kit" ] || export KILN_CACHE_DIR=$out/cache

# ---- kiln doctor: what Kiln finds here and whether it fits (issue 14) ----
limited 60 "$kiln" doctor > "$out/doctor.log" 2>&1
rc=$?
"$kiln" doctor --json > "$out/doctor.json" 2> /dev/null || true
row "kiln doctor" "$(grep -E '^  (problem|note) ' "$out/doctor.log" | head -3 | tr -s ' ' | tr '\n' ';')$(tail -1 "$out/doctor.log")" "exit 0" $([ $rc = 0 ] && echo ok || echo FAIL)

# ---- 2. every kernel against the CPU ----
if [ $quick = 1 ]; then
  row "kernels vs CPU" "skipped in --quick (ctest runs kernel_check --emulate)"
elif [ -n "$kit" ] && [ $cpu_only = 1 ]; then
  row "kernels vs CPU" "n/a (--cpu-only from a kit: the emulation needs a checkout's tests/cuda)"
else
  mode="--device cuda"
  [ $cpu_only = 1 ] && mode=--emulate
  log "2. kernel_check $mode: every kernel of every example against the CPU backend"
  seed=$(( $(date +%s) % 100000 ))
  # GPT-2 small left out: the GPT example's kernel templates at a size
  # whose CPU reference alone (batch 32, context 1024) would take past the
  # 240 s; ctest's cuda.nvrtc.gpt2_small compiles its kernels.
  check_examples=()
  for ex in examples/*.kl; do [ "$ex" = examples/gpt2_small.kl ] || check_examples+=("$ex"); done
  limited 240 "$check" $mode --batch $check_batch --seed $seed "${check_examples[@]}" > "$out/kernels.log" 2>&1
  rc=$?
  tail -4 "$out/kernels.log"
  summary=$(grep -E '^examples/.*distinct kernels' "$out/kernels.log" |
    sed -E 's/^examples\/([a-z_]+)\.kl: ([0-9]+) distinct kernels.* ([0-9]+) failures.*/\1 \2 kernels, \3 failures/' | paste -sd ';' - | sed 's/;/; /g')
  worst=$(grep -oE 'worst relative error [^;]*' "$out/kernels.log" | tail -1)
  if [ $rc = 0 ]; then
    row "kernels vs CPU (seed $seed, batch $check_batch)" "$summary; $worst" "bounds f32 1e-4, bf16 1.6e-2, f16 2e-3" ok
  else
    row "kernels vs CPU (seed $seed)" "$(why $rc "$out/kernels.log")${summary:-no summary}; see kernels.log" "0 failures" FAIL
  fi
fi

# ---- 3. 20 steps on both backends ----
log "3. $steps20 training steps of each example on the CPU and on $dev"
for m in $models; do
  if [ -z "$kit" ] && ! "$kiln" build "examples/$m.kl" -o "$out/$m" > "$out/$m.build.log" 2>&1; then
    row "$m: build" "failed (see $m.build.log)" "" FAIL
    continue
  fi
  # fp32, and bf16 (low-precision storage and GEMM operands: a looser bound).
  for prec in fp32 bf16; do
    bound=1e-2
    [ $prec = bf16 ] && bound=5e-2
    # The two backends at once (the GPU run barely uses the CPU).
    for d in $(echo cpu $dev | tr ' ' '\n' | sort -u); do
      { limited 120 "$exes/$m" --device $d --precision $prec --steps $steps20 --log-every 1 --seed 1 --data "$data" --quiet \
          --metrics "$out/$m.$prec.$d.steps.json" > "$out/$m.$prec.$d.steps.log" 2>&1
        echo $? > "$out/$m.$prec.$d.rc"; } &
    done
    wait
    t=$out/$m.$prec.losses.tsv
    if report losses "$out/$m.$prec.cpu.steps.json" "$out/$m.$prec.$dev.steps.json" $bound > "$t" 2>&1; then v=ok; else v=FAIL; fi
    err=""
    for d in $(echo cpu $dev | tr ' ' '\n' | sort -u); do
      e=$(why "$(cat "$out/$m.$prec.$d.rc")" "$out/$m.$prec.$d.steps.log")
      [ -n "$e" ] && err="$err$d: $e"
    done
    row "$m $prec: $steps20 steps, CPU vs $dev" "${err}losses $(get last_loss "$t") at the end; max relative difference $(get max_rel_diff "$t")" "$bound" $v
  done
done

# ---- 3b. NCCL: the collectives' GPU path, and mpirun -np 1 ----
if [ $cpu_only = 1 ]; then
  row "NCCL collectives on the GPU" "n/a (--cpu-only)"
else
  log "3b. NCCL: collectives on the GPU; mlp under mpirun -np 1"
  if [ -n "$kit" ]; then nccl_check=$kit/bin/nccl_check; else nccl_check=$(find_exe nccl_check); fi
  # libnccl: the loader's path or the toolkit, else PyTorch's nvidia-nccl.
  p=$(find_lib libnccl.so.2) || p=$(pip_nvidia libnccl.so.2) || p=""
  [ -n "$p" ] && export KILN_NCCL_LIB=$p
  if [ ! -x "${nccl_check:-/}" ]; then
    row "NCCL collectives on the GPU" "no nccl_check (the build had no nccl.h)" "" FAIL
  else
    limited 120 "$nccl_check" device > "$out/nccl.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then v=ok; else v=FAIL; fi
    row "NCCL collectives on the GPU" "$(why $rc "$out/nccl.log")libnccl ${p:-not found}; $(tail -1 "$out/nccl.log")" "f32/bf16/f16 bit-exact (1 rank)" $v
  fi
  if command -v mpirun > /dev/null; then
    for shard in dp zero2; do
      limited 120 mpirun --allow-run-as-root --oversubscribe -np 1 "$exes/mlp" --device cuda --shard $shard --steps $steps20 \
        --log-every 1 --seed 1 --data "$data" --quiet --metrics "$out/mlp.mpi.$shard.json" > "$out/mlp.mpi.$shard.log" 2>&1
      rc=$?
      t=$out/mlp.mpi.$shard.losses.tsv
      if [ $rc = 0 ] && report losses "$out/mlp.fp32.cpu.steps.json" "$out/mlp.mpi.$shard.json" 1e-2 > "$t" 2>&1; then v=ok; else v=FAIL; fi
      row "mlp: mpirun -np 1 --device cuda --shard $shard vs CPU" "$(why $rc "$out/mlp.mpi.$shard.log")losses $(get last_loss "$t") at the end; max relative difference $(get max_rel_diff "$t")" "1e-2" $v
    done
  else
    row "mlp under mpirun -np 1 on the GPU" "n/a: no mpirun on this machine"
  fi
fi

# ---- 4. fashion_cnn to the end on the GPU ----
if [ $cpu_only = 1 ] || [ $real_data = 0 ]; then
  row "fashion_cnn trained on the GPU" "n/a ($([ $cpu_only = 1 ] && echo --cpu-only || echo no Fashion-MNIST at $data))" ">= 0.92"
else
  log "4. fashion_cnn trained to the end on the GPU"
  t0=$(date +%s)
  limited 150 "$exes/fashion_cnn" --device cuda --data "$data" --quiet --metrics "$out/cnn_full.json" > "$out/cnn_full.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  acc=$(report summary "$out/cnn_full.json" final_ 2>/dev/null | cut -f2)
  if [ $rc = 0 ] && py -c "import sys; sys.exit(0 if float('$acc') >= 0.92 else 1)" 2>/dev/null; then v=ok; else v=FAIL; fi
  row "fashion_cnn trained on the GPU" "$(why $rc "$out/cnn_full.log")test accuracy ${acc:-n/a} after the train block's epochs, ${secs} s (exit $rc)" ">= 0.92" $v
fi
# The sampler's NVML readings (issue 14): 300 traced steps (a trace times
# every kernel), their summary line and the trace's GPU counter tracks.
if [ $cpu_only = 0 ]; then
  log "4b. GPU readings (NVML) in a traced run"
  limited 90 "$exes/fashion_cnn" --device cuda --data synthetic:20000 --steps 300 --log-every 100 --eval-every 0 \
    --metrics "$out/readings.json" --trace "$out/readings_trace.json" > "$out/readings.log" 2>&1
  rc=$?
  tracks=$(py -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sum(1 for e in d if e.get("ph") == "C" and e["name"].startswith("GPU")))' "$out/readings_trace.json" 2> /dev/null)
  line=$(grep -E '^host: ' "$out/readings.log" | head -1)
  if [ $rc = 0 ] && grep -q 'GPU busy' <<< "$line" && [ "${tracks:-0}" -gt 0 ]; then v=ok; else v=FAIL; fi
  row "GPU readings (NVML)" "$(why $rc "$out/readings.log")${line:-no host: line}; ${tracks:-0} GPU counter samples in the trace" "GPU busy, memory, power" $v
fi

# ---- 5. kiln bench on the GPU ----
log "5. kiln bench --device $dev (batch $bench_batch)"
for m in fashion_cnn mlp; do
  limited 150 "$kiln" bench "examples/$m.kl" --device $dev --batch $bench_batch --repeats $bench_repeats --json \
    > "$out/bench_$m.json" 2> "$out/bench_$m.log"
  rc=$?
  if [ $rc = 0 ] && report bench "$out/bench_$m.json" > "$out/bench_$m.tsv"; then
    share=$(get share_elementwise_batchnorm "$out/bench_$m.tsv")
    goal=">= 80%"
    v=$(py -c "print('ok' if float('${share%\%}') >= 80 else 'below goal')")
    [ $cpu_only = 1 ] && { goal="(CPU: memcpy bandwidth)"; v=""; }
    row "$m: fused elementwise + batch-norm kernels" "$share of copy bandwidth ($(get copy_gb_s "$out/bench_$m.tsv") GB/s); step $(get step_ms "$out/bench_$m.tsv") ms, fusion $(get fusion_speedup "$out/bench_$m.tsv")" "$goal" "$v"
  else
    row "$m: kiln bench" "$(why $rc "$out/bench_$m.log")see bench_$m.log" "" FAIL
  fi
done

# ---- 5b. the tiled attention kernels (codegen/cuda_attn.cuh) ----
# GPT-2 124M's attention shapes (quick: small ones): the tiled kernels
# against the CPU backend (kernel_check), then each attention kernel's time
# per step, tiled against the generated kernels (KILN_CUDA_ATTENTION).
attn_shape="4, 12, 1024, 64"
[ $quick = 1 ] && attn_shape="2, 4, 128, 32"
cat > "$out/attention.kl" <<KL
# tests/gpu/run.sh: causal attention of shape [$attn_shape], a training step
model m {
  param q : f32[$attn_shape] init = normal(std = 1)
  param k : f32[$attn_shape] init = normal(std = 1)
  param v : f32[$attn_shape] init = normal(std = 1)
  param r : f32[$attn_shape] init = normal(std = 1)
  loss = mean(attention(q, k, v) * r)
}
KL
log "5b. attention [$attn_shape], causal: tiled vs generated kernels"
if [ -n "$kit" ] && [ $cpu_only = 1 ]; then
  row "attention kernels vs CPU" "n/a (--cpu-only from a kit: the emulation needs a checkout's tests/cuda)"
else
  mode="--device cuda"
  [ $cpu_only = 1 ] && mode=--emulate
  limited 120 "$check" $mode --batch 1 --precisions fp32 --config "train fused" "$out/attention.kl" > "$out/attention_check.log" 2>&1
  rc=$?
  worst=$(grep -oE 'worst relative error [^;]*' "$out/attention_check.log" | tail -1)
  fails=$(grep -oE '[0-9]+ failures' "$out/attention_check.log" | tail -1)
  row "attention [$attn_shape] kernels vs CPU" "$(why $rc "$out/attention_check.log")${fails:-no summary}; ${worst:-see attention_check.log}" "0 failures (f32 1e-4)" $([ $rc = 0 ] && echo ok || echo FAIL)
fi
attn_row=""
for choice in tiled generated; do
  # (--cpu-only: the CPU's hand-written kernels against its generated ones)
  cpu_choice=native
  [ $choice = generated ] && cpu_choice=generated
  KILN_CUDA_ATTENTION=$choice KILN_CPU_ATTENTION=$cpu_choice limited 120 "$kiln" bench "$out/attention.kl" --device $dev --repeats $bench_repeats --json \
    > "$out/attention_$choice.json" 2> "$out/attention_$choice.log"
  rc=$?
  if [ $rc = 0 ] && report attention "$out/attention_$choice.json" > "$out/attention_$choice.tsv"; then
    attn_row="$attn_row$choice: forward $(get attention_ms "$out/attention_$choice.tsv") ms, grad_q $(get attention_grad_q_ms "$out/attention_$choice.tsv"), grad_kv $(get attention_grad_kv_ms "$out/attention_$choice.tsv"), all $(get attention_total_ms "$out/attention_$choice.tsv") ms; "
  else
    attn_row="$attn_row$choice: $(why $rc "$out/attention_$choice.log")see attention_$choice.log; "
  fi
done
speedup=$(py -c "print('%.2fx' % (float('$(get attention_total_ms "$out/attention_generated.tsv" 2>/dev/null)') / float('$(get attention_total_ms "$out/attention_tiled.tsv" 2>/dev/null)')))" 2>/dev/null)
row "attention [$attn_shape], causal, per step" "${attn_row}tiled speedup ${speedup:-n/a}$([ $cpu_only = 1 ] && echo ' (CPU: runtime/cpu/cpu_attn.c against the generated C)')" "tiled faster than generated"

# ---- 6. CUDA graphs ----
if [ $cpu_only = 1 ]; then
  row "step time with / without CUDA graphs" "n/a (--cpu-only)"
else
  log "6. step time with and without CUDA graphs ($graph_steps steps)"
  for m in $models; do
    err=""
    for g in graph nograph; do
      flag=""
      [ $g = nograph ] && flag=--no-cuda-graph
      limited 120 "$exes/$m" --device cuda --steps $graph_steps --data "$data" --quiet $flag \
        --metrics "$out/$m.$g.json" > "$out/$m.$g.log" 2>&1
      rc=$?
      [ $rc = 0 ] || err="$err$g: $(why $rc "$out/$m.$g.log")"
    done
    sps_g=$(report summary "$out/$m.graph.json" timed_samples_per_s 2>/dev/null | cut -f2)
    sps_n=$(report summary "$out/$m.nograph.json" timed_samples_per_s 2>/dev/null | cut -f2)
    row "$m: ms per step (batch 128), graphs / no graphs" \
      "$err$(py -c "print('%.3f / %.3f' % (128e3 / $sps_g, 128e3 / $sps_n))" 2>/dev/null || echo n/a)" "" "$([ -n "$err" ] && echo FAIL)"
    echo "$m $sps_g" >> "$out/kiln_sps.txt"
  done
fi

# ---- 6b. cuBLASLt GEMM epilogues ----
lt_model=tests/cudalt/epilogues.kl
[ -n "$kit" ] && lt_model=$kit/tests/cudalt/epilogues.kl
if [ $quick = 1 ] || [ ! -f "$lt_model" ]; then
  row "cuBLASLt epilogues vs CPU" "skipped ($([ $quick = 1 ] && echo '--quick: ctest runs cudalt.cuda.emulate' || echo "no $lt_model"))"
else
  mode="--device cuda"
  [ $cpu_only = 1 ] && mode=--emulate
  log "6b. kernel_check $mode on $lt_model: GEMM epilogues in cuBLASLt against the CPU"
  limited 120 "$check" $mode --batch $check_batch "$lt_model" > "$out/lt_epilogues.log" 2>&1
  rc=$?
  line=$(grep -E 'GEMM steps with their cuBLASLt epilogue' "$out/lt_epilogues.log" | tail -1 | sed -E 's/^[^:]*: //')
  if [ $rc = 0 ] && [ -n "$line" ]; then v=ok; else v=FAIL; fi
  row "cuBLASLt epilogues vs CPU (batch $check_batch)" "$(why $rc "$out/lt_epilogues.log")${line:-no summary; see lt_epilogues.log}" "0 failures" $v
fi
if [ $cpu_only = 1 ]; then
  row "mlp: ms per step with / without cuBLASLt epilogues" "n/a (--cpu-only)"
else
  log "6b. mlp step time with and without cuBLASLt epilogues ($graph_steps steps)"
  err=""
  for lt in 1 0; do
    KILN_CUDA_LT_EPILOGUE=$lt limited 120 "$exes/mlp" --device cuda --steps $graph_steps --data "$data" \
      --metrics "$out/mlp.lt$lt.json" > "$out/mlp.lt$lt.log" 2>&1
    rc=$?
    [ $rc = 0 ] || err="$err KILN_CUDA_LT_EPILOGUE=$lt: $(why $rc "$out/mlp.lt$lt.log")"
  done
  sps_1=$(report summary "$out/mlp.lt1.json" timed_samples_per_s 2>/dev/null | cut -f2)
  sps_0=$(report summary "$out/mlp.lt0.json" timed_samples_per_s 2>/dev/null | cut -f2)
  used=$(grep -m1 -o 'cuBLASLt GEMM epilogues: .*' "$out/mlp.lt1.log")
  row "mlp: ms per step (batch 128), Lt epilogues on / off" \
    "$err$(py -c "print('%.3f / %.3f' % (128e3 / $sps_1, 128e3 / $sps_0))" 2>/dev/null || echo n/a); ${used:-no start-up line}" "" "$([ -n "$err" ] && echo FAIL)"
fi

# ---- 7. PyTorch eager and torch.compile (the machine's own python3) ----
if [ $cpu_only = 1 ] || ! py -c "import torch, numpy; assert torch.cuda.is_available()" 2> /dev/null; then
  row "PyTorch eager / torch.compile" "n/a ($([ $cpu_only = 1 ] && echo --cpu-only || echo no PyTorch with CUDA))"
else
  row "PyTorch" "$(py -c 'import sys, torch; print("torch %s (CUDA %s), python %s" % (torch.__version__, torch.version.cuda, sys.version.split()[0]))' 2>&1 | tail -1)"
  for m in fashion_cnn mlp; do
    left_for 60 > /dev/null || { row "$m: PyTorch" "skipped: out of time (budget $budget s)"; continue; }
    log "7. $m in PyTorch (eager, torch.compile), $torch_steps steps"
    limited 60 "$exes/$m" --device cuda --steps 1 --data "$data" --quiet --save-init "$out/$m.init.ckpt" > /dev/null 2>&1
    res=""
    for mode in eager compile; do
      PYTHONUNBUFFERED=1 limited 120 env LD_LIBRARY_PATH="$base_ldp" python3 tests/gpu/torch_gpu.py $m "$out/$m.init.ckpt" "$data" $torch_steps $mode \
        --json "$out/torch_${m}_$mode.json" > "$out/torch_${m}_$mode.log" 2>&1 &&
        res="$res $mode $(report torch "$out/torch_${m}_$mode.json" | grep ms_per_step | cut -f2) ms"
    done
    kiln_sps=$(grep "^$m " "$out/kiln_sps.txt" 2>/dev/null | cut -d' ' -f2)
    verdict=$(py - "$out/torch_${m}_compile.json" "${kiln_sps:-0}" <<'EOF' 2>/dev/null
import json, sys
t = json.load(open(sys.argv[1]))["samples_per_s"]
k = float(sys.argv[2])
print("ok (%.2fx)" % (k / t) if k > t else "slower (%.2fx)" % (k / t))
EOF
)
    row "$m: PyTorch ms per step" "${res:- failed (see torch_${m}_*.log)}" "Kiln faster than torch.compile" "${verdict:-n/a}"
  done
fi

log "done"
finish
echo
cat "$dest/table.md"
echo
echo "total $(elapsed) s; table.md, summary.json$([ "$dest" != "$out" ] && echo ', logs.tar.gz') in $dest"
exit $failed
