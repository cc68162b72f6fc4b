#!/usr/bin/env bash
# An fp16 run whose last step was skipped for overflow saves: the values
# the next step rewrites before reading (the loss scale, the gradient
# accumulators) are saved as it will write them, so the overflow's inf
# and nan in them no longer read as divergence ("not saved: element 0 of
# 'loss_scale' is inf"). The checkpoint has the scaler's state, and a run
# resumed from it ends with the uninterrupted run's checkpoint, byte for
# byte; a real overflow (a static scale of 1e10, every step skipped)
# saves too. With and without gradient accumulation.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
sed 's/^  seed      = 1/  seed      = 1\n  precision = fp16\n  loss_scale = dynamic(interval = 7)/' \
  "$testdir/../examples/mlp.kl" > fp16.kl
sed 's/^  seed      = 1/  seed      = 1\n  precision = fp16\n  loss_scale = static(1e10)\n  max_skipped_steps = 0/' \
  "$testdir/../examples/mlp.kl" > static.kl
grep -q 'loss_scale = dynamic' fp16.kl && grep -q 'loss_scale = static' static.kl || { echo "FAIL: the example's seed line changed"; exit 1; }
"$kiln" build fp16.kl -o fp16 > /dev/null || exit 1
"$kiln" build static.kl -o static > /dev/null || exit 1
for acc in 1 2; do
  run=(./fp16 --data synthetic:600 --threads 1 --quiet --eval-every 0 --accumulate $acc --force-overflow 5)
  if "${run[@]}" --steps 5 --save a$acc.ckpt > out 2>&1; then
    want="loss scaler: scale 32768, 0 clean steps since its last change, 1 steps skipped (1 in a row)"
    "$kiln" ckpt a$acc.ckpt | grep -qxF "$want" && ok "accumulate $acc: step 5 skipped, saved: $want" ||
      bad "accumulate $acc: $("$kiln" ckpt a$acc.ckpt | grep 'loss scaler')"
  else
    bad "accumulate $acc: the run whose last step was skipped did not save: $(tail -1 out)"
  fi
  "${run[@]}" --steps 8 --resume a$acc.ckpt --save r$acc.ckpt > /dev/null 2>&1 || bad "accumulate $acc: resume"
  "${run[@]}" --steps 8 --save w$acc.ckpt > /dev/null 2>&1 || bad "accumulate $acc: whole run"
  cmp -s r$acc.ckpt w$acc.ckpt && ok "accumulate $acc: resumed at the skipped step, step 8's checkpoint is the whole run's" ||
    bad "accumulate $acc: the resumed run's checkpoint differs from the whole run's"
  ./static --data synthetic:600 --threads 1 --quiet --eval-every 0 --accumulate $acc --steps 2 --save s$acc.ckpt > out 2>&1 &&
    "$kiln" ckpt s$acc.ckpt | grep -qF "2 steps skipped (2 in a row)" && ok "accumulate $acc: every step overflowing, saved" ||
    bad "accumulate $acc: static(1e10): $(tail -1 out)"
done
exit $fail
