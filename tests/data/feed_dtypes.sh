#!/usr/bin/env bash
# Inputs bound to fields once at start, the loader writing each field in
# its input's dtype: two inputs may read one field as the same dtype (it
# is written once, both are fed from it), not as two different dtypes
# (refused at start naming the inputs, the field and the dtypes).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
python3 tests/data/make_shards.py /usr/share/datasets/fashion-mnist train "$tmp/train" --count 64 --per-shard 64 || exit 1
model() { # FILE DTYPE_OF_SECOND_INPUT
  cat > "$1" <<KL
model two {
  input image : u8[batch, 1, 28, 28]
  input png : $2[batch, 1, 28, 28]
  input label : i32[batch]
  param w : [784, 10] init = zeros
  logits = (f32(flatten(image)) + f32(flatten(png))) / 510 @ w
  loss = cross_entropy(logits, label)
}
train {
  data = shards("train-000000.tar", shuffle_buffer = 0)
  batch = 16
  optimizer = sgd(lr = 0.1)
}
KL
}
model "$tmp/same.kl" u8
model "$tmp/differ.kl" f32
out=$("$kiln" run "$tmp/same.kl" --steps 2 --eval-every 0 --log-every 1 2>&1)
if [ $? -eq 0 ] && grep -q "step      1/2  loss 2.3026" <<< "$out"; then
  ok "two u8 inputs read field png (zero weights: loss ln 10)"
else
  bad "two inputs of one dtype on one field"; echo "$out" | tail -5
fi
out=$("$kiln" run "$tmp/differ.kl" --steps 2 --eval-every 0 2>&1)
rc=$?
want="differ.kl: inputs 'image' and 'png' both read field 'png' of $tmp/train-000000.tar, as u8 and as f32"
if [ $rc -ne 0 ] && grep -qF "$want" <<< "$out" && grep -q -- "---> read it into one input" <<< "$out"; then
  ok "two dtypes on one field refused: $want"
else
  bad "two dtypes on one field (rc $rc)"; echo "$out" | tail -5
fi
exit $fail
