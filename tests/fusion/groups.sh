#!/usr/bin/env bash
# The transformer fusions (issue 16 item 3) form where they should, and
# the plan's counters show what they save.
#  - tests/grad/transformer_fusions.kl (one pre-norm block, checked by
#    finite differences in tests/grad): residual add + layer norm backward
#    in one kernel, GEMM + bias + GELU and GEMM + GELU' epilogues,
#    softmax + cross-entropy + gradient (with ignore_index) in one kernel.
#  - examples/gpt.kl: every block's two layer-norm backwards take their
#    residual add (8), and turning the pattern off (KILN_FUSION_OFF) costs
#    exactly one launch and a write plus a read of one [16,128,128] f32
#    gradient (2 MiB) per fusion.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1

groups=$("$kiln" ir tests/grad/transformer_fusions.kl | kiln_ir_groups)
printf '%s\n' "$groups"
expect() { kiln_expect_groups "$1" "$2" "$groups"; }
expect 1 "layernorm_grad: layernorm_grad add"
expect 1 "gemm_epilogue: matmul add gelu"
expect 1 "gemm_epilogue: matmul gelu_grad sum_to"
expect 1 "gemm_epilogue: matmul add add"
expect 1 "softmax_cross_entropy: cross_entropy cast cross_entropy_grad"

groups=$("$kiln" ir examples/gpt.kl | kiln_ir_groups)
expect 8 "layernorm_grad: layernorm_grad add"
expect 4 "gemm_epilogue: matmul add gelu"
expect 4 "gemm_epilogue: matmul gelu_grad sum_to"
expect 1 "softmax_cross_entropy: cross_entropy cross_entropy_grad"

# counter NAME: the training plan's value of counter NAME (kiln counters).
counter() { awk -v k="$1" '$1 == k { print $2 }'; }
fused=$("$kiln" counters examples/gpt.kl)
off=$(KILN_FUSION_OFF=layernorm_grad "$kiln" counters examples/gpt.kl)
for c in launches kernel_bytes; do
  a=$(printf '%s\n' "$fused" | counter $c)
  b=$(printf '%s\n' "$off" | counter $c)
  echo "$c: fused $a, layernorm_grad off $b"
  case $c in
    launches) want=8 ;;
    kernel_bytes) want=$((8 * 2 * 16 * 128 * 128 * 4)) ;;
  esac
  [ $((b - a)) -eq "$want" ] || { echo "FAIL: $c saved $((b - a)), expected $want"; exit 1; }
done
echo "transformer fusions as expected"
