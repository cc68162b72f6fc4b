#!/usr/bin/env bash
# A GPT with GELU in its tanh form (GPT-2's), trained in Kiln, PyTorch
# eager and torch.compile, alternated (Kiln, eager, compile, and again),
# REPEATS rounds, at each thread count: the median step time of each as
# tokens/s, its ratio to PyTorch's, and the peak RSS of each run. The same
# model, the same initial weights (Kiln's --save-init, exported as
# safetensors, read by bench/gpt_torch.py with GELU=tanh), the same token
# file, batch, optimizer (AdamW with clipping) and thread count.
#
#   bench/gpt_tanh.sh [STEPS] [BATCH] [REPEATS] [THREADS...]
#     MODEL=gpt (default): examples/gpt.kl with `approximate = "tanh"`
#       added to its gelu (byte vocabulary, context 128, 4 layers, 4 heads,
#       width 128, tied logits); defaults 30 16 3 1 2
#     MODEL=gpt2_small: examples/gpt2_small.kl (124M params, context 1024,
#       12 layers, 12 heads, width 768); defaults 3 4 3 2
#     PRECISION=fp32 (default) or bf16: Kiln's precision = bf16 against
#       PyTorch's CPU autocast to bf16 (fp32 masters in both)
#
# Timed: each framework's steps after WARM warm-up steps (default
# max(3, STEPS / 10) for the example, 2 for GPT-2 small; torch.compile
# compiles in them), the median of the steps' times (Kiln's per-step
# metrics lines, PyTorch's own clock). Without torch (KILN_TORCH_PYTHON,
# python3, or build/torchvenv; NOINSTALL=1 keeps PyPI out of it) only
# Kiln's lines are printed. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are
# unset for this script alone; the CPU, its load and the GEMM libraries
# in use are printed. KILN=path/to/kiln (default ./build/kiln).
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
model=${MODEL:-gpt}
precision=${PRECISION:-fp32}
case $model in
  gpt) context=128 heads=4 def_steps=30 def_batch=16 def_threads="1 2" ;;
  gpt2_small) context=1024 heads=12 def_steps=3 def_batch=4 def_threads=2 ;;
  *) echo "MODEL=$model: expected gpt or gpt2_small"; exit 2 ;;
esac
case $precision in fp32 | bf16) ;; *) echo "PRECISION=$precision: expected fp32 or bf16"; exit 2 ;; esac
steps=${1:-$def_steps}
batch=${2:-$def_batch}
repeats=${3:-3}
shift $(($# < 3 ? $# : 3))
threads=${*:-$def_threads}
if [ "$model" = gpt ]; then warm=${WARM:-$((steps / 10 > 3 ? steps / 10 : 3))}; else warm=${WARM:-2}; fi
kiln=${KILN:-./build/kiln}
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
source tests/gpt/torch_env.bash
torch_py=
if torch_python build ${NOINSTALL:+noinstall} > /dev/null 2>&1; then
  have_torch=1
else
  have_torch=0
  echo "torch is not available: Kiln only"
fi
if [ ! -f examples/data/pystd/train.tok ]; then
  KILN=$kiln bash bench/pack_pystd.sh /usr/lib/python3.11 examples/data/pystd > /dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# (its token files named from the example's folder, where they are)
sed -e 's/gelu(dense(norm(x), 4 \* c))/gelu(dense(norm(x), 4 * c), approximate = "tanh")/' \
  -e "s|\"data/pystd/|\"$PWD/examples/data/pystd/|g" "examples/$model.kl" > "$tmp/gpt_tanh.kl"
grep -q 'approximate = "tanh"' "$tmp/gpt_tanh.kl" || { echo "examples/$model.kl: no gelu(dense(norm(x), 4 * c)) to give the tanh form"; exit 1; }
"$kiln" build "$tmp/gpt_tanh.kl" -o "$tmp/gpt" 2> /dev/null
"$tmp/gpt" --steps 1 --threads 1 --eval-every 0 --quiet --save-init "$tmp/init.ckpt" > /dev/null 2>&1
"$kiln" export "$tmp/init.ckpt" -o "$tmp/init.safetensors" > /dev/null
core=$(python3 -c '
import ctypes, ctypes.util
lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2> /dev/null || echo unknown)
gemms=$("$tmp/gpt" --steps 1 --threads 1 --eval-every 0 --set precision="$precision" 2>&1 | grep -o '[a-z0-9]* GEMMs: [^,]*' | paste -sd ';' || true)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores;" \
  "AVX-512: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no), AMX: $(grep -qw amx_tile /proc/cpuinfo && echo yes || echo no)"
echo "Kiln's $gemms; OpenBLAS core $core (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset)"
[ "$have_torch" = 1 ] &&
  "$torch_py" -c 'import torch; print("torch", torch.__version__, "CPU capability", torch.backends.cpu.get_cpu_capability())'
echo "$model, $precision, GELU tanh form; batch $batch x context $context, $warm warm-up + $steps timed steps, $repeats rounds alternated;" \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Runs a command; prints its standard output's last line and the peak RSS
# (MiB) of its process tree's largest process.
measure() {
  python3 -c '
import resource, subprocess, sys
out = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout.decode().strip()
print(out.splitlines()[-1] if out else "", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)' "$@"
}
frameworks="kiln"
[ "$have_torch" = 1 ] && frameworks="kiln eager compile"
for th in $threads; do
  for r in $(seq "$repeats"); do
    for fw in $frameworks; do
      if [ "$fw" = kiln ]; then
        rm -f "$tmp/k.jsonl"
        set -- $(measure "$tmp/gpt" --steps $((warm + steps)) --threads "$th" --batch "$batch" --eval-every 0 --quiet \
          --log-every 1 --set precision="$precision" --init "$tmp/init.safetensors" --metrics "$tmp/k.jsonl")
        rss=${!#}
        tps=$(python3 -c "
import json, statistics
ms = [r['ms_per_step'] for r in map(json.loads, open('$tmp/k.jsonl')) if r['type'] == 'train'][$warm:]
print($batch * $context / (statistics.median(ms) / 1e3))")
      else
        line=$(GELU=tanh PRECISION=$precision WARM=$warm measure "$torch_py" bench/gpt_torch.py speed "$tmp/init.safetensors" \
          examples/data/pystd/train.tok "$context" "$heads" "$batch" "$steps" "$th" "$fw")
        rss=${line##* }
        tps=$(python3 -c "import json, sys; print($batch * $context / (json.loads(sys.argv[1])['median_ms_per_step'] / 1e3))" "${line% *}")
      fi
      echo "$th $fw $tps $rss" >> "$tmp/runs.txt"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    th, fw, tps, rss = line.split()
    runs.setdefault((int(th), fw), []).append((float(tps), float(rss)))
print("%7s %-16s %10s %22s %12s  %s" % ("threads", "framework", "tokens/s", "(each round)", "peak RSS", "kiln / it"))
for th in sorted({t for t, _ in runs}):
    k = statistics.median(t for t, _ in runs[(th, "kiln")])
    for fw in ("kiln", "eager", "compile"):
        if (th, fw) not in runs:
            continue
        r = runs[(th, fw)]
        med = statistics.median(t for t, _ in r)
        name = "kiln" if fw == "kiln" else "pytorch " + fw
        ratio = "" if fw == "kiln" else "%.2fx" % (k / med)
        print("%7d %-16s %10.0f %22s %9.0f MiB  %s" % (th, name, med, " ".join("%.0f" % t for t, _ in r),
                                                    max(m for _, m in r), ratio))
PY
