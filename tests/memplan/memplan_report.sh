#!/usr/bin/env bash
# The memory plan's report and timeline (kiln ir): the report after the
# memplan pass names arena, lower bound, ratio and unplanned bytes and the
# ten largest buffers; the timeline's rows that share memory are never live
# at the same step (checked here from the text alone); KILN_MEMPLAN=0 plans
# nothing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
model=examples/fashion_cnn.kl
report=$("$kiln" ir "$model" --after memplan | sed -n '/^# memplan:/,/^graph/p' | sed '$d')
printf '%s\n' "$report"
printf '%s\n' "$report" | grep -qE '^# memplan: arena [0-9.]+ MB \(lower bound [0-9.]+ MB, [0-9.]+x; unplanned [0-9.]+ MB\)$' \
  || { echo "FAIL: no summary line"; exit 1; }
rows=$(printf '%s\n' "$report" | grep -cE '^#   [0-9]+ +[0-9]+ +[0-9]+\.\.[0-9]+ ')
[ "$rows" -eq 10 ] || { echo "FAIL: $rows buffer rows, expected the ten largest"; exit 1; }

"$kiln" ir "$model" --format timeline > /tmp/timeline.$$ || exit 1
trap 'rm -f /tmp/timeline.$$' EXIT
head -5 /tmp/timeline.$$
# Rows: offset end first..last; any two rows whose byte ranges meet must not
# be live at one step; some rows must share memory (planning reuses it).
awk '
  $1 ~ /^[0-9]+$/ && $3 ~ /\.\./ {
    split($3, r, /\.\./); n++; lo[n] = $1; hi[n] = $2; f[n] = r[1]; l[n] = r[2]; name[n] = $5
  }
  END {
    shared = 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (lo[i] < hi[j] && lo[j] < hi[i]) {
        shared++
        if (f[i] <= l[j] && f[j] <= l[i]) { print "FAIL: " name[i] " and " name[j] " share memory while both live"; bad = 1 }
      }
    printf "%d rows, %d pairs share memory at different times\n", n, shared
    if (n < 20 || shared == 0) { print "FAIL: the timeline shows no sharing"; bad = 1 }
    exit bad
  }' /tmp/timeline.$$

if "$kiln" ir "$model" --after fusion --format timeline > /dev/null 2>&1; then
  echo "FAIL: a timeline before the schedule was accepted"; exit 1
fi
off=$(KILN_MEMPLAN=0 "$kiln" ir "$model" | grep '^# memplan:')
echo "$off"
arena=$(echo "$off" | sed 's/.*arena \([0-9.]*\) MB.*/\1/') unplanned=$(echo "$off" | sed 's/.*unplanned \([0-9.]*\) MB.*/\1/')
[ "$arena" = "$unplanned" ] && echo "$off" | grep -q 'planning off' || { echo "FAIL: KILN_MEMPLAN=0 still plans"; exit 1; }
echo "report, timeline and the switch as expected"
