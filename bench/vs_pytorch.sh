#!/usr/bin/env bash
# Kiln against PyTorch on the CPU, in one run: the same model, batch,
# initial weights (Kiln writes them, PyTorch reads them), optimizer (AdamW),
# schedule and thread count. Prints samples/s for both and their ratio.
#
#   bench/vs_pytorch.sh [mlp|fashion_cnn] [STEPS] [THREADS]
#
# Throughput is measured over the training steps after ten warm-up steps,
# without evaluation. Needs a built Kiln (cmake --build build); installs
# PyTorch with pip when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-mlp}
steps=${2:-300}
threads=${3:-$(nproc)}
data=/usr/share/datasets/fashion-mnist
kiln=./build/kiln
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
if ! python3 -c "import torch, numpy" 2>/dev/null; then
  echo "installing PyTorch with pip (CPU use only)"
  python3 -m pip install -q torch numpy
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$kiln" build "examples/$model.kl" -o "$tmp/model"
"$tmp/model" --steps "$steps" --threads "$threads" --log-every 100 --data "$data" \
  --save-init "$tmp/init.ckpt" --metrics "$tmp/kiln.json" > "$tmp/kiln.log"
kiln_sps=$(grep '"type": "summary"' "$tmp/kiln.json" | sed 's/.*"timed_samples_per_s": \([^,}]*\)[,}].*/\1/')

python3 bench/torch_compare.py "$model" "$tmp/init.ckpt" "$data" "$steps" "$threads" --json "$tmp/torch.json" > /dev/null
torch_sps=$(python3 -c "import json; print(round(json.load(open('$tmp/torch.json'))['samples_per_s'], 1))")
torch_ver=$(python3 -c "import torch; print(torch.__version__)")

printf '%s, %s steps of batch 128, %s threads, AdamW, same initial weights\n' "$model" "$steps" "$threads"
printf '  kiln     %10.1f samples/s\n' "$kiln_sps"
printf '  pytorch  %10.1f samples/s  (torch %s, eager)\n' "$torch_sps" "$torch_ver"
python3 -c "print('  ratio    %10.2fx (kiln / pytorch)' % ($kiln_sps / $torch_sps))"
