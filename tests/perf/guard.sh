#!/usr/bin/env bash
# The performance guard (issue 14 item 7): deterministic counters of every
# example's plans at every precision (`kiln counters`: launches, GEMM FLOPs,
# bytes moved, arena, host<->device copies; no timing) against the
# committed baseline tests/perf/baseline.json. Fails when any counter is
# more than 2% worse (every counter is lower-is-better), printing the
# differences; improvements are listed too, with the command that accepts
# them.
#
#   tests/perf/guard.sh KILN               compare (the ctest perf.guard)
#   tests/perf/guard.sh KILN --accept      write the current counters as
#                                          the new baseline
#   tests/perf/guard.sh KILN --baseline F  compare against F instead
#   tests/perf/guard.sh KILN --now F       compare the counters of F (a
#                                          file --accept wrote) instead of
#                                          measuring them (guard_catches.sh)
#   (cmake --build build --target perf_baseline runs --accept)
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
baseline=$here/baseline.json
accept=0
now=
while [ $# -gt 0 ]; do
  case $1 in
    --accept) accept=1 ;;
    --baseline) baseline=$2; shift ;;
    --now) now=$2; shift ;;
    *) echo "guard.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
new_tmpdir
# The cases: each example at each precision.
cd "$root" || exit 1
# One file of kiln counters --json per case (CASE = example/precision,
# the file named with a '+'), read by the one Python below.
if [ -z "$now" ]; then
  mkdir "$tmp/cases"
  for ex in examples/*.kl; do
    for prec in fp32 bf16 fp16; do
      name=$(basename "$ex" .kl)/$prec
      if ! "$kiln" counters "$ex" --set precision=$prec --json > "$tmp/cases/${name/\//+}.json" 2> "$tmp/err"; then
        echo "FAIL: kiln counters $ex --set precision=$prec:"; cat "$tmp/err"; exit 1
      fi
    done
  done
fi
python3 - "${now:-$tmp/cases}" "$baseline" "$accept" <<'PY'
import json, os, sys
now = {}
if os.path.isdir(sys.argv[1]):
    for f in sorted(os.listdir(sys.argv[1])):
        now[f[:-len(".json")].replace("+", "/")] = json.load(open(os.path.join(sys.argv[1], f)))["counters"]
else:
    now = json.load(open(sys.argv[1]))
path, accept = sys.argv[2], sys.argv[3] == "1"
if accept:
    with open(path + ".tmp", "w") as f:
        json.dump(now, f, indent=1, sort_keys=True)
        f.write("\n")
    import os
    os.replace(path + ".tmp", path)
    print("wrote %s: %d cases, %d counters" % (path, len(now), sum(len(c) for c in now.values())))
    sys.exit(0)
try:
    base = json.load(open(path))
except (OSError, ValueError) as e:
    print("FAIL: cannot read the baseline %s: %s" % (path, e))
    sys.exit(1)
TOL = 0.02
worse, better, errors = [], [], []
for case in sorted(set(now) | set(base)):
    if case not in base:
        errors.append("%s: no baseline (a new example or precision: accept it)" % case)
        continue
    if case not in now:
        errors.append("%s: in the baseline but no longer measured" % case)
        continue
    for k in sorted(set(now[case]) | set(base[case])):
        if k not in base[case] or k not in now[case]:
            errors.append("%s %s: counter %s" % (case, k, "new" if k not in base[case] else "gone"))
            continue
        b, n = base[case][k], now[case][k]
        if n > b * (1 + TOL) and n > b:
            worse.append((case, k, b, n))
        elif n < b:
            better.append((case, k, b, n))
def row(case, k, b, n):
    pct = "new" if b == 0 else "%+.1f%%" % (100.0 * (n - b) / b)
    return "  %-18s %-24s %16d -> %-16d %s" % (case, k, b, n, pct)
for e in errors:
    print("FAIL: " + e)
if worse:
    print("FAIL: %d counter(s) more than %d%% worse than %s:" % (len(worse), TOL * 100, path))
    for w in worse:
        print(row(*w))
if better:
    print("better than the baseline (accept with: cmake --build build --target perf_baseline):")
    for w in better:
        print(row(*w))
if worse or errors:
    print("if the change is intended: cmake --build build --target perf_baseline, and commit tests/perf/baseline.json")
    sys.exit(1)
print("ok: %d cases, %d counters within %d%% of the baseline" % (len(now), sum(len(c) for c in now.values()), TOL * 100))
PY
