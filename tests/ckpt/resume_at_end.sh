#!/usr/bin/env bash
# A run resumed at its last step trains nothing and evaluates once: its
# summary's best is that evaluation, of the epoch the last step was in
# (it said "(epoch 0)"). 600 synthetic samples at batch 128: 4 steps an
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
want="final accuracy $acc, best $acc (epoch 2)"
grep -q '(0 in this run)' again.out && grep -qF "$want" again.out && ok "resumed at its end: $want" ||
  bad "resumed at its end: expected '$want', got: $(grep '^done' again.out)"
exit $fail
