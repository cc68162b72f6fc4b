#!/usr/bin/env bash
# A 16-bit value copied into a buffer of its own dtype (im2col, the
# GEMMs' transposes) moves its bits: no store in the CNN's bf16 and fp16
# kernels narrows a value it has just widened from a buffer (the round
# trip cost two conversions per element, and made NaNs quiet). The
# copies' values are checked against the f64 reference by
# bf16speed.reference.fashion_cnn.bf16 and reference.examples.fashion_cnn.fp16.
# And the fp16 max-pooling gradients and the max pooling with rows under
# 8 outputs (the CNN's second, 7 wide; its first, 14 wide, GCC
# vectorises) widen with F16C (kir_kernel's scalar_f16;
# prec3.unit.f16c_widen checks that widening), other kernels with
# kl_f16_to_f32.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
for p in bf16:bf16 fp16:f16; do
  prec=${p%%:*} t=${p#*:}
  "$kiln" ir examples/fashion_cnn.kl --set precision="$prec" --kernels > "$tmp/$prec.c"
  trips=$(grep -c "kl_f32_to_${t}((float)(kl_${t}_to_f32(b[0-9]*\[[^;]*\])));" "$tmp/$prec.c" || true)
  copies=$(grep -c '^ *b[0-9]*\[[^=]*\] = b[0-9]*\[[^;]*\];$' "$tmp/$prec.c" || true)
  if [ "$trips" = 0 ] && [ "$copies" -ge 8 ]; then
    ok "$prec: $copies raw 16-bit copies, no widen-and-narrow round trip"
  else
    bad "$prec: $trips round trips and $copies raw copies (expected 0 and at least 8)"
  fi
done
# "KIND NAME-OF-WIDENING" for each kernel's f16 loads
awk '/^\/\* /{c=$2} /kl_f16_to_f32(_f16c)?\(b/{n=match($0, /kl_f16_to_f32_f16c\(b/) ? "f16c" : "plain"; print c, n}' "$tmp/fp16.c" | sort -u > "$tmp/widen"
if grep -qx 'maxpool_grad f16c' "$tmp/widen" && ! grep -q '^maxpool_grad plain' "$tmp/widen" &&
   grep -qx 'maxpool f16c' "$tmp/widen" && grep -qx 'maxpool plain' "$tmp/widen" &&
   ! grep -v '^maxpool' "$tmp/widen" | grep -q f16c; then
  ok "fp16: the max-pooling gradients and the 7-wide max pooling widen with F16C, no other kernel does"
else
  bad "fp16: widenings by kernel kind: $(tr '\n' ',' < "$tmp/widen")"
fi
# bf16 stores of values that are bf16 already (maxima and selects of bf16
# loads and constants) take the top half (kl_bf16_trunc) instead of
# rounding: the max poolings and their gradients, relu's gradient, the
# padding zeros of the convolutions' copies; never a value computed by
# float arithmetic (batch norm, add, the convolutions' sums).
awk '/^\/\* /{c=$2} /kl_bf16_trunc\(\(float\)/{print c}' "$tmp/bf16.c" | sort -u > "$tmp/trunc"
if grep -qx maxpool "$tmp/trunc" && grep -qx maxpool_grad "$tmp/trunc" && grep -qx relu_grad "$tmp/trunc" &&
   ! grep -qvx 'maxpool\|maxpool_grad\|relu_grad\|conv2d\|conv2d_grad_weight' "$tmp/trunc" &&
   ! grep -q 'kl_bf16_trunc((float)([^;]*\( \* \| + \| / \)' "$tmp/bf16.c"; then
  ok "bf16: exact stores take the top half in $(tr '\n' ' ' < "$tmp/trunc")"
else
  bad "bf16: kernels storing with kl_bf16_trunc: $(tr '\n' ',' < "$tmp/trunc")"
fi
exit $fail
