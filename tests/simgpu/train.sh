#!/usr/bin/env bash
# An example trains on the simulated CUDA device (KILN_SIMULATED_GPU=h200,
# tests/simgpu) and on the CPU backend from the same seed: the per-step
# losses agree within BOUND (relative), the run says it is on a simulated
# device, and the simulator reported nothing. EXAMPLE gpt is the GPT at
# tests/gpt/tiny.sh's size. With SIMGPU_EXPECT set, the simulated run
# prints that text; both runs skip the same steps (fp16 loss scaling).
#   train.sh KILN EXAMPLE STEPS BOUND [ARGS...]   (ARGS: for both runs)
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 example=$2 steps=$3 bound=$4
shift 4
new_tmpdir
if [ "$example" = gpt ]; then # the GPT at tests/gpt/tiny.sh's size, on its token files
  source "$(dirname "$0")/../gpt/tiny.sh"
  tiny_gpt "$kiln" "$tmp" || exit 1
  "$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt" > /dev/null || { bad "kiln build of the tiny GPT"; exit 1; }
else
  build_example "$example" "$tmp/$example"
fi
common=(--steps "$steps" --log-every 1 --seed 1 --eval-every 0 "$@")
"$tmp/$example" --device cpu "${common[@]}" --metrics "$tmp/cpu.json" > "$tmp/cpu.log" 2>&1 ||
  { bad "the CPU run failed"; tail -5 "$tmp/cpu.log"; exit 1; }
KILN_SIMULATED_GPU=h200 "$tmp/$example" --device cuda "${common[@]}" --metrics "$tmp/sim.json" > "$tmp/sim.log" 2>&1 ||
  { bad "the run on the simulated device failed"; tail -20 "$tmp/sim.log"; exit 1; }
grep -q "cuda: NVIDIA H200 (simulated device)" "$tmp/sim.log" && ok "the start-up line names the simulated device" ||
  bad "the start-up line does not say 'simulated device'"
if [ -n "${SIMGPU_EXPECT:-}" ]; then # a line the simulated run must print
  grep -qF -- "$SIMGPU_EXPECT" "$tmp/sim.log" && ok "the run printed: $SIMGPU_EXPECT" ||
    bad "the run did not print: $SIMGPU_EXPECT"
fi
if grep -q "simulated device:" "$tmp/sim.log"; then
  bad "the simulator reported:"
  grep "simulated device:" "$tmp/sim.log" | head -5
fi
# The steps fp16's loss scaling skipped (an overflow: --force-overflow N)
# are the same steps on both; SIMGPU_SKIPPED: how many there are.
skips() { grep '"type": "train"' "$1" | sed 's/.*"skipped": \([0-9]*\).*/\1/'; }
cmp -s <(skips "$tmp/cpu.json") <(skips "$tmp/sim.json") || bad "the skipped steps differ from the CPU run's"
if [ -n "${SIMGPU_SKIPPED:-}" ]; then
  n=$(skips "$tmp/sim.json" | tail -n 1)
  [ "$n" = "$SIMGPU_SKIPPED" ] && ok "$n step(s) skipped, as on the CPU" || bad "$n steps skipped, expected $SIMGPU_SKIPPED"
fi
train_losses "$tmp/cpu.json" > "$tmp/cpu.losses"
train_losses "$tmp/sim.json" > "$tmp/sim.losses"
n=$(wc -l < "$tmp/cpu.losses")
[ "$n" -eq "$steps" ] && [ "$(wc -l < "$tmp/sim.losses")" -eq "$steps" ] || bad "expected $steps losses from each run"
paste "$tmp/cpu.losses" "$tmp/sim.losses" | awk -v b="$bound" '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : ($1 > 1e-12 ? $1 : 1e-12)); if (r > w) { w = r; at = NR }
    if ($2 != $2 + 0 || $2 == "nan" || $2 == "inf") bad = 1 }
  END { printf "%d steps: loss %s on the CPU, %s on the simulated device at the end; max relative difference %.3g (step %d, bound %g)\n",
               NR, $1, $2, w, at, b; exit (bad || w > b) }' && ok "losses agree" || bad "losses differ beyond $bound"
exit $fail
