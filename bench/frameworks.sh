#!/usr/bin/env bash
# Kiln against PyTorch eager, torch.compile and JAX (jit) on the CPU, in
# one run: the same model, batch 128, initial weights (Kiln writes them,
# the others read them), AdamW, warmup + cosine schedule and thread
# count, on Fashion-MNIST. The systems run alternated, ROUNDS times (the
# order rotates each round); it prints each one's median samples/s and
# Kiln's ratio to each, with the CPU, its ISA, the OpenBLAS core and the
# load.
#
#   bench/frameworks.sh [MODEL...] [--threads N] [--rounds R] [--steps-mlp N] [--steps-cnn N]
#
# MODEL: mlp, fashion_cnn (default both; 1,500 and 60 steps). PYTHON names
# a Python with torch, numpy and jax (default python3); a framework it
# lacks is reported as not run. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# are unset for this command alone (benchmarks run the library's own
# choice of kernels). Throughput is over the steps after ten warm-up
# steps, without evaluation.
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
models=() threads=1 rounds=3 steps_mlp=1500 steps_cnn=60
while [ $# -gt 0 ]; do
  case $1 in
  --threads) threads=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --steps-mlp) steps_mlp=$2; shift 2 ;;
  --steps-cnn) steps_cnn=$2; shift 2 ;;
  mlp | fashion_cnn) models+=("$1"); shift ;;
  *) echo "bench/frameworks.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ ${#models[@]} -gt 0 ] || models=(mlp fashion_cnn)
py=${PYTHON:-python3}
data=/usr/share/datasets/fashion-mnist
kiln=./build/kiln
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
[ -d "$data" ] || { echo "no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

has() { "$py" -c "import $1" 2> /dev/null; }
systems=(kiln)
has torch && has numpy && systems+=(eager compile)
has jax && has numpy && systems+=(jax)
flags=$(grep -m1 '^flags' /proc/cpuinfo)
isa=$(for f in avx2 avx512f avx512_bf16 avx512_fp16 amx_tile; do if grep -qw $f <<< "$flags"; then printf '%s ' $f; fi; done)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs; ISA: ${isa:-none of avx2/avx-512}"
echo "openblas: $("$kiln" doctor 2> /dev/null | sed -n 's/^ *openblas *//p')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); threads $threads; rounds $rounds; python $("$py" -c 'import sys; print(sys.version.split()[0])')"
for s in eager compile jax; do [[ " ${systems[*]} " == *" $s "* ]] || echo "$s: not run ($py lacks it)"; done

# run SYSTEM MODEL STEPS OUT: one timed run, its samples/s in OUT.
run() {
  local sys=$1 model=$2 steps=$3 out=$4
  case $sys in
  kiln)
    "$tmp/$model" --steps "$steps" --threads "$threads" --log-every 100 --eval-every 0 --data "$data" --quiet \
      --metrics "$tmp/k.json" > /dev/null
    "$py" -c 'import json, sys; print([json.loads(l) for l in open(sys.argv[1]) if "summary" in l][-1]["timed_samples_per_s"])' \
      "$tmp/k.json" > "$out" ;;
  eager | compile)
    "$py" bench/torch_compare.py "$model" "$tmp/$model.init" "$data" "$steps" "$threads" --json "$tmp/t.json" \
      $([ "$sys" = compile ] && echo --compile) > /dev/null 2>&1
    "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["samples_per_s"])' "$tmp/t.json" > "$out" ;;
  jax)
    "$py" bench/jax_compare.py "$model" "$tmp/$model.init" "$data" "$steps" "$threads" --json "$tmp/j.json" > /dev/null 2>&1
    "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["samples_per_s"])' "$tmp/j.json" > "$out" ;;
  esac
}

for model in "${models[@]}"; do
  steps=$steps_mlp
  [ "$model" = fashion_cnn ] && steps=$steps_cnn
  "$kiln" build "examples/$model.kl" -o "$tmp/$model" > /dev/null
  "$tmp/$model" --steps 1 --threads "$threads" --data "$data" --quiet --eval-every 0 --save-init "$tmp/$model.init" > /dev/null
  for ((r = 0; r < rounds; r++)); do
    n=${#systems[@]}
    for ((k = 0; k < n; k++)); do
      sys=${systems[$(((k + r) % n))]}
      run "$sys" "$model" "$steps" "$tmp/$model.$sys.$r" || echo "nan" > "$tmp/$model.$sys.$r"
    done
  done
  echo "$model, $steps steps of batch 128, $threads thread(s), AdamW, same initial weights, median of $rounds alternated rounds:"
  "$py" - "$tmp" "$model" "$rounds" "${systems[@]}" <<'PY'
import statistics, sys
tmp, model, rounds, systems = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
names = {"kiln": "kiln", "eager": "pytorch eager", "compile": "torch.compile", "jax": "jax (jit)"}
med = {}
for s in systems:
    vals = [float(open("%s/%s.%s.%d" % (tmp, model, s, r)).read()) for r in range(rounds)]
    med[s] = statistics.median(vals)
    print("  %-14s %10.1f samples/s  (rounds: %s)" % (names[s], med[s], ", ".join("%.1f" % v for v in vals)))
for s in systems[1:]:
    print("  kiln / %-14s %6.2fx" % (names[s], med["kiln"] / med[s]))
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
