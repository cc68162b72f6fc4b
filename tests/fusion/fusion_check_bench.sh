#!/usr/bin/env bash
# kiln bench --check-fusion on real timings (issue 32 item 7): with the
# fusion pass's cost rule switched off (KILN_FUSION_COST=0), the
# per-channel broadcast of tests/fusion/fusion_leaf_run.kl's global pool gradient
# is fused into batchnorm_grad's group, which is then about 25x slower than
# its unfused parts (batch 4, one thread); the check must name it and exit
# 3. The margin is 3 (4x its parts), so a busy machine's noise cannot
# decide it. With the rule on (the default) no such group exists.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
args=(bench tests/fusion/fusion_leaf_run.kl --batch 4 --threads 1 --repeats 5 --check-fusion --margin 3)
set +e
KILN_FUSION_COST=0 "$kiln" "${args[@]}" > "${TMPDIR:-/tmp}/fcb.$$.out" 2> "${TMPDIR:-/tmp}/fcb.$$.err"
rc=$?
set -e
out=$(cat "${TMPDIR:-/tmp}/fcb.$$.out") err=$(cat "${TMPDIR:-/tmp}/fcb.$$.err")
rm -f "${TMPDIR:-/tmp}/fcb.$$.out" "${TMPDIR:-/tmp}/fcb.$$.err"
printf '%s\n' "$out" | sed -n '/^fusion check:/,$p'
if [ "$rc" != 3 ]; then
  printf '%s\n' "$err"
  echo "FAIL: kiln bench --check-fusion exited $rc with the slow group injected, expected 3"
  exit 1
fi
if ! grep -q 'SLOW .*broadcast + relu_grad + batchnorm_grad' <<< "$out" ||
   ! grep -q 'error: kiln bench --check-fusion: tests/fusion/fusion_leaf_run.kl: fused kernel step .*broadcast + relu_grad + batchnorm_grad' <<< "$err"; then
  printf '%s\n' "$err"
  echo "FAIL: the fused broadcast + batchnorm_grad group was not named slow"
  exit 1
fi
if "$kiln" ir tests/fusion/fusion_leaf_run.kl --kernels | grep -q '^/\* .*broadcast + relu_grad + batchnorm_grad'; then
  echo "FAIL: with the cost rule on, the broadcast is still fused into batchnorm_grad's group"
  exit 1
fi
echo "ok: the injected slow fused group is named and the check exits 3"
