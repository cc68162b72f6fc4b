#!/usr/bin/env bash
# End to end: kiln build the MLP, train it briefly on Fashion-MNIST, check
# that the loss falls and the test accuracy passes a floor; then train
# twice more for a few steps and check the losses are identical
# (deterministic for a seed and thread count).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build examples/mlp.kl -o "$tmp/mlp"

"$tmp/mlp" --steps 300 --log-every 50 --threads 2 --metrics "$tmp/a.json" | tee "$tmp/out.txt"
first=$(train_losses "$tmp/a.json" | head -1)
last=$(train_losses "$tmp/a.json" | tail -1)
acc=$(grep '"type": "summary"' "$tmp/a.json" | sed 's/.*"final_accuracy": \([^,]*\),.*/\1/')
echo "first window loss $first, last window loss $last, test accuracy $acc"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.6 * f) }' || { echo "FAIL: the loss did not fall enough"; exit 1; }
awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }' || { echo "FAIL: accuracy $acc is below 0.80"; exit 1; }

for run in b c; do
  "$tmp/mlp" --steps 40 --log-every 10 --threads 2 --metrics "$tmp/$run.json" > /dev/null
  grep -o '"loss": [^,]*' "$tmp/$run.json" > "$tmp/$run.losses"
done
if ! cmp -s "$tmp/b.losses" "$tmp/c.losses"; then
  echo "FAIL: two runs with the same seed gave different losses"
  diff "$tmp/b.losses" "$tmp/c.losses"
  exit 1
fi
echo "deterministic: $(wc -l < "$tmp/b.losses") identical loss values in two runs"

# The timeline: one event per kernel and GEMM of every step, per step, per
# batch fetched; a JSON array.
"$tmp/mlp" --steps 5 --quiet --trace "$tmp/trace.json" > /dev/null
kernels=$(grep -c '"cat": "kernel"' "$tmp/trace.json" || true)
gemms=$(grep -c '"cat": "gemm"' "$tmp/trace.json" || true)
steps=$(grep -c '"cat": "step"' "$tmp/trace.json" || true)
waits=$(grep -c '"cat": "data"' "$tmp/trace.json" || true)
echo "trace: $kernels kernel, $gemms GEMM, $steps step and $waits data events"
[ "$steps" -eq 5 ] && [ "$waits" -eq 5 ] && [ $((kernels % 5)) -eq 0 ] && [ $((gemms % 5)) -eq 0 ] && [ "$gemms" -gt 0 ] &&
  [ "$(head -c 1 "$tmp/trace.json")" = "[" ] && [ "$(tail -c 2 "$tmp/trace.json" | head -c 1)" = "]" ] ||
  { echo "FAIL: the trace is not as expected"; exit 1; }
