#!/usr/bin/env bash
# Round trip of the IR text form after every pass:
# print(parse(print(g))) == print(g).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 model=$2
new_tmpdir
passes=$("$kiln" ir --help | sed -n 's/.*stages: \(.*\)$/\1/p' | tr -d ',')
[ -n "$passes" ] || { echo "FAIL: no stage list in kiln ir --help"; exit 1; }
for pass in $passes all; do
  # eval_mode runs only for the evaluation graph (kiln ir refuses a stage
  # the mode does not run).
  mode=()
  [ "$pass" = eval_mode ] && mode=(--eval)
  "$kiln" ir "$model" "${mode[@]}" --after "$pass" -o "$tmp/a.kir"
  "$kiln" ir "$tmp/a.kir" --after lower -o "$tmp/b.kir"
  if ! cmp -s "$tmp/a.kir" "$tmp/b.kir"; then
    echo "round trip differs for $model after $pass:"
    diff "$tmp/a.kir" "$tmp/b.kir" | head -20
    exit 1
  fi
done
echo "round trip holds for $model after: $passes all"
