#!/usr/bin/env bash
# Runs `kiln ir` on a bad input and compares what it prints with the
# .expect file beside it. The input must be refused with exit status 1:
# not accepted, and not a crash (a signal gives 128+N).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 case=$2
expect="${case%.*}.expect"
out=$("$kiln" ir "$case" 2>&1 >/dev/null)
rc=$?
if [ $rc -ne 1 ]; then
  echo "FAIL: $case: exit status $rc, expected 1"
  printf '%s\n' "$out"
  exit 1
fi
if ! diff <(printf '%s\n' "$out") "$expect"; then
  echo "FAIL: $case: message differs from $expect (< got, > expected)"
  exit 1
fi
echo "ok: $case"
