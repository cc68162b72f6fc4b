#!/usr/bin/env bash
# The occupancy check can fail (tests/cuda/occupancy_check.c):
# - with the split reductions turned off (KILN_CUDA_SPLIT=0: one block per
#   channel, as before they were built), the CNN's batch-norm statistics
#   fail it: 32 blocks on the 132 SMs of an H200, for N x H x W = 100352
#   elements per channel (batch 32); with them (the default) the same
#   check passes without any reason;
# - a reason that no launch needs fails it (the list only shrinks);
# - a malformed reasons file is refused, naming the file and line.
#
#   occupancy_fails.sh OCCUPANCY_CHECK
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
check=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }

"$check" --precisions fp32 examples/fashion_cnn.kl > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 77 ] && { cat "$tmp/out"; exit 77; }
[ $rc -eq 0 ] || fail "split reductions, no reasons: exit $rc, want 0"
echo "split reductions: every launch of the CNN passes without a reason"

KILN_CUDA_SPLIT=0 "$check" --precisions fp32 examples/fashion_cnn.kl > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "one block per channel, without reasons: exit $rc, want 1"
grep -q '^FAIL: kk_[0-9a-f]* (batchnorm + relu, .*train fused fp32): FAIL on H200: 32 blocks (0.24 per SM), 100% occupancy, for 3211264 threads of work$' "$tmp/out" ||
  fail "the first batch norm (32 channels) is not reported as one block per channel"
grep -q '(batchnorm_infer' "$tmp/out" && fail "batchnorm_infer (a flat launch now) is reported"
echo "one block per channel, without reasons: $(grep -c '^FAIL: kk_' "$tmp/out") launches fail, the first batch norm's 32 blocks among them"

printf 'batchnorm | a reason\nbatchnorm_grad | a reason\nconv2d_grad_weight | a reason\nsoftmax | no launch needs this\n' > "$tmp/reasons"
KILN_CUDA_SPLIT=0 "$check" --precisions fp32 --reasons "$tmp/reasons" examples/fashion_cnn.kl > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "an unneeded reason: exit $rc, want 1"
grep -q 'the reason for "softmax" names no launch that needs one' "$tmp/out" || fail "the unneeded reason is not named"
grep -q '^FAIL: kk_' "$tmp/out" && fail "a launch with a stated reason still fails"
echo "an unneeded reason fails the check"

printf '# a comment\nbatchnorm without a bar\n' > "$tmp/bad"
"$check" --reasons "$tmp/bad" examples/fashion_cnn.kl > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a malformed reasons file: exit $rc, want 2"
grep -q "^$tmp/bad:2: expected \`OP | reason\`" "$tmp/out" || fail "the malformed line is not named"
echo "a malformed reasons file is refused with its file and line"
