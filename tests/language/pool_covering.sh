#!/usr/bin/env bash
# The general pooling backward (codegen/k_pool.c pool_backward, issue 32
# item 8) visits only the window positions that can cover an input
# element: for 3 x 3 windows of stride 2 (tests/grad/{avgpool,maxpool}.kl)
# ceil(3 / 2) = 2 per axis, not all 3. The values are bit for bit those
# of the loop over every position (the grad and reference tests).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
for op in avgpool maxpool; do
  src=$("$kiln" ir tests/grad/$op.kl --kernels)
  # The window loops of the gather kernel: the first two reduction loops after its comment.
  loops=$(printf '%s\n' "$src" | awk -v op="/\\\\* ${op}_grad \\\\*/" '$0 ~ op {on = 1} on && /for \(/ {print} /^}/ {on = 0}')
  printf '%s\n' "$loops"
  if printf '%s\n' "$loops" | grep -Eq 'for \(int64_t kh[0-9]+ = 0; kh[0-9]+ < 3LL'; then
    echo "FAIL: ${op}_grad loops over all 3 window rows"
    exit 1
  fi
  if ! printf '%s\n' "$loops" | grep -Eq 'for \(int64_t jh[0-9]+ = 0; jh[0-9]+ < 2LL' ||
     ! printf '%s\n' "$loops" | grep -Eq 'for \(int64_t jw[0-9]+ = 0; jw[0-9]+ < 2LL'; then
    echo "FAIL: ${op}_grad has no 2-long loops over the covering window rows and columns"
    exit 1
  fi
done
echo "ok: pooling backward visits ceil(k / s) window positions per axis"
