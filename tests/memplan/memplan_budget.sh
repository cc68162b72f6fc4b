#!/usr/bin/env bash
# Memory budgets in the training executable: the start-up line shows the
# planned arena and its lower bound; a plan over --memory-limit is refused
# before training (exit 1, no crash) with the peak and a suggestion that
# fits, and the suggestion does fit.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn"
data=(--data synthetic:600 --steps 2 --log-every 1)

"$tmp/cnn" "${data[@]}" > "$tmp/ok.txt" 2>&1
grep '^memory plan:' "$tmp/ok.txt"
grep -q '^memory plan: arena [0-9.]* MB (lower bound [0-9.]* MB, [0-9.]*x; unplanned [0-9.]* MB); evaluation batch [0-9]* in the same arena; peak' "$tmp/ok.txt" \
  || { echo "FAIL: no memory plan line at start-up"; cat "$tmp/ok.txt"; exit 1; }
peak=$(sed -n 's/^memory plan: .*peak \([0-9.]*\) MB.*/\1/p' "$tmp/ok.txt")

# Under the peak: refused before training, with a suggestion.
limit=$(awk -v p="$peak" 'BEGIN { printf "%d", p * 1e6 * 0.75 }')
set +e
"$tmp/cnn" "${data[@]}" --memory-limit "$limit" > "$tmp/no.txt" 2>&1
rc=$?
set -e
cat "$tmp/no.txt"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit status 1 over the limit, got $rc"; exit 1; }
grep -q "error: fashion_cnn: the training step needs $peak MB" "$tmp/no.txt" || { echo "FAIL: the message does not name the peak $peak MB"; exit 1; }
grep -q -- '---> try --batch' "$tmp/no.txt" || { echo "FAIL: no smaller micro-batch suggested"; exit 1; }
! grep -q '^epoch' "$tmp/no.txt" || { echo "FAIL: training started over the limit"; exit 1; }

# The suggestion fits and trains.
suggest=$(sed -n 's/.*---> try \(--batch [0-9]* --accumulate [0-9]*\).*/\1/p' "$tmp/no.txt")
# shellcheck disable=SC2086
"$tmp/cnn" "${data[@]}" --memory-limit "$limit" $suggest > "$tmp/fit.txt" 2>&1 \
  || { echo "FAIL: the suggested $suggest does not fit"; cat "$tmp/fit.txt"; exit 1; }
grep '^memory plan:' "$tmp/fit.txt"

# Absurd limits and bad values are errors, not crashes.
for bad in 1 lots; do
  set +e
  "$tmp/cnn" "${data[@]}" --memory-limit "$bad" > "$tmp/bad.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 1 ] || { echo "FAIL: --memory-limit $bad: exit status $rc"; cat "$tmp/bad.txt"; exit 1; }
  grep -q 'error:' "$tmp/bad.txt" || { echo "FAIL: --memory-limit $bad: no error message"; exit 1; }
  if [ "$bad" = 1 ]; then # a tiny limit says what it is, not "0.00 MB"
    grep -q 'over the memory limit of 1 byte$' "$tmp/bad.txt" || { echo "FAIL: --memory-limit 1 not named"; cat "$tmp/bad.txt"; exit 1; }
  fi
done
# Between the peak with recomputation and without: recompute = auto is
# suggested, and with the limit it recomputes until the plan fits.
limit=$(awk -v p="$peak" 'BEGIN { printf "%d", p * 1e6 * 0.9 }')
set +e
"$tmp/cnn" "${data[@]}" --memory-limit "$limit" > "$tmp/no2.txt" 2>&1
rc=$?
set -e
cat "$tmp/no2.txt"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit status 1 at 90% of the peak, got $rc"; exit 1; }
grep -q -- '--set recompute=auto' "$tmp/no2.txt" || { echo "FAIL: recompute = auto not suggested"; exit 1; }
"$tmp/cnn" "${data[@]}" --memory-limit "$limit" --set recompute=auto > "$tmp/auto.txt" 2>&1 \
  || { echo "FAIL: recompute = auto does not fit under $limit"; cat "$tmp/auto.txt"; exit 1; }
grep '^memory plan:' "$tmp/auto.txt"
auto_peak=$(sed -n 's/^memory plan: .*peak \([0-9.]*\) MB.*/\1/p' "$tmp/auto.txt")
awk -v a="$auto_peak" -v l="$limit" 'BEGIN { exit !(a * 1e6 <= l) }' || { echo "FAIL: peak $auto_peak MB over the limit"; exit 1; }
echo "memory limit refused at 75% of the peak ($peak MB), $suggest fits; at 90% recompute = auto fits ($auto_peak MB)"
