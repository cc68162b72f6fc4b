#!/usr/bin/env bash
# The cuBLASLt epilogues the plan chooses (plan/lt_epilogue.c), without a
# GPU: every GEMM step of the examples, gpt.kl and tests/cudalt/epilogues.kl,
# training and evaluation plans, with the epilogue it records and the
# kernel step it covers, against tests/cudalt/epilogues.golden.
#
#   epilogues.sh KILN            compare
#   epilogues.sh KILN --update   rewrite the golden file (check its diff)
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
golden="$testdir/cudalt/epilogues.golden"
new_tmpdir
for m in examples/mlp.kl examples/fashion_cnn.kl examples/gpt.kl tests/cudalt/epilogues.kl; do
  for mode in train eval; do
    flag=; [ $mode = eval ] && flag=--eval
    echo "== $m ($mode)"
    # shellcheck disable=SC2086
    "$kiln" ir "$m" $flag --format steps > "$tmp/steps" || { echo "FAIL: kiln ir $m $flag"; exit 1; }
    # The GEMM steps and the steps an epilogue covers, without the step
    # numbers (which other changes move).
    grep -E ' matmul |in the GEMM' "$tmp/steps" | sed -E 's/^ *[0-9]+ //'
  done
done > "$tmp/got"
if [ "${2:-}" = --update ]; then
  cp "$tmp/got" "$golden"
  echo "updated $golden"
  exit 0
fi
if ! diff "$golden" "$tmp/got"; then
  bad "the chosen epilogues differ from $golden (< golden, > now); after a deliberate change: $0 KILN --update"
else
  n=$(grep -c 'cuBLASLt epilogue' "$tmp/got")
  ok "$n GEMM steps with a cuBLASLt epilogue, as in $golden"
  # Each kind the model exercising them should show, in training.
  for k in bias relu_bias gelu_aux_bias gelu_aux dgelu dgelu_bgrad gelu_bias gelu; do
    grep -q "cuBLASLt epilogue $k\]" "$tmp/got" || bad "no GEMM step takes epilogue $k"
  done
fi
exit $fail
