#!/usr/bin/env bash
# The fusion pass's cost rule (passes/fusion.c keeps_leaf_run, issue 32
# item 7): a broadcast constant along the innermost axis is not fused into
# batchnorm_grad's group, where its load in the leaf loop kept the C
# compiler from vectorising it (26.8 ms fused against 2.4 ms).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
groups=$("$kiln" ir tests/fusion/fusion_leaf_run.kl | kiln_ir_groups)
printf '%s\n' "$groups" | grep 'broadcast\|batchnorm_grad'
if printf '%s\n' "$groups" | grep -q 'broadcast.*batchnorm_grad'; then
  echo "FAIL: a per-channel broadcast was fused into batchnorm_grad's group"
  exit 1
fi
kiln_expect_groups 2 "batchnorm_grad: relu_grad batchnorm_grad" "$groups"
echo "ok: the broadcast stays out of batchnorm_grad's group"
