#!/usr/bin/env bash
# A 16-bit value copied into a buffer of its own dtype (im2col, the
# GEMMs' transposes) moves its bits: no store in the CNN's bf16 and fp16
# kernels narrows a value it has just widened from a buffer (the round
# trip cost two conversions per element, and made NaNs quiet). The
# copies' values are checked against the f64 reference by
# precision.reference.fashion_cnn.bf16 and reference.examples.fashion_cnn.fp16.
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
# fp16 max pooling and its gradient work on the 16-bit patterns
# (base/scalar.h keys16, codegen/print_expr.c print_bits16; their values
# are checked against the f64 reference by precision.reference.pools16.fp16):
# no f16 widening or narrowing in them element by element, maxima stored
# through kl_unkey16, the gradients' stores (dy or 0) through kl_sel16, as
# relu's gradient's; the gradients compare x with y as floats of planes
# staged with F16C (codegen/emit_c.c plan_strided: strided windows),
# where kl_f16_eq compared bits before (the same equality). Every other f16 kernel widens
# with kl_f16_to_f32, but for F16C's kl_f16_to_f32_f16c in col2im's
# border columns (conv2d_grad_input: loads that only meet sums, in loops
# GCC leaves scalar) and the gathering max-pooling gradient of
# overlapping windows (not in the CNN).
kinds() { awk -v pat="$1" '/^\/\* [a-z0-9_ +]* \*\/$/{c=$2} c != "" && $0 ~ pat {print c}' "$tmp/fp16.c" | sort -u | tr '\n' ' '; }
conv=$(kinds 'kl_f16_to_f32(_f16c)?\\(b|kl_f32_to_f16\\(')
f16c=$(kinds 'kl_f16_to_f32_f16c\\(b')
unkey=$(kinds 'kl_unkey16\\(') eq=$(kinds 'kl_f16_eq\\(') sel=$(kinds 'kl_sel16\\(')
rowcmp=$(kinds '\\(kl_row[0-9]+\\[[^]]*\\] == ')
if [ "$unkey" = "maxpool " ] && [ -z "$eq" ] && [ "$rowcmp" = "maxpool_grad " ] && [ "$sel" = "maxpool_grad relu_grad " ] &&
   [ "$f16c" = "conv2d_grad_input " ] && ! grep -qw 'maxpool\|maxpool_grad' <<< "$conv"; then
  ok "fp16: max pooling and its gradient keep 16-bit patterns; conversions only in $conv"
else
  bad "fp16: kernels that maximise in keys: '$unkey', compare bits: '$eq', compare staged rows: '$rowcmp', select bits: '$sel', widen with F16C: '$f16c', convert: '$conv'"
fi
# fp16 leaf loops whose f16 loads and stores walk a row (base + the
# loop's variable) widen and narrow the whole row with F16C around the
# loop (codegen/emit_c.c staged rows; precision.unit.rows16 checks the
# conversions, the reference checks the kernels' values): batch norm and
# its gradient convert nothing element by element, the convolutions'
# gradients (col2im) and forward stores stage their rows, and so does the
# in-place add + relu (its operand and result, one memory, at one index).
ops() { awk -v pat="$1" '/^\/\* [a-z0-9_ +]* \*\/$/{c=$0} c != "" && $0 ~ pat {print c}' "$tmp/fp16.c" | sort -u | sed 's|^/\* ||;s| \*/$||' | tr '\n' ','; }
staged=$(ops 'kl_f16_(widen|narrow)_row\\(')
inline=$(ops 'kl_f16_to_f32\\(b[0-9]*\\[[^]]*r[0-9]|kl_f32_to_f16\\(')
if grep -q 'batchnorm + relu,' <<< "$staged" && grep -q 'relu_grad + batchnorm_grad,' <<< "$staged" &&
   grep -q 'add + relu,' <<< "$staged" &&
   grep -q 'conv2d_grad_input,' <<< "$staged" && grep -q 'conv2d,' <<< "$staged" &&
   ! grep -q 'batchnorm' <<< "$inline"; then
  ok "fp16: rows staged with F16C in $staged; element conversions in loops left in $inline"
else
  bad "fp16: rows staged in '$staged'; element conversions in row loops in '$inline'"
fi
# The first convolution's rows of 28 are 28 x 28 planes, contiguous over
# the loop around them: staged once a plane (codegen/emit_c.c
# plan_plane), forward (narrowed) and weight gradient (widened), the
# loops indexing the plane by both variables.
planes=$(ops 'kl_f16_(widen|narrow)_row\(.*, 784LL\);')
indexed=$(grep -c 'kl_row[0-9]*\[ow[0-9]* + oh[0-9]* \* 28LL\]' "$tmp/fp16.c" || true)
if grep -q ',conv2d,' <<< ",$planes" && grep -q ',conv2d_grad_weight,' <<< ",$planes" && [ "$indexed" = 2 ]; then
  ok "fp16: 28 x 28 planes staged in $planes"
else
  bad "fp16: rows of 784 staged in '$planes' (expected conv2d and conv2d_grad_weight among them), $indexed loops index planes (expected 2)"
fi
# Rows that a leaf loop reads and writes far from those of the next
# iteration of the loop around it, when it is that loop's only loop, are
# fetched one iteration ahead, loads to be read and stores to be written
# (codegen/emit_c.c print_prefetch): a batch norm's rows of one channel,
# image after image (25,088 or 12,544 elements apart: its loads in both
# passes and the second pass's store) and the source rows of
# the convolutions' transposes, at every precision; never the gathers
# (im2col, col2im, the pad), whose loops' rows lie next to each other.
"$kiln" ir examples/fashion_cnn.kl --set precision=fp32 --kernels > "$tmp/fp32.c"
for prec in fp16 fp32; do
  got=$(awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$0} /kl_prefetch_row(_w)?\(&/{
      k = $0 ~ /_w\(/ ? "w" : "r"; s = $0 ~ /\+ 1LL\) \* (25088|12544)LL/ ? "image" : "other"; print c " " k " " s}' \
      "$tmp/$prec.c" | sort | uniq -c | awk '{$1 = $1; print}' | sort | tr '\n' ';')
  want='1 /* conv2d */ r other;1 /* conv2d_grad_input */ r other;1 /* conv2d_grad_weight */ r other;4 /* batchnorm + relu */ r image;2 /* batchnorm + relu */ w image;12 /* relu_grad + batchnorm_grad */ r image;2 /* relu_grad + batchnorm_grad */ w image;'
  want=$(tr ';' '\n' <<< "$want" | sed '/^$/d' | sort | tr '\n' ';')
  if [ "$got" = "$want" ]; then
    ok "$prec: rows fetched ahead: $got"
  else
    bad "$prec: rows fetched ahead: '$got', expected '$want'"
  fi
done
# Leaf loops that OpenMP shares out or that are too long for rows on the
# stack run in chunks, each with its rows (the optimizer's and the input
# cast's flat loops); a value rounded to f16 and then stored as f16 is
# rounded once (the cast's rounding went twice: same bits, twice the
# work).
chunked=$(ops 'kl_c \\+= ')
twice=$(grep -c 'kl_f32_to_f16((float)((float)kl_f16_to_f32(kl_f32_to_f16' "$tmp/fp16.c" || true)
if grep -q 'adam_update' <<< "$chunked" && grep -q 'cast + div' <<< "$chunked" && [ "$twice" = 0 ]; then
  ok "fp16: chunked rows in $chunked; no value rounded twice on its way to an f16 store"
else
  bad "fp16: chunked rows in '$chunked'; $twice stores of values rounded twice"
fi
# bf16 stores of values that are bf16 already (maxima and selects of bf16
# loads and constants) take the top half (kl_bf16_trunc, or
# kl_bf16_trunc_row for a staged plane) instead of rounding: the max
# poolings and their gradients, relu's gradient, the padding zeros of
# the convolutions' copies; never a value computed by float arithmetic
# (batch norm, add, the convolutions' sums). Subscripts are left out of
# that check: a row-major index (r * 128 + col, the one-pass form of
# relu_grad + cast + sum_to) is no arithmetic on the stored value.
awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$2} /kl_bf16_trunc(_row)?\(/ && c {print c}' "$tmp/bf16.c" | sort -u > "$tmp/trunc"
if grep -qx maxpool "$tmp/trunc" && grep -qx maxpool_grad "$tmp/trunc" && grep -qx relu_grad "$tmp/trunc" &&
   ! grep -qvx 'maxpool\|maxpool_grad\|relu_grad\|conv2d\|conv2d_grad_weight' "$tmp/trunc" &&
   ! sed 's/\[[^]]*\]//g' "$tmp/bf16.c" | grep -q 'kl_bf16_trunc((float)([^;]*\( \* \| + \| / \)'; then
  ok "bf16: exact stores take the top half in $(tr '\n' ' ' < "$tmp/trunc")"
else
  bad "bf16: kernels storing with kl_bf16_trunc: $(tr '\n' ',' < "$tmp/trunc")"
fi
# Strided planes (codegen/emit_c.c plan_strided): bf16 max pooling and
# its gradient widen each input plane once (kl_bf16_widen_row) and read
# the windows from it at 2 x (the leaf) + 2 x width x (the row) (a line
# for the forward's four, one per store in the gradient); the
# pooling's output plane is narrowed whole (kl_bf16_trunc_row). bf16
# planes of short rows (plan_plane): the first convolution's output
# narrowed a plane at a time (kl_bf16_narrow_row) and its weight
# gradient's dy widened so. Their values are checked against the f64
# reference (precision.reference.pools16, precision.reference.fashion_cnn.bf16,
# precision.reference.direct_conv.bf16).
widened=$(awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$2} /kl_bf16_widen_row\(kl_row/{print c}' "$tmp/bf16.c" | sort -u | tr '\n' ' ')
windows=$(grep -c 'kl_row[0-9]*\[w[0-9]* \* 2LL + h[0-9]* \* \(28\|56\)LL + \(0\|1\|14\|15\|28\|29\)LL\]' "$tmp/bf16.c" || true)
planes=$(awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$2} /kl_bf16_(trunc|narrow)_row\(/ && c {print c}' "$tmp/bf16.c" | sort -u | tr '\n' ' ')
if [ "$widened" = "conv2d_grad_weight maxpool maxpool_grad " ] && [ "$windows" = 10 ] && [ "$planes" = "conv2d maxpool " ]; then
  ok "bf16: planes widened in $widened($windows window lines), narrowed whole in $planes"
else
  bad "bf16: planes widened in '$widened' (expected conv2d_grad_weight maxpool maxpool_grad), $windows window lines (expected 10), narrowed whole in '$planes' (expected conv2d maxpool)"
fi
# The fp16 MLP: the bias row of add + relu (and of the logits' add +
# cast), the same for every row of the batch, is widened once before the
# loop over the rows (codegen/emit_c.c
# plan_hoist: kl_hrow), not once a row; the one-pass relu_grad + cast +
# sum_to sums its selects of dy as floats, dy read from a staged row,
# where it read back each stored f16 and widened it in software
# (codegen/k_colsum.c one_pass_element). Values: reference.examples.mlp.fp16
# and reference.examples.fashion_cnn.fp16 (its dense layers).
"$kiln" ir examples/mlp.kl --set precision=fp16 --kernels > "$tmp/mlp16.c"
hoisted=$(awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$0} /kl_f16_widen_row\(kl_hrow0, &b1\[0\]/{print c}' "$tmp/mlp16.c" | sort | uniq -c | awk '{$1 = $1; print}' | tr '\n' ';')
perrow=$(awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$0} c == "/* add + relu */" && /kl_f16_widen_row\(kl_row[0-9]+, &b1\[0\]/' "$tmp/mlp16.c" | wc -l)
readback=$(grep -c '= (float)(((b[0-9]*\[col[0-9]*\]) + kl_f16_to_f32(' "$tmp/mlp16.c" || true)
if [ "$hoisted" = "1 /* add + cast */;2 /* add + relu */;" ] && [ "$perrow" = 0 ] && [ "$readback" = 0 ]; then
  ok "fp16 MLP: bias rows widened once a call in add + relu and add + cast; one-pass bias gradients read no f16 back"
else
  bad "fp16 MLP: hoisted bias rows '$hoisted' (expected the logits' add + cast and 2 add + relu), $perrow widened a row, $readback one-pass sums widening a read-back f16"
fi
# The loss scale's check of the gradients (sums of squares only tested
# for finiteness) sums in 64 independent lanes (codegen/emit_c.c
# print_free_order), the four sums of 256 or more elements; with
# clipping the same sums make the gradient's norm and keep one
# accumulator. precision.e2e checks that a forced overflow still skips.
lanes=$(awk '/^\/\* [a-z0-9_ +]* \*\/$/{c=$0} /kl_lane\[r[0-9]* - kl_b\] \+= /{print c}' "$tmp/mlp16.c" | sort | uniq -c | awk '{$1 = $1; print}' | tr '\n' ';')
"$kiln" ir examples/mlp.kl --set precision=fp16 --set clip=1 --kernels > "$tmp/mlp16clip.c"
cliplanes=$(grep -c 'kl_lane' "$tmp/mlp16clip.c" || true)
if [ "$lanes" = "4 /* mul + sum + mul + sum + mul + sum + mul + sum + mul + sum + mul + sum */;" ] && [ "$cliplanes" = 0 ]; then
  ok "fp16 MLP: the finite check sums in lanes ($lanes), the clipped norm does not"
else
  bad "fp16 MLP: sums in lanes '$lanes' (expected 4 in the finite check), $cliplanes lines with lanes under clipping (expected 0)"
fi
exit $fail
