#!/usr/bin/env bash
# The direct convolution's padded input is f32 under bf16 and fp16, so its
# kernels widen each input once (the pad), not once per output channel:
# in the generated kernels of tests/precision/direct_conv.kl (two direct
# convolutions) every pad kernel reads 16-bit and writes float, and every
# direct forward and weight-gradient kernel reads that float copy
# (buffer 0) with 16-bit weights or output gradients (buffer 1). The
# values are checked against the f64 reference by
# precision.reference.direct_conv.{bf16,fp16}.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
for p in bf16 fp16; do
  "$kiln" ir tests/precision/direct_conv.kl --batch 4 --set precision=$p --kernels > "$tmp/$p.c"
  # "KIND SIGNATURE" for each kernel: its comment, then its body's parameters.
  awk '/^\/\* /{c=$2} /_body\(/{sub(/.*_body\(/, ""); print c, $0}' "$tmp/$p.c" > "$tmp/$p.sig"
  pads=$(grep -c '^conv2d\(_grad_weight\)\? const uint16_t \*restrict b0, float \*restrict b1, const kl_kargs' "$tmp/$p.sig" || true)
  direct=$(grep -c '^conv2d\(_grad_weight\)\? const float \*restrict b0, const uint16_t \*restrict b1,' "$tmp/$p.sig" || true)
  if [ "$pads" = 4 ] && [ "$direct" = 4 ]; then
    ok "$p: 4 pad kernels widen to float, 4 direct kernels read the float copy"
  else
    bad "$p: $pads pad kernels writing float and $direct direct kernels reading it, expected 4 and 4"
    grep '^conv2d' "$tmp/$p.sig"
  fi
done
exit $fail
