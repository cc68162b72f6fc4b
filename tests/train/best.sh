#!/usr/bin/env bash
# Metrics with a direction, early stopping and --save-best, on best.kl
# (256 synthetic samples in batches of 64: 4 steps an epoch):
#  - sq_err is better lower by its name: the summary's "best" is the
#    smallest epoch value (the first of equals), not the largest;
#    kiln ir prints its direction;
#  - early_stop over a crafted sequence of accuracies (the test hook
#    KILN_TEST_EVAL_METRICS) stops at the documented evaluation: patience
#    2, min_delta 0.02 over 0.50 0.60 0.61 0.70 0.71 0.72 0.90 0.95 stops
#    after epoch 6 (0.61 and 0.71, 0.72 improve on 0.60 and 0.70 by no
#    more than 0.02), step 24, best epoch 4;
#  - --save-best keeps the best epoch's checkpoint: evaluating it prints
#    that epoch's evaluation line, number for number;
#  - misuse: an unknown metric, no evaluation.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" build "$testdir/train/best.kl" -o best > /dev/null 2>&1 || { echo "FAIL: kiln build best.kl"; exit 1; }
run() { ./best --threads 1 "$@"; }

# ---- better = lower by default for sq_err ----
run --epochs 6 --save-best b.ckpt > out.txt 2>&1 || { cat out.txt; bad "the 6-epoch run failed"; }
# The epoch lines' sq_err, and the smallest's epoch (the first of equals).
vals=$(grep '^epoch [0-9]*/6  eval' out.txt | sed 's/.*sq_err \([0-9.]*\).*/\1/')
want=$(awk '{ if (NR == 1 || $1 < m) { m = $1; e = NR } } END { printf "best %s (epoch %d)", m, e }' <<< "$vals")
wepoch=$(awk '{ if (NR == 1 || $1 < m) { m = $1; e = NR } } END { print e }' <<< "$vals")
grep -qF "$want" out.txt && ok "sq_err is better lower: $want over $(tr '\n' ' ' <<< "$vals")" ||
  bad "expected '$want' in: $(grep '^done' out.txt)"
"$kiln" ir "$testdir/train/best.kl" | grep -q '^  report sq_err = %[a-z0-9]* better = lower$' &&
  ok "kiln ir prints 'better = lower' for sq_err" || bad "kiln ir does not print sq_err's direction"
"$kiln" ir "$testdir/train/best.kl" | grep -q '^  report acc = %[a-z0-9]*$' &&
  ok "kiln ir prints acc without a direction (higher)" || bad "kiln ir prints acc's report otherwise"
# The text form reads back: a report's direction and an early_stop group.
sed 's/^  seed = 5$/  seed = 5\n  early_stop = (metric = acc, patience = 2, min_delta = 0.01)/' "$testdir/train/best.kl" > es.kl
"$kiln" ir es.kl > a.kir && "$kiln" ir a.kir > b.kir && cmp -s a.kir b.kir &&
  grep -qF "early_stop = (metric = acc, patience = 2, min_delta = 0.01)" a.kir &&
  ok "kiln ir's text with 'better = lower' and an early_stop group reads back unchanged" ||
  bad "the IR text with better = lower and early_stop does not read back"

# ---- --save-best: the saved file evaluates to the best epoch's line ----
line=$(grep "^epoch $wepoch/6  eval" out.txt | sed 's/^epoch [0-9]*\/6  //; s/  (.*//')
grep -q "^best: sq_err" out.txt && grep -qF "at epoch $wepoch (step $((wepoch * 4))), saved in b.ckpt" out.txt &&
  ok "the summary names the best epoch: $(grep "^best: sq_err" out.txt)" || bad "no best line for epoch $wepoch: $(grep '^best' out.txt)"
step=$("$kiln" ckpt b.ckpt | grep '^step:' | cut -d' ' -f2)
[ "$step" = $((wepoch * 4)) ] && ok "b.ckpt holds step $step" || bad "b.ckpt holds step '$step', expected $((wepoch * 4))"
got=$(run --eval-only --resume b.ckpt 2>&1 | grep '^eval' | sed 's/  (.*//')
[ -n "$line" ] && [ "$got" = "$line" ] && ok "--eval-only of b.ckpt: '$got', as epoch $wepoch's line" ||
  bad "--eval-only of b.ckpt printed '$got', epoch $wepoch's line is '$line'"

# ---- early stopping on a crafted sequence ----
seq="0.50,0.60,0.61,0.70,0.71,0.72,0.90,0.95"
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 --quiet --set 'early_stop=(metric = acc, patience = 2, min_delta = 0.02)' \
  > es.txt 2>&1 || { cat es.txt; bad "the early-stopped run failed"; }
grep -q '^done: 24 steps' es.txt && ok "early_stop (patience 2, min_delta 0.02) stopped after 24 steps (epoch 6)" ||
  bad "expected 24 steps: $(grep '^done' es.txt)"
grep -qF "best: acc 0.7000 at epoch 4 (step 16); stopped early at epoch 6" es.txt &&
  ok "$(grep '^best:' es.txt)" || bad "best line: $(grep '^best' es.txt)"
# min_delta 0: every value improves; patience 1 then stops at the first
# that does not: none of the eight, so all 8 epochs run.
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 --quiet --set 'early_stop=(metric = acc, patience = 1)' > es0.txt 2>&1
grep -q '^done: 32 steps' es0.txt && ok "min_delta 0: an increasing sequence runs all 8 epochs" ||
  bad "min_delta 0: $(grep '^done' es0.txt)"
# The loss, better lower, with the same sequence: 0.60 is no improvement
# on 0.50: patience 1 stops after epoch 2.
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 --quiet --set 'early_stop=(metric = loss, patience = 1)' > esl.txt 2>&1
grep -q '^done: 8 steps' esl.txt && grep -qF "best: loss 0.5000 at epoch 1" esl.txt &&
  ok "metric = loss is better lower: stopped after epoch 2" || bad "metric = loss: $(grep '^done\|^best' esl.txt)"

# ---- a resumed run keeps the record (checkpoint format 6) ----
# Saved after epoch 3 (0.50 0.60 0.61: one evaluation without
# improvement) and resumed: the hook's 4th value comes next, the count
# goes on, and the run stops after epoch 6 with epoch 4's best, as the
# uninterrupted one; the shown metric's best (sq_err) is the 6-epoch
# run's too.
es=(--quiet --set 'early_stop=(metric = acc, patience = 2, min_delta = 0.02)')
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 "${es[@]}" --steps 12 --schedule-steps 32 --save r.ckpt > r1.txt 2>&1 || { cat r1.txt; bad "the first 3 epochs failed"; }
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 "${es[@]}" --resume r.ckpt > r2.txt 2>&1 || { cat r2.txt; bad "the resumed run failed"; }
grep -qF "best: acc 0.7000 at epoch 4 (step 16); stopped early at epoch 6" r2.txt &&
  ok "resumed after epoch 3: $(grep '^best:' r2.txt)" || bad "resumed: $(grep '^best\|^done' r2.txt)"
"$kiln" ckpt r.ckpt | grep -qF "evaluations: 3 at epochs' ends" && ok "kiln ckpt prints the record: $("$kiln" ckpt r.ckpt | grep '^evaluations')" ||
  bad "kiln ckpt: $("$kiln" ckpt r.ckpt | grep -i 'evaluations\|format')"
# A run that stopped early, resumed with the same command: nothing more
# trains, and it reports the same best lines.
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 "${es[@]}" --save e1.ckpt > e1.txt 2>&1
KILN_TEST_EVAL_METRICS=$seq run --epochs 8 "${es[@]}" --resume e1.ckpt > e2.txt 2>&1
grep -q '^done: 24 steps (0 in this run)' e2.txt && [ "$(grep '^best' e1.txt)" = "$(grep '^best' e2.txt)" ] &&
  [ "$(grep -o 'best [0-9.]* (epoch [0-9]*)' e1.txt)" = "$(grep -o 'best [0-9.]* (epoch [0-9]*)' e2.txt)" ] &&
  ok "an early-stopped run resumed trains no more: $(grep -o 'best [0-9.]* (epoch [0-9]*)' e2.txt)" ||
  bad "the early-stopped run resumed: $(grep '^done\|^best' e2.txt)"
run --epochs 6 --quiet --steps 12 --schedule-steps 24 --save s.ckpt > /dev/null 2>&1 && run --epochs 6 --quiet --resume s.ckpt > s2.txt 2>&1
whole=$(grep -o 'best [0-9.]* (epoch [0-9]*)' out.txt); part=$(grep -o 'best [0-9.]* (epoch [0-9]*)' s2.txt)
[ -n "$whole" ] && [ "$whole" = "$part" ] && ok "the shown metric's $part after a resume, as uninterrupted" ||
  bad "shown best after a resume '$part', uninterrupted '$whole'"

# ---- misuse ----
expect_error "an unknown metric" "early_stop: the model reports no metric 'accuracy' (its metrics: sq_err, acc, loss" \
  run --epochs 1 --set 'early_stop=(metric = accuracy)'
expect_error "--save-best without evaluation" "--save-best needs evaluations at the epochs' ends: eval_every is 0" \
  run --epochs 1 --eval-every 0 --save-best x.ckpt
expect_error "--save-best over --save" "--save-best and --save name the same file 'x.ckpt'" \
  run --epochs 1 --save x.ckpt --save-best x.ckpt
exit $fail
