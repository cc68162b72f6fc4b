#!/usr/bin/env bash
# A run resumed at its last step trains nothing and evaluates once: its
# summary's final value is that evaluation and its best the first run's
# (the checkpoint's record, format 6: here epoch 1's, the first of two
# equal accuracies); from a version 5 checkpoint, which has no record,
# the best is that evaluation, of the epoch the last step was in (it
# said "(epoch 0)"). 600 synthetic samples at batch 128: 4 steps an
# epoch, so step 6 is in epoch 2.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
run=(./mlp --data synthetic:600 --threads 1 --steps 6 --log-every 100)
"${run[@]}" --save r.ckpt > first.out 2>&1 || { bad "the first run"; cat first.out; }
"${run[@]}" --resume r.ckpt > again.out 2>&1 || { bad "the resumed run"; cat again.out; }
grep -q '^epoch 2/10  eval' first.out || bad "the first run did not end in epoch 2: $(grep eval first.out)"
acc=$(grep '^epoch 2/10  eval' first.out | sed 's/.*accuracy \([0-9.]*\).*/\1/')
want=$(grep -o 'final accuracy .*' first.out)
grep -q '(0 in this run)' again.out && grep -qF "$want" again.out && ok "resumed at its end: $want" ||
  bad "resumed at its end: expected '$want', got: $(grep '^done' again.out)"
python3 "$testdir/ckpt/ckpt_craft.py" r.ckpt r5.ckpt v5 || bad "crafting a version 5 file"
"${run[@]}" --resume r5.ckpt > again5.out 2>&1 || { bad "the resumed run (version 5)"; cat again5.out; }
want="final accuracy $acc, best $acc (epoch 2)"
grep -q '(0 in this run)' again5.out && grep -qF "$want" again5.out && ok "resumed at its end (version 5): $want" ||
  bad "resumed at its end (version 5): expected '$want', got: $(grep '^done' again5.out)"
exit $fail
