#!/usr/bin/env bash
# examples/gpt2_small.kl at its tiny size (tests/gpt/gpt2_tiny.sh) against
# the f64 reference evaluator, fp32 and bf16, batch 1: every value of the
# fused and the unfused plan (reference.examples.* runs the other
# examples at their own size; this one's would take hours).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpt2_tiny.sh"
kiln=$1 refcheck=$2
new_tmpdir
tiny_gpt2 "$kiln" "$tmp" || exit 1
"$refcheck" "$tmp/m/tiny.kl" --batch 1 || fail=1
"$refcheck" "$tmp/m/tiny.kl" --batch 1 --set precision=bf16 || fail=1
exit $fail
