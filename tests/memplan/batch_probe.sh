#!/usr/bin/env bash
# --batch auto --probe (driver/batch_probe.c), the CNN on the CPU, one
# thread, 64 MiB: the memory plan chooses micro-batch 104 (effective 128);
# the probe times it and the two largest smaller multiples of 8 dividing
# 128 (64, 32) and keeps the fastest per sample.
#  - with fake timings (KILN_PROBE_FAKE), the choice follows them: each
#    candidate fastest in turn, a tie keeps the larger batch, the run uses
#    the choice with the accumulation that keeps the effective batch, and
#    the line says the timings were fake;
#  - a real probe times all three and chooses the smallest ms/sample it
#    prints;
#  - without --probe nothing is timed (no probe line, and a malformed
#    KILN_PROBE_FAKE is never read); --probe without --batch auto and a
#    fake naming no time for a candidate are refused.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn" > "$tmp/out" 2>&1 || fail "kiln build"
run() { "$tmp/cnn" --device cpu --threads 1 --data synthetic:512 --steps 1 --eval-every 0 --batch auto --memory-limit 64MiB "$@" > "$tmp/out" 2>&1; }

# fake TIMES WANT_BATCH WANT_ACC: 104 x 1 cannot keep 128, and says so.
fake() {
  KILN_PROBE_FAKE=$1 run --probe || fail "KILN_PROBE_FAKE=$1: exit $?"
  line=$(grep '^batch probe:' "$tmp/out") || fail "no probe line"
  suffix=
  [ $(($2 * $3)) = 128 ] || suffix=" (effective batch $(($2 * $3)); asked: 128, not a multiple of $2)"
  grep -qF "(fake timings from KILN_PROBE_FAKE); chose micro-batch $2 x accumulate $3, the fastest per sample$suffix" <<< "$line" ||
    fail "KILN_PROBE_FAKE=$1: want micro-batch $2 x accumulate $3: $line"
  grep -q "^batch probe: micro-batch 104 [0-9.]* ms/sample, micro-batch 64 [0-9.]* ms/sample, micro-batch 32 [0-9.]* ms/sample (" <<< "$line" ||
    fail "the candidates are not 104, 64, 32: $line"
  grep -q "^effective batch $(($2 * $3)) (batch $2 x accumulate $3)" "$tmp/out" || fail "the run did not use $2 x $3"
  echo "KILN_PROBE_FAKE=$1: chose $2 x $3"
}
fake "104:1.5,64:2,32:3" 104 1
fake "104:2,64:1.5,32:3" 64 2
fake "104:3,64:2,32:0.5" 32 4
fake "104:1,64:1,32:1" 104 1

# A real probe: three timed candidates; the choice is the smallest time it prints.
run --probe || fail "a real probe: exit $?"
line=$(grep '^batch probe:' "$tmp/out") || fail "no probe line"
echo "$line"
grep -q '(3 steps each after a warm-up)' <<< "$line" || fail "the line does not say what it timed"
want=$(grep -o 'micro-batch [0-9]* [0-9.]* ms/sample' <<< "$line" | sort -t' ' -k3,3g -s | head -1 | cut -d' ' -f2)
got=$(sed 's/.*chose micro-batch \([0-9]*\) x.*/\1/' <<< "$line")
[ "$(grep -o 'micro-batch [0-9]* [0-9.]* ms/sample' <<< "$line" | wc -l)" = 3 ] || fail "not three candidates timed"
[ "$got" = "$want" ] || fail "chose $got, the fastest printed is $want"
grep -q "^effective batch [0-9]* (batch $got x accumulate" "$tmp/out" || fail "the run did not use $got"

# Nothing timed without --probe, even with a malformed fake set.
KILN_PROBE_FAKE=garbage run || fail "without --probe: exit $?"
grep -q '^batch probe' "$tmp/out" && fail "a probe line without --probe"
grep -q '^batch auto: micro-batch 104 x accumulate 1' "$tmp/out" || fail "the plan's choice is not 104"
echo "without --probe: nothing timed, the plan's choice (104) kept"

"$tmp/cnn" --device cpu --probe > "$tmp/out" 2>&1 && fail "--probe without --batch auto ran"
grep -q -- '--probe times candidate batch sizes of --batch auto' "$tmp/out" || fail "--probe alone: wrong error"
KILN_PROBE_FAKE="104:1,64:2" run --probe && fail "a fake missing a candidate ran"
grep -q 'KILN_PROBE_FAKE names no time for micro-batch 32' "$tmp/out" || fail "a fake missing a candidate: wrong error"
echo "refused: --probe without --batch auto; a fake without a candidate's time"
