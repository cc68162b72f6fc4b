#!/usr/bin/env bash
# Every metric a model reports is evaluated, printed and recorded (up to
# 8; a 9th is refused at compile time), and a report that repeats the
# loss's op does not change the loss: tests/train/tiny.kl with
# `report err = 1 - accuracy(...)` and `report ce2 = cross_entropy(...)`
# (the second cross_entropy shared the loss's fused kernel, which stored
# one of the two: the loss read 0 and the evaluation loss -0.0009).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
src=$testdir/train/tiny.kl
sed 's/^  report accuracy(logits, label)$/&\n  report err = 1 - accuracy(logits, label)\n  report ce2 = cross_entropy(logits, label)/' \
  "$src" > "$tmp/rep.kl"
grep -q 'report ce2' "$tmp/rep.kl" || { echo "FAIL: the model edit did not apply"; exit 1; }
for m in tiny rep; do
  f=$src; [ $m = rep ] && f=$tmp/rep.kl
  "$kiln" build "$f" -o "$tmp/$m" > /dev/null 2>&1 || { echo "FAIL: kiln build $f"; exit 1; }
  "$tmp/$m" --epochs 2 --threads 1 --log-every 1 --metrics "$tmp/$m.json" > "$tmp/$m.txt" 2>&1 || { cat "$tmp/$m.txt"; echo "FAIL: $m did not train"; exit 1; }
done
cat "$tmp/rep.txt"
losses() { grep '"type": "train"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }
[ "$(losses "$tmp/rep.json")" = "$(losses "$tmp/tiny.json")" ] && ok "the same 8 training losses with the reports" ||
  bad "training losses with the reports '$(losses "$tmp/rep.json")', without '$(losses "$tmp/tiny.json")'"
python3 - "$tmp/rep.json" <<'PY' && ok "every eval record has accuracy, err = 1 - accuracy and ce2 = the loss" || bad "eval records"
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "eval"]
assert len(recs) == 2, recs
for r in recs:
    assert abs(r["err"] - (1 - r["accuracy"])) < 1e-5 and abs(r["ce2"] - r["loss"]) < 1e-5 * r["loss"], r
PY
line=$(grep '^epoch 2/2  eval' "$tmp/rep.txt")
grep -qE 'accuracy [0-9.]+  err [0-9.]+  ce2 [0-9.]+  \(' <<< "$line" && ok "the eval line shows all three: $line" ||
  bad "eval line: $line"
# A 9th report is refused, naming it.
{ sed '/^  report accuracy/q' "$src" | sed '$d'; for i in 1 2 3 4 5 6 7 8 9; do echo "  report m$i = accuracy(logits, label)"; done
  sed -n '/^  report accuracy/,$p' "$src" | tail -n +2; } > "$tmp/nine.kl"
expect_error "9 reports" "a model reports at most 8 metrics ('m9' would be the 9th)" "$kiln" build "$tmp/nine.kl" -o "$tmp/nine"
exit $fail
