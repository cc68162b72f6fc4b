#!/usr/bin/env bash
# Mixed precision end to end:
#  - with precision fp32 the precision pass changes nothing: the dumps
#    after it and before it are the same but for the list of passes;
#  - a forced fp16 overflow at step 5 makes exactly that step skip and
#    halves the loss scale, and later steps do not skip;
#  - bf16 and fp16 training lowers the loss.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
for m in mlp fashion_cnn; do
  "$kiln" ir "examples/$m.kl" --after optimizer | grep -v '^  passes' > "$tmp/a"
  "$kiln" ir "examples/$m.kl" --after precision | grep -v '^  passes\|^# memory' > "$tmp/b"
  cmp "$tmp/a" "$tmp/b" || { echo "FAIL: the fp32 precision pass changed $m"; diff "$tmp/a" "$tmp/b" | head; exit 1; }
done
echo "fp32: the precision pass leaves the graphs unchanged"

"$kiln" build examples/mlp.kl -o "$tmp/mlp"
"$tmp/mlp" --precision fp16 --steps 8 --log-every 1 --force-overflow 5 --metrics "$tmp/fo.json" > /dev/null
grep '"type": "train"' "$tmp/fo.json" | sed 's/.*"step": \([0-9]*\),.*"loss_scale": \([^,]*\), "skipped": \([0-9]*\),.*/\1 \2 \3/' > "$tmp/scales"
cat "$tmp/scales"
expected=$'1 65536 0\n2 65536 0\n3 65536 0\n4 65536 0\n5 32768 1\n6 32768 1\n7 32768 1\n8 32768 1'
[ "$(cat "$tmp/scales")" = "$expected" ] || { echo "FAIL: expected one skipped step (5) and the scale halved"; exit 1; }
echo "fp16: the forced overflow skipped exactly step 5 and halved the scale"

for p in bf16 fp16; do
  "$tmp/mlp" --precision "$p" --steps 60 --log-every 20 --metrics "$tmp/$p.json" > /dev/null
  first=$(train_losses "$tmp/$p.json" | head -1)
  last=$(train_losses "$tmp/$p.json" | tail -1)
  echo "$p: loss $first -> $last"
  awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.7 * f) }' || { echo "FAIL: $p training did not lower the loss"; exit 1; }
done
