#!/usr/bin/env bash
# kiln ir --after STAGE stops at the stage it names, or refuses it: a pass
# the chosen mode does not run (eval_mode when training, autodiff,
# optimizer, accumulate or recompute with --eval) is an error with exit
# status 1, not the whole pipeline's dump with exit 0.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
model=examples/mlp.kl
fail=0
# refused FLAGS... : exit 1, and the message names the file, the stage and the mode that runs it.
refused() {
  local want=$1
  shift
  out=$("$kiln" ir "$model" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 1 ] || [ "$out" != "$want" ]; then
    echo "FAIL: kiln ir $model $*: exit $rc, printed:"
    printf '%s\n' "$out"
    echo "expected exit 1 and: $want"
    fail=1
  else
    echo "ok: $* refused"
  fi
}
refused "kiln: error: $model: stage 'eval_mode' does not run in training; it runs only in evaluation (--eval)" \
  --after eval_mode
for p in autodiff optimizer accumulate recompute; do
  refused "kiln: error: $model: stage '$p' does not run in evaluation (--eval); it runs only in training" \
    --eval --after "$p"
done
# The stages a mode runs stop there: the dump's last pass is the one asked for.
for args in "--after eval_mode --eval" "--after autodiff" "--after simplify --eval" "--after recompute"; do
  # shellcheck disable=SC2086
  last=$("$kiln" ir "$model" $args | sed -n 's/^  passes //p' | tr -d ' ' | awk -F, '{print $NF}')
  want=$(echo "$args" | awk '{print $2}')
  if [ "$last" != "$want" ]; then
    echo "FAIL: kiln ir $model $args: last pass '$last', expected '$want'"
    fail=1
  else
    echo "ok: $args stops after $want"
  fi
done
exit $fail
