#!/usr/bin/env bash
# The GPT example's training step, Kiln against PyTorch on the CPU, in one
# run: tokens/s of examples/gpt.kl (Kiln) and of the same model in
# PyTorch (bench/gpt_torch.py), eager and torch.compile, with the same
# config (4 layers, 4 heads, width 128, context 128), the same initial
# weights (Kiln's --save-init, exported as safetensors, loaded by
# PyTorch), the same batch, AdamW with clipping, and the same threads
# (1, then 2). Prints one line per (threads, framework) and the ratios:
# of tokens/s (wall time), and at one thread also of the CPU time a step
# costs (which a shared machine's load changes far less).
#
#   bench/gpt_torch.sh [STEPS] [BATCH]      (defaults: 30 16)
#
# Timed: the steps after a warm-up (Kiln: its timed steps; PyTorch: after
# max(3, STEPS / 10) steps, which include torch.compile's compilation).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this script alone
# (a workplace may pin OpenBLAS to other kernels with them); the OpenBLAS
# core Kiln's GEMMs use is printed. PyTorch brings its own BLAS. torch
# comes from $KILN_TORCH_PYTHON, python3, or build/torchvenv (installed
# from PyPI once: tests/gpt/torch_env.bash). KILN=path/to/kiln
# (default ./build/kiln).
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
steps=${1:-30}
batch=${2:-16}
kiln=${KILN:-./build/kiln}
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
source tests/gpt/torch_env.bash
torch_python build || exit 1
# The model is PyTorch's as much as Kiln's: the same loss from the same
# weights (the check ctest runs when torch is installed).
KILN_TORCH_PYTHON=$torch_py bash tests/gpt/torch_first_loss.sh "$kiln" build || exit 1
if [ ! -f examples/data/pystd/train.tok ]; then
  KILN=$kiln bash bench/pack_pystd.sh /usr/lib/python3.11 examples/data/pystd > /dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kiln" build examples/gpt.kl -o "$tmp/gpt"
"$tmp/gpt" --steps 1 --threads 1 --eval-every 0 --quiet --save-init "$tmp/init.ckpt" > /dev/null 2>&1
"$kiln" export "$tmp/init.ckpt" -o "$tmp/init.safetensors" > /dev/null
core=$(python3 -c '
import ctypes, ctypes.util
lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2> /dev/null || echo unknown)
gemms=$("$tmp/gpt" --steps 1 --threads 1 --eval-every 0 2>&1 | grep -o 'fp32 GEMMs: [^,]*' || true)
echo "Kiln's $gemms; OpenBLAS core $core (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset)"
echo "$("$torch_py" -c 'import torch; print("torch", torch.__version__, "CPU capability", torch.backends.cpu.get_cpu_capability())')"
echo "batch $batch x context 128, $steps timed steps; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The CPU seconds (user + system) of a command's process and its threads.
cpu_seconds() {
  python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$@"
}
# CPU ms per step: at one thread the time a step costs whatever else the
# machine runs (Kiln: a run of STEPS + 5 steps less one of 5, so start-up
# and warm-up cancel; PyTorch: process time over its timed steps). At 2
# threads both spin in OpenMP barriers, so only wall time is printed.
printf '%7s %-16s %10s %12s %12s\n' threads framework tokens/s ms/step cpu-ms/step
kiln_run() { # THREADS STEPS [ARGS...]
  local th=$1 n=$2
  shift 2
  "$tmp/gpt" --steps "$n" --threads "$th" --batch "$batch" --eval-every 0 --quiet --init "$tmp/init.safetensors" "$@"
}
for th in 1 2; do
  kiln_cpu=-
  if [ "$th" = 1 ]; then
    long=$(cpu_seconds "$tmp/gpt" --steps $((steps + 5)) --threads 1 --batch "$batch" --eval-every 0 --quiet \
      --init "$tmp/init.safetensors" --metrics "$tmp/kiln$th.jsonl")
    short=$(cpu_seconds "$tmp/gpt" --steps 5 --threads 1 --batch "$batch" --eval-every 0 --quiet --init "$tmp/init.safetensors")
    kiln_cpu=$(python3 -c "print('%.1f' % (1e3 * ($long - $short) / $steps))")
  else
    kiln_run "$th" $((steps + 5)) --metrics "$tmp/kiln$th.jsonl" > /dev/null 2>&1
  fi
  kiln_tps=$(python3 -c "
import json, sys
s = [r for r in map(json.loads, open('$tmp/kiln$th.jsonl')) if r['type'] == 'summary'][-1]
print(s['timed_samples_per_s'] * 128, s['timed_ms_per_step'])")
  set -- $kiln_tps
  printf '%7d %-16s %10.0f %12.1f %12s\n' $th kiln "$1" "$2" "$kiln_cpu"
  k=$1
  for mode in eager compile; do
    out=$("$torch_py" bench/gpt_torch.py speed "$tmp/init.safetensors" examples/data/pystd/train.tok 128 4 "$batch" "$steps" $th $mode 2> "$tmp/torch.err") ||
      { cat "$tmp/torch.err"; exit 1; }
    set -- $(python3 -c "import json; r = json.loads('''$out'''); print(r['tokens_per_s'], r['ms_per_step'], r['cpu_ms_per_step'])")
    line=$(printf '%7d %-16s %10.0f %12.1f' $th "pytorch $mode" "$1" "$2")
    if [ "$th" = 1 ]; then
      printf '%s %12.1f   kiln / %s = %.2fx (wall), %.2fx (CPU time)\n' "$line" "$3" $mode \
        "$(python3 -c "print($k / $1)")" "$(python3 -c "print($3 / $kiln_cpu)")"
    else
      printf '%s %12s   kiln / %s = %.2fx (wall)\n' "$line" - $mode "$(python3 -c "print($k / $1)")"
    fi
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
