#!/usr/bin/env bash
# README.md and docs/ say what is true now; history belongs in commit
# messages and CHANGELOG.md. Fails on any line of README.md, docs/ or
# bench/README.md or tests/README.md that reads as history: a "round" that is not rounding
# arithmetic (rounding, rounded, rounds, round to ..., round trip, around,
# roundoff), "issue N", "deliverable", "this branch", "seen to fail",
# "before -> after". Prints each offending line as FILE:LINE: TEXT.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
files=(README.md bench/README.md tests/README.md)
while IFS= read -r f; do files+=("$f"); done < <(find docs -name '*.md' | sort)
# Words with "round" in them that are arithmetic, not history; the verb
# "round" before what it rounds to.
allowed='background|roundtrip|rounding|rounded|rounds|around|roundoff|round[- ]trips?|round[- ]tripped|round-to-nearest|round-robin|round (to|toward|towards|half|once|down|up|it|them|each|the|its|their|every|a|an|x|values?)\b'
history='round|issue [0-9]|deliverable|this branch|seen to fail|before -> after'
fail=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  while IFS= read -r hit; do
    # the line without its arithmetic "round" words must not read as history
    sed -E "s/$allowed//gI" <<<"$hit" | grep -qiE "$history" || continue
    echo "FAIL: $f:$hit"
    fail=1
  done < <(grep -niE "$history" "$f" || true)
done
[ $fail = 0 ] && echo "no history in README.md, bench/README.md or docs/ (${#files[@]} files)"
exit $fail
