#!/usr/bin/env bash
# Models without a label input train: the executable binds the samples
# only. The autoencoder tests/language/no_label.kl must train exactly as the
# same model given a label input it never reads (the loss of every step
# equal, one thread), and its loss must fall.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
work=$tmp
model=tests/language/no_label.kl
sed 's/^  input image : u8\[batch, 1, 28, 28\]$/&\n  input label : i32[batch]/' "$model" > "$work/with_label.kl"
grep -q 'input label' "$work/with_label.kl" || { echo "FAIL: could not add a label input"; exit 1; }
for m in "$model" "$work/with_label.kl"; do
  name=$(basename "$m" .kl)
  "$kiln" run "$m" --threads 1 --eval-every 0 --log-every 1 --quiet --metrics "$work/$name.json" > "$work/$name.out" 2>&1 ||
    { echo "FAIL: $m did not train"; cat "$work/$name.out"; exit 1; }
done
train_losses "$work/no_label.json" > "$work/a"
train_losses "$work/with_label.json" > "$work/b"
[ "$(wc -l < "$work/a")" -eq 8 ] || { echo "FAIL: expected 8 steps"; cat "$work/a"; exit 1; }
diff "$work/a" "$work/b" || { echo "FAIL: losses differ without the label input (< without, > with)"; exit 1; }
first=$(head -1 "$work/a") last=$(tail -1 "$work/a")
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.7 * f) }' ||
  { echo "FAIL: the loss did not fall: $first -> $last"; exit 1; }
echo "ok: 8 steps without a label input, the same losses as with an unused one ($first -> $last)"
