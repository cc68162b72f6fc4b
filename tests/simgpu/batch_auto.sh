#!/usr/bin/env bash
# --batch auto on the simulated device (KILN_SIMULATED_GPU_MEMORY): the
# micro-batch is the largest whose plan fits the GPU's free memory
# (cuMemGetInfo), it shrinks with the memory, and the run at that size
# trains without running out (the copy slots' staging buffers, outside the
# plan, give way to it) to the CPU backend's losses at the same batch.
#   batch_auto.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
build_example mlp "$tmp/mlp"
common=(--set batch=2048 --steps 2 --log-every 1 --seed 1 --eval-every 0 --data synthetic:4000)
declare -A micro
for mem in 44M 40M; do
  KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_MEMORY=$mem "$tmp/mlp" --device cuda --batch auto "${common[@]}" \
    --metrics "$tmp/sim$mem.json" > "$tmp/sim$mem.log" 2>&1 ||
    { bad "$mem: the run failed"; tail -3 "$tmp/sim$mem.log"; continue; }
  line=$(grep '^batch auto:' "$tmp/sim$mem.log")
  micro[$mem]=$(sed -n 's/^batch auto: micro-batch \([0-9]*\) x accumulate \([0-9]*\).*/\1 \2/p' <<< "$line")
  echo "$mem: $line"
  case $line in
    *"(the GPU's free memory), micro-batch "*" would need "*) ok "$mem: chosen from the GPU's free memory" ;;
    *) bad "$mem: not limited by the GPU's free memory" ;;
  esac
done
read -r b44 a44 <<< "${micro[44M]:-0 0}"
read -r b40 a40 <<< "${micro[40M]:-0 0}"
[ "$b40" -gt 0 ] && [ "$b40" -lt "$b44" ] && [ "$b44" -lt 2048 ] && ok "micro-batch $b44 at 44M, $b40 at 40M" ||
  bad "expected a smaller micro-batch with less memory (44M: $b44, 40M: $b40)"
if [ "$b44" -gt 0 ]; then
  "$tmp/mlp" --device cpu "${common[@]}" --batch "$b44" --accumulate "$a44" --metrics "$tmp/cpu.json" > "$tmp/cpu.log" 2>&1 ||
    bad "the CPU run failed"
  paste <(train_losses "$tmp/cpu.json") <(train_losses "$tmp/sim44M.json") | awk '
    { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > w) w = d / $1; n++ }
    END { printf "%d steps, max relative loss difference %.3g\n", n, w; exit !(n == 2 && w < 1e-4) }' &&
    ok "losses agree with the CPU at micro-batch $b44 x $a44" || bad "losses differ from the CPU's"
fi
exit $fail
