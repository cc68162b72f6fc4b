#!/usr/bin/env bash
# A long elementwise chain compiles and trains as its unfused plan does.
#
#   fusion_depth.sh KILN FUSION_EQUIV
#
# The model (generated here, 4,000 lines): h = x @ w, then lines
# alternating h = h + 0.0001 and h = relu(h) * 0.999 + 0.001. Training keeps
# every relu's input and output for backward, so one elementwise group of
# the whole chain would need thousands of buffers; fusion must split it
# where a kernel's buffer limit (IR_KERNEL_MAX_BUFS) would be passed. Once
# this aborted in kiln ir with "invariant broken: k->nbufs < ...".
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
kiln=$1
equiv=$2
new_tmpdir
model=$tmp/chain.kl
"$(dirname "$0")/../../bench/depth.sh" --model elementwise 4000 > "$model"

# Every pass through memory planning, training and evaluation.
"$kiln" ir "$model" --after all > "$tmp/train.kir"
"$kiln" ir "$model" --after all --eval > "$tmp/eval.kir"
# The forward chain was split into several elementwise groups.
groups=$(grep -o 'group [0-9]* elementwise' "$tmp/train.kir" | sort -u | wc -l)
echo "training plan: $groups elementwise groups"
[ "$groups" -gt 1 ] || { echo "FAIL: expected the chain in several groups"; exit 1; }
# Three SGD steps fused and unfused, batch 4: the same losses and params
# (fusion_equiv's bound, 1e-5 relative).
"$equiv" "$model" 4
