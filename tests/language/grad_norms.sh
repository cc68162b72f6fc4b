#!/usr/bin/env bash
# The clipping norm's per-gradient squared sums share kernels (the
# grad_norms fusion pattern, at most 16 gradients a kernel): the six
# parameters of tests/language/leading_sums.kl in one group, the GPT
# example's 68 in five; and the kernels against the f64 reference with a
# clip that engages (sumto.reference.clip checks the values).
#   grad_norms.sh KILN
source "$(dirname "$0")/../lib.sh"
kiln=$1
groups=$("$kiln" ir tests/language/leading_sums.kl --set clip=0.05 --after fusion | kiln_ir_groups) || exit 1
kiln_expect_groups 1 "grad_norms: mul sum mul sum mul sum mul sum mul sum mul sum" "$groups"
ok "leading_sums.kl: one grad_norms kernel for 6 gradients"
n=$("$kiln" ir examples/gpt.kl --after fusion | kiln_ir_groups | grep -c '^grad_norms:')
[ "$n" -eq 5 ] && ok "gpt.kl: 68 gradients' norms in 5 kernels" || bad "gpt.kl: $n grad_norms kernels, expected 5"
exit $fail
