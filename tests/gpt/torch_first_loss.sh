#!/usr/bin/env bash
# examples/gpt.kl in PyTorch (bench/gpt_torch.py) with Kiln's weights
# gives Kiln's loss: the tiny GPT (tests/gpt/tiny.sh: width 32, 2 heads,
# context 16) trained 30 steps (batch 1, lr 1e-2: loss about 0.64) on one 17-byte window (so its weights are
# far from their initial values and the loss far from ln 256), exported
# as safetensors; then Kiln's first loss from those weights (--init, one
# step) against PyTorch's float32 loss of the same window: relative
# difference at most 1e-4; with the exact GELU and with its tanh form.
# And examples/gpt2_small.kl at its tiny size (tests/gpt/gpt2_tiny.sh:
# 12 layers in three calls of four blocks, vocabulary 512, width 96,
# 12 heads, context 32), so bench/gpt_tanh.sh's MODEL=gpt2_small runs
# the same model in PyTorch (blocks in the order Kiln runs them).
#
#   torch_first_loss.sh KILN BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../gpt/tiny.sh"
source "$(dirname "$0")/../gpt/gpt2_tiny.sh"
source "$(dirname "$0")/torch_env.bash"
kiln=$1
# torch from PyPI brings about 2 GB of CUDA libraries: the test suite
# does not install it. Where it is installed (KILN_TORCH_PYTHON, python3,
# or BUILD_DIR/torchvenv, which bench/gpt_torch.sh creates), this runs.
torch_python "$2" noinstall || exit $?
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tiny_gpt "$kiln" "$tmp" || exit 1
# One window: 17 bytes (33 for GPT-2's context 32), so every sample is
# the same (inputs and targets).
window() { # FILE TOKENS
python3 - "$1" "$2" <<'PY' || exit 1
import struct, sys
toks = (b"def f(x):\n  ret x" if sys.argv[2] == "17" else b"def f(x):\n  return x + 1  # the one\n")[: int(sys.argv[2])]
assert len(toks) == int(sys.argv[2])
h = 0xcbf29ce484222325
for b in toks:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
open(sys.argv[1], "wb").write(b"KILNTOK\0" + struct.pack("<IIQQQQ", 1, 1, len(toks), 256, h, 0) + toks)
PY
}
window "$tmp/w.tok" 17
window "$tmp/w33.tok" 33
# Once with the example's exact GELU, once with its tanh form (the
# model's gelu given approximate = "tanh"; bench/gpt_torch.py with
# GELU=tanh), as bench/gpt_tanh.sh compares them.
sed 's/gelu(dense(norm(x), 4 \* c))/gelu(dense(norm(x), 4 * c), approximate = "tanh")/' "$tmp/m/gpt.kl" > "$tmp/m/gpt_tanh.kl"
grep -q 'approximate = "tanh"' "$tmp/m/gpt_tanh.kl" || { echo "FAIL: no gelu(dense(norm(x), 4 * c)) in the tiny GPT"; exit 1; }
first_loss() { # MODEL GELU [TOKENS CONTEXT HEADS]
  local tok=${3:-$tmp/w.tok} ctx=${4:-16} heads=${5:-2}
  "$kiln" build "$1" -o "$tmp/gpt" || exit 1
  data="data=tokens(\"$tok\", context = $ctx)"
  "$tmp/gpt" --steps 30 --epochs 30 --batch 1 --quiet --eval-every 0 --set "$data" --set 'schedule=warmup_cosine(warmup = 5)' --set 'optimizer=adamw(lr = 1e-2)' \
    --export "$tmp/trained.safetensors" > /dev/null || exit 1
  "$tmp/gpt" --init "$tmp/trained.safetensors" --steps 1 --batch 1 --eval-every 0 --log-every 1 --set "$data" \
    --metrics "$tmp/m.jsonl" > /dev/null || exit 1
  GELU=$2 "$torch_py" bench/gpt_torch.py loss "$tmp/trained.safetensors" "$tok" "$ctx" "$heads" > "$tmp/torch.json" || exit 1
  python3 - "$tmp/m.jsonl" "$tmp/torch.json" "$2" "$(basename "$1" .kl)" <<'PY'
import json, sys
kiln = next(r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train" and r["step"] == 1)
torch = json.load(open(sys.argv[2]))["loss"]
rel = abs(kiln - torch) / abs(torch)
print(f"{sys.argv[4]}, {sys.argv[3]} GELU: first loss from the trained weights: kiln {kiln:.7f}, pytorch {torch:.7f}, relative difference {rel:.2e} (bound 1e-4)")
if kiln > 4.0:
    sys.exit("FAIL: the loss is near ln 256 = 5.545: the weights did not train, so the comparison shows nothing")
sys.exit(0 if rel <= 1e-4 else "FAIL: PyTorch's loss differs from Kiln's")
PY
}
first_loss "$tmp/m/gpt.kl" none || exit 1
first_loss "$tmp/m/gpt_tanh.kl" tanh || exit 1
tiny_gpt2 "$kiln" "$tmp/g2" || exit 1
first_loss "$tmp/g2/m/tiny.kl" tanh "$tmp/w33.tok" 32 12 || exit 1
