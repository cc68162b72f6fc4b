#!/usr/bin/env bash
# --batch auto (the CNN, CPU, one thread): the micro-batch comes from the
# memory plan, checked against the plan's own numbers as `kiln ir` prints
# them for that batch (params + low-precision copies + state + arena):
#  - with --memory-limit 64MiB, the chosen batch (a multiple of 8) fits and
#    the next multiple of 8 does not; the start-up line says both;
#  - the same with --accumulate 4 (effective batch 512; accumulation
#    adds persistent gradient sums, so the micro-batch may be smaller);
#    the effective batch is kept when the micro-batch divides it, and the
#    line says so when not;
#  - with room for the whole effective batch it keeps the train block's
#    batch and accumulation 1;
#  - without a limit on the CPU, or with one nothing fits, it is refused.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
limit_mb=67.108864 # 64 MiB
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn"
run() { "$tmp/cnn" --device cpu --threads 1 --data synthetic:2048 --steps 1 --eval-every 0 "$@"; }

# The plan's peak in MB at batch B, accumulate A, as kiln ir reports it.
planned() {
  "$kiln" ir examples/fashion_cnn.kl --batch "$1" --set accumulate="$2" > "$tmp/ir.txt"
  awk '/^# memory:/ { for (i = 1; i <= NF; i++) if ($i == "MB" && ($(i-2) == "params" || $(i-2) == "copies" || $(i-2) == "state")) s += $(i-1) }
       /^# memplan: arena/ { s += $4 } END { printf "%.2f\n", s }' "$tmp/ir.txt"
}

# check LOG EFFECTIVE: the chosen batch fits, the next multiple of 8 (at
# its own accumulation) does not, by the plan's numbers; the run used it;
# the effective batch is kept when the batch divides it, else said.
check() {
  line=$(grep '^batch auto:' "$1") || { echo "FAIL: no start-up line"; cat "$1"; exit 1; }
  echo "$line"
  b=$(sed 's/.*micro-batch \([0-9]*\) x accumulate \([0-9]*\).*/\1/' <<< "$line")
  a=$(sed 's/.*micro-batch \([0-9]*\) x accumulate \([0-9]*\).*/\2/' <<< "$line")
  said=$(sed 's/.*plan needs \([0-9.]*\) MB.*/\1/' <<< "$line")
  [ $((b % 8)) = 0 ] || { echo "FAIL: batch $b is not a multiple of 8"; exit 1; }
  grep -q "effective batch $((b * a)) (batch $b x accumulate $a)" "$1" || { echo "FAIL: the run did not use it"; exit 1; }
  if [ $(($2 % b)) = 0 ]; then [ $((b * a)) = "$2" ] || { echo "FAIL: effective batch $((b * a)), not $2"; exit 1; }
  else grep -q "(asked: $2, not a multiple of $b)" <<< "$line" || { echo "FAIL: a changed effective batch not said"; exit 1; }; fi
  need=$(planned "$b" "$a")
  nb=$((b + 8)) na=$(( ($2 + (b + 8) / 2) / (b + 8) ))
  [ "$na" -ge 1 ] || na=1
  next=$(planned "$nb" "$na")
  echo "  kiln ir: batch $b x $a needs $need MB, batch $nb x $na needs $next MB; limit $limit_mb MB"
  awk -v n="$need" -v s="$said" 'BEGIN { exit !(n == s) }' || { echo "FAIL: the line says $said MB, the plan $need MB"; exit 1; }
  awk -v n="$need" -v l="$limit_mb" 'BEGIN { exit !(n <= l + 0.005) }' || { echo "FAIL: batch $b does not fit"; exit 1; }
  awk -v n="$next" -v l="$limit_mb" 'BEGIN { exit !(n > l - 0.005) }' || { echo "FAIL: batch $nb fits too"; exit 1; }
  grep -q "micro-batch $nb would need $next MB" <<< "$line" || { echo "FAIL: the line does not name the next batch"; exit 1; }
}

run --batch auto --memory-limit 64MiB > "$tmp/auto.log" 2>&1 || { cat "$tmp/auto.log"; exit 1; }
check "$tmp/auto.log" 128
run --batch auto --memory-limit 64MiB --accumulate 4 > "$tmp/acc.log" 2>&1 || { cat "$tmp/acc.log"; exit 1; }
check "$tmp/acc.log" 512

run --batch auto --memory-limit 2GiB > "$tmp/big.log" 2>&1 || { cat "$tmp/big.log"; exit 1; }
grep -q '^batch auto: micro-batch 128 x accumulate 1 = effective batch 128;.*the whole effective batch' "$tmp/big.log" ||
  { echo "FAIL: with room, expected the train block's 128"; grep 'batch auto' "$tmp/big.log"; exit 1; }
if run --batch auto > "$tmp/nolimit.log" 2>&1; then echo "FAIL: --batch auto without a limit ran"; exit 1; fi
grep -q 'batch auto needs a memory budget' "$tmp/nolimit.log" || { cat "$tmp/nolimit.log"; exit 1; }
if run --batch auto --memory-limit 4MiB > "$tmp/tiny.log" 2>&1; then echo "FAIL: a 4 MiB limit ran"; exit 1; fi
grep -q 'even micro-batch 8 needs' "$tmp/tiny.log" || { cat "$tmp/tiny.log"; exit 1; }
echo "refused: no limit; a limit nothing fits"
