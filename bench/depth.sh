#!/usr/bin/env bash
# Compile time against depth: generates chain models of each depth and
# times `kiln ir MODEL --after all` (every pass through memory planning)
# on each. Prints one line per depth: depth, IR nodes after all passes,
# seconds (wall clock).
#
#   bench/depth.sh [KIND] [DEPTH...]     KIND: elementwise (default), dense
#                                        or mixed
#   KILN=path/to/kiln bench/depth.sh ... (default ./build/kiln)
#   bench/depth.sh --model KIND DEPTH    print the model file alone
#                                        (tests/fusion/fusion_depth.sh and
#                                        tests/language/ir_long_chain.sh use it)
#
# elementwise: h = x @ w, then DEPTH lines alternating h = h + 0.0001 and
# h = relu(h) * 0.999 + 0.001 (about 2.5 ops a line), then a loss.
# dense: DEPTH lines h = relu(h @ w) (2 ops a line).
# mixed: DEPTH lines cycling through matmuls with activations, a row sum,
# reshapes, exp, sigmoid (about 3.4 ops a line).
set -euo pipefail

# chain KIND DEPTH: the model file on stdout.
chain() {
  echo "model chain {"
  echo "  input x : f32[batch, 16]"
  echo "  input label : i32[batch]"
  echo "  param w : [16, 16] init = kaiming"
  if [ "$1" = dense ]; then
    echo "  h = x"
    for ((i = 0; i < $2; i++)); do echo "  h = relu(h @ w)"; done
  elif [ "$1" = mixed ]; then
    local lines=("h = relu(h @ w)" "h = tanh(h @ w) + 0.0001"
      "h = h - reshape(sum(h, axis = 1), [batch, 1]) * 0.01"
      "h = exp(reshape(reshape(h, [batch, 4, 4]) * 0.5, [batch, 16]) * 0.001) @ w"
      "h = h * sigmoid(h)")
    echo "  h = x"
    for ((i = 0; i < $2; i++)); do echo "  ${lines[i % 5]}"; done
  else
    echo "  h = x @ w"
    for ((i = 0; i < $2; i++)); do
      if ((i % 2 == 0)); then echo "  h = h + 0.0001"; else echo "  h = relu(h) * 0.999 + 0.001"; fi
    done
  fi
  echo "  loss = cross_entropy(h, label)"
  echo "}"
  echo "train {"
  echo "  data  = synthetic(samples = 64)"
  echo "  batch = 8"
  echo "}"
}

if [ "${1:-}" = --model ]; then
  chain "$2" "$3"
  exit 0
fi
cd "$(dirname "$0")/.."
kind=${1:-elementwise}
shift || true
depths=("$@")
[ ${#depths[@]} -gt 0 ] || depths=(500 1000 2000 4000 10000)
kiln=${KILN:-./build/kiln}
[ -x "$kiln" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '%8s %8s %10s\n' depth nodes seconds
for d in "${depths[@]}"; do
  chain "$kind" "$d" > "$tmp/chain.kl"
  start=$(date +%s%N)
  "$kiln" ir "$tmp/chain.kl" --after all > "$tmp/out.kir"
  end=$(date +%s%N)
  nodes=$(grep -c ' = ' "$tmp/out.kir" || true)
  ms=$(( (end - start) / 1000000 ))
  printf '%8d %8d %6d.%02d\n' "$d" "$nodes" $((ms / 1000)) $((ms % 1000 / 10))
done
