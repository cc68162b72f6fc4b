#!/usr/bin/env bash
# An eval_every step that is also an epoch's end is evaluated once: one
# line and one metrics record for it (issue 32 item 9). 256 samples in
# batches of 64: 4 steps an epoch; --eval-every 2 over 2 epochs evaluates
# at steps 2, 4 (epoch 1's end), 6 and 8 (epoch 2's end): 4 evaluations.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build "$testdir/train/tiny.kl" -o "$tmp/tiny" > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }
"$tmp/tiny" --epochs 2 --eval-every 2 --metrics "$tmp/m.json" > "$tmp/out.txt" 2>&1
cat "$tmp/out.txt"
lines=$(grep -c ' eval ' "$tmp/out.txt" || true)
records=$(grep -c '"type": "eval"' "$tmp/m.json" || true)
steps=$(grep '"type": "eval"' "$tmp/m.json" | sed 's/.*"step": \([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$lines" -eq 4 ] && ok "4 evaluation lines" || bad "$lines evaluation lines, expected 4"
[ "$records" -eq 4 ] && ok "4 eval records" || bad "$records eval records, expected 4"
[ "$steps" = "2 4 6 8 " ] && ok "evaluated at steps $steps" || bad "evaluated at steps $steps, expected 2 4 6 8"
# Each epoch's end still has its epoch line.
[ "$(grep -c '^epoch [12]/2  eval' "$tmp/out.txt")" -eq 2 ] && ok "both epoch lines" || bad "epoch lines missing"
exit $fail
