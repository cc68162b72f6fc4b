#!/usr/bin/env bash
# Multi-tensor AdamW: the tiny GPT's 68 parameter updates (examples/gpt.kl,
# tests/gpt/tiny.sh) run as 5 kernels of at most 15 updates each (the
# kernel's 64 buffers: 4 per Adam update and the 2 shared scalars), not
# one per tensor; and the checkpoint after 6 steps is byte for byte the
# per-tensor plan's (KILN_FUSION_OFF=optimizer: one kernel per update).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/gpt/tiny.sh"
kiln=$1
new_tmpdir
tiny_gpt "$kiln" "$tmp" || exit 1
model=$tmp/m/gpt.kl

# The fusion groups holding updates: "PATTERN: N" (N updates) per group.
groups() { "$kiln" ir "$model" | kiln_ir_groups | grep adam_update | awk '{ print $1, NF - 1 }' | tr '\n' ' '; }
multi=$(groups)
single=$(KILN_FUSION_OFF=optimizer groups)
want="optimizer: 15 optimizer: 15 optimizer: 15 optimizer: 15 optimizer: 8 "
[ "$multi" = "$want" ] && ok "68 updates in 5 kernels: $multi" || bad "update groups: '$multi', expected '$want'"
[ "$single" = "$(printf 'single: 1 %.0s' $(seq 68))" ] && ok "KILN_FUSION_OFF=optimizer: 68 kernels of one update" ||
  bad "KILN_FUSION_OFF=optimizer: $single"

"$kiln" build "$model" -o "$tmp/multi" > /dev/null || exit 1
KILN_FUSION_OFF=optimizer "$kiln" build "$model" -o "$tmp/single" > /dev/null || exit 1
# The train block's batch: the built kernels run (another batch would
# compile the plan afresh at start, under this environment's fusion).
run() { (cd "$tmp/m" && "$tmp/$1" --threads 1 --quiet --steps 6 --eval-every 0 --save "$tmp/$1.ckpt" --profile > "$tmp/$1.log" 2>&1); }
run multi || bad "the multi-tensor run"
KILN_FUSION_OFF=optimizer run single || bad "the per-tensor run"
cmp -s "$tmp/multi.ckpt" "$tmp/single.ckpt" && ok "6 AdamW steps: the same checkpoint bytes as one kernel per tensor" ||
  bad "the multi-tensor checkpoint differs from the per-tensor one"
exit $fail
