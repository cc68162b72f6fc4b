#!/usr/bin/env bash
# Input-independent values (the causal mask and position table of
# tests/language/causal.kl, built from arange) are computed once, at
# start-up, never per step:
#  1. in the plan (kiln ir --format steps), for training and evaluation,
#     every step of arange or of the mask's comparison runs at start-up,
#     and there is at least one;
#  2. training is unchanged by it: every train and evaluation loss equals,
#     with one thread, that of the same model whose mask and table are made
#     to depend on the input (multiplied by mean(x) >= 0, which is 1), so
#     that they are computed in every step. Evaluations share the training
#     plan's arena and overwrite its start-up values; the executor computes
#     them again after each, or the losses after the first evaluation
#     would differ.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
work=$tmp
model=tests/language/causal.kl
for mode in "" --eval; do
  "$kiln" ir "$model" $mode --format steps > "$work/steps"
  if grep -E '^ *[0-9]+ (forward|backward|update) ' "$work/steps" | grep -E ' (arange|ge)[ +]'; then
    echo "FAIL: per-step kernels above compute input-independent values ($mode)"; cat "$work/steps"; exit 1
  fi
  n=$(grep -cE '^ *[0-9]+ startup .*arange' "$work/steps" || true)
  [ "$n" -ge 1 ] || { echo "FAIL: no start-up step ($mode)"; cat "$work/steps"; exit 1; }
  echo "ok: $n start-up steps with arange${mode:+ ($mode)}, none per step"
done
python3 - "$model" "$work/dynamic.kl" <<'PY'
import sys
s = open(sys.argv[1]).read()
a = s.replace("reshape(arange(28), [28, 1]) >= arange(28)",
              "reshape(arange(28) + i64(mean(x) * 0), [28, 1]) >= arange(28)")
a = a.replace("reshape(f32(arange(16)) / 16, [1, 16])", "reshape(f32(arange(16)) / 16, [1, 16]) * f32(mean(x) >= 0)")
assert a.count("mean(x)") == 2, "the model changed: update this test"
open(sys.argv[2], "w").write(a)
PY
"$kiln" ir "$work/dynamic.kl" --format steps > "$work/dyn_steps"
grep -qE '^ *[0-9]+ forward .*ge[ +]' "$work/dyn_steps" || { echo "FAIL: the dynamic variant has no per-step mask"; exit 1; }
for m in "$model" "$work/dynamic.kl"; do
  name=$(basename "$m" .kl)
  "$kiln" run "$m" --threads 1 --steps 24 --eval-every 8 --log-every 1 --quiet --metrics "$work/$name.json" > "$work/$name.out" 2>&1 ||
    { echo "FAIL: $m did not train"; cat "$work/$name.out"; exit 1; }
  grep -E '"type": "(train|eval)"' "$work/$name.json" | sed 's/.*"type": "\([a-z]*\)".*"loss": \([^,]*\),.*/\1 \2/' > "$work/$name.losses"
done
[ "$(grep -c '^eval' "$work/causal.losses")" -ge 3 ] || { echo "FAIL: expected 3 evaluations"; cat "$work/causal.losses"; exit 1; }
diff "$work/causal.losses" "$work/dynamic.losses" ||
  { echo "FAIL: losses differ between start-up and per-step masks (< start-up, > per step)"; exit 1; }
echo "ok: $(grep -c '^train' "$work/causal.losses") train and $(grep -c '^eval' "$work/causal.losses") evaluation losses equal with the mask at start-up and per step"
