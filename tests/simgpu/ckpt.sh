#!/usr/bin/env bash
# Checkpoints across devices: the MLP trains 10 steps on the simulated
# device saving at step 5, and resumes from it on the CPU backend; and
# the reverse. The resumed steps 6-10 have the losses of the run that was
# not interrupted, on the other device, within 1e-4 (relative).
#   ckpt.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
build_example mlp "$tmp/mlp"
common=(--steps 10 --log-every 1 --seed 1 --eval-every 0 --data synthetic:2000)
steps() { grep '"type": "train"' "$1" | sed 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/'; }
run() { # DEVICE NAME ARGS...
  local dev=$1 name=$2
  shift 2
  if [ "$dev" = cuda ]; then
    KILN_SIMULATED_GPU=h200 "$tmp/mlp" --device cuda "${common[@]}" "$@" --metrics "$tmp/$name.json" > "$tmp/$name.log" 2>&1
  else
    "$tmp/mlp" --device cpu "${common[@]}" "$@" --metrics "$tmp/$name.json" > "$tmp/$name.log" 2>&1
  fi || { bad "$name: the run failed"; tail -3 "$tmp/$name.log"; return 1; }
}
for pair in "cuda cpu" "cpu cuda"; do
  read -r from to <<< "$pair"
  run "$from" "$from-saved" --save "$tmp/$from.ckpt" --save-every 5 || continue
  [ -f "$tmp/$from.ckpt.step-5" ] || { bad "$from: no checkpoint at step 5"; continue; }
  run "$to" "$to-resumed" --resume "$tmp/$from.ckpt.step-5" || continue
  paste <(steps "$tmp/$from-saved.json" | tail -n +6) <(steps "$tmp/$to-resumed.json") | awk -v f="$from" -v t="$to" '
    { d = $2 - $4; if (d < 0) d = -d; if (d / $2 > w) w = d / $2; n++; if ($1 != n + 5 || $3 != $1) gap = 1 }
    END { printf "saved on %s, resumed on %s: steps 6-%d, max relative loss difference %.3g\n", f, t, n + 5, w
          exit !(n == 5 && !gap && w < 1e-4) }' && ok "$from -> $to: the resumed losses agree" ||
    bad "$from -> $to: the resumed run differs"
done
exit $fail
