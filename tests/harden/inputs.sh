#!/usr/bin/env bash
# Reproducers of what tests/fuzz/cli_fuzz.py found: each bad input gets an
# error naming the file or the flag (as the user wrote it), exit status 1.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
src=/usr/share/datasets/fashion-mnist
new_tmpdir
fail=0
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
exe=("$tmp/mlp" --steps 1 --threads 1 --quiet)

# A flag that sets a train key is named as typed (--eval-every), not by
# its key (--eval_every, which is no flag).
expect_error "--eval-every -inf" "--eval-every: error: eval_every must be an integer" \
  "${exe[@]}" --data synthetic:64 --eval-every -inf
expect_error "--log-every 0" "--log-every: error:" "${exe[@]}" --data synthetic:64 --log-every 0
expect_error "--memory-limit abc" "--memory-limit: error:" "${exe[@]}" --data synthetic:64 --memory-limit abc
# A number past i64 was read as 2^63 - 1 (strtoll saturates) and accepted.
expect_error "--steps 2^64+" "--steps: error: steps must be an integer" \
  "${exe[@]}" --data synthetic:64 --batch 8 --steps 99999999999999999999
expect_error "--memory-limit 2^63" "--memory-limit: error: memory_limit must be a byte count" \
  "${exe[@]}" --data synthetic:64 --batch 8 --memory-limit 9223372036854775808
# ... while 1e9 bytes, which arrives as a float, was refused.
out=$("${exe[@]}" --data synthetic:64 --batch 8 --memory-limit 1e9 2>&1) && grep -q '^done: 1 steps' <<< "$out" &&
  ok "--memory-limit 1e9 runs" || bad "--memory-limit 1e9: $(tail -2 <<< "$out")"
# A --batch that makes an input too large: the message shows the shape
# with the batch in it (it said "an input is too large" at the model line).
expect_error "kiln ir --batch 2^31" "mlp.kl:12:34: error: an input is too large: [2147483648, 1, 28, 28] passes 2^40 elements" \
  "$kiln" ir examples/mlp.kl --batch 2147483648
# A plan larger than the machine names the file (it named the model alone).
cat > "$tmp/big.kl" <<'KL'
model huge {
  input x : f32[batch, 784]
  input label : i32[batch]
  param w : [784, 1000000000]
  loss = mean(x @ w)
}
train { batch = 2 }
KL
expect_error "plan larger than memory" "big.kl: model huge: the plan (params and state" "$kiln" ir "$tmp/big.kl"
# An empty --data was read as the folder '' ("kiln: error: : cannot read
# the data folder").
expect_error "--data ''" "--data: needs a data folder, a .tar shard path or synthetic:N; got an empty value" \
  "${exe[@]}" --data ''
# A label out of range names the label file and the sample, not the folder.
mkdir "$tmp/d" && cp "$src"/* "$tmp/d"/
gzip -dc "$src/t10k-labels-idx1-ubyte.gz" |
  python3 -c "import sys; d=bytearray(sys.stdin.buffer.read()); d[8+92]=42; sys.stdout.buffer.write(d)" |
  gzip > "$tmp/d/t10k-labels-idx1-ubyte.gz"
expect_error "label out of range" \
  "$tmp/d/t10k-labels-idx1-ubyte.gz: sample 92: label 42 is out of range for the model's 10 classes" \
  "${exe[@]}" --data "$tmp/d"
# A checkpoint or safetensors file with a NaN in it (checksum valid) was
# loaded, and the first step said "training diverged (try a lower --lr)".
"${exe[@]}" --data synthetic:64 --batch 8 --save "$tmp/c.ckpt" --export "$tmp/c.safetensors" > /dev/null 2>&1 ||
  bad "saving a checkpoint"
python3 tests/ckpt/ckpt_craft.py "$tmp/c.ckpt" "$tmp/nan.ckpt" nan dense.1.w 5
expect_error "NaN in a checkpoint" "nan.ckpt: element 5 of 'dense.1.w' is not finite; Kiln never saves inf or nan" \
  "${exe[@]}" --data synthetic:64 --batch 8 --steps 2 --resume "$tmp/nan.ckpt"
python3 - "$tmp/c.safetensors" "$tmp/nan.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
(n,) = struct.unpack_from("<Q", data)
start = 8 + n + json.loads(data[8:8 + n])["dense.1.w"]["data_offsets"][0]
struct.pack_into("<f", data, start + 4 * 7, float("inf"))
open(sys.argv[2], "wb").write(data)
PY
expect_error "inf in safetensors" "nan.safetensors: element 7 of 'dense.1.w' is not finite (inf or nan)" \
  "${exe[@]}" --data synthetic:64 --batch 8 --init "$tmp/nan.safetensors"
# KILN_MARCH (the -march of generated C) must be one word: a value that
# would smuggle other compiler flags in is refused.
KILN_MARCH='x86-64 -O0' expect_error "KILN_MARCH with a space" "KILN_MARCH='x86-64 -O0' is not a -march value" \
  "$kiln" build examples/mlp.kl -o "$tmp/m2"
exit $fail
