#!/usr/bin/env bash
# Bad data and checkpoints get a clear error naming the file, exit status
# 1, and no crash; a checkpoint resumes a run exactly.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
src=/usr/share/datasets/fashion-mnist
new_tmpdir
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
# expect NAME PATTERN ARGS...: the run must exit 1 and print PATTERN.
expect() { expect_error "$1" "$2" "$tmp/mlp" --steps 2 --quiet "${@:3}"; }
# A data folder with one file broken at a time.
mk() {
  rm -rf "$tmp/d" && mkdir "$tmp/d" && cp "$src"/* "$tmp/d"/
}
mk; rm "$tmp/d/train-labels-idx1-ubyte.gz"
expect "missing labels" "train-labels-idx1-ubyte" --data "$tmp/d"
mk; gzip -dc "$src/train-images-idx3-ubyte.gz" | head -c 1000000 > "$tmp/d/train-images-idx3-ubyte"; rm "$tmp/d/train-images-idx3-ubyte.gz"
expect "truncated images" "train-images-idx3-ubyte: truncated or corrupt" --data "$tmp/d"
mk; head -c 20000 "$src/t10k-images-idx3-ubyte.gz" > "$tmp/d/t10k-images-idx3-ubyte.gz"
expect "truncated gzip" "t10k-images-idx3-ubyte.gz: truncated or corrupt" --data "$tmp/d"
mk; printf 'not an idx file at all' | gzip > "$tmp/d/train-labels-idx1-ubyte.gz"
expect "wrong magic" "train-labels-idx1-ubyte.gz: not an IDX file" --data "$tmp/d"
mk; gzip -dc "$src/t10k-labels-idx1-ubyte.gz" | head -c 5008 | gzip > "$tmp/d/t10k-labels-idx1-ubyte.gz"
expect "label count" "t10k-labels-idx1-ubyte.gz: truncated or corrupt" --data "$tmp/d"
mk; gzip -dc "$src/t10k-labels-idx1-ubyte.gz" | python3 -c "import sys; d=bytearray(sys.stdin.buffer.read()); d[100]=42; sys.stdout.buffer.write(d)" | gzip > "$tmp/d/t10k-labels-idx1-ubyte.gz"
expect "label out of range" "label 42 is out of range" --data "$tmp/d"
expect "no such folder" "/nonexistent/data" --data /nonexistent/data

# Checkpoints: a resumed run continues exactly. The thread count is fixed:
# by default each run measures how many threads compute in parallel, which
# a busy machine can change between runs (and the sums' order with it).
"$tmp/mlp" --steps 40 --threads 1 --log-every 1 --quiet --save "$tmp/full.ckpt" --metrics "$tmp/full.json" > /dev/null || exit 1
"$tmp/mlp" --steps 20 --threads 1 --log-every 1 --quiet --save "$tmp/half.ckpt" > /dev/null || exit 1
"$tmp/mlp" --steps 40 --threads 1 --log-every 1 --quiet --resume "$tmp/half.ckpt" --save "$tmp/resumed.ckpt" --metrics "$tmp/resumed.json" > /dev/null || exit 1
grep '"type": "train"' "$tmp/full.json" | sed -n '21,40p' | grep -o '"loss": [^,]*' > "$tmp/a"
grep '"type": "train"' "$tmp/resumed.json" | grep -o '"loss": [^,]*' > "$tmp/b"
if cmp -s "$tmp/a" "$tmp/b" && cmp -s "$tmp/full.ckpt" "$tmp/resumed.ckpt"; then
  echo "ok: resuming at step 20 gives the same losses for steps 21-40 and the same final checkpoint"
else
  echo "FAIL: the resumed run differs"; diff "$tmp/a" "$tmp/b" | head; fail=1
fi
# Broken checkpoints.
head -c 3000 "$tmp/half.ckpt" > "$tmp/trunc.ckpt"
expect "truncated checkpoint" "trunc.ckpt: checksum mismatch" --resume "$tmp/trunc.ckpt"
python3 -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[5000]^=1; open(sys.argv[2],'wb').write(d)" "$tmp/half.ckpt" "$tmp/flip.ckpt"
expect "corrupt checkpoint" "flip.ckpt: checksum mismatch" --resume "$tmp/flip.ckpt"
printf 'garbage' > "$tmp/garbage.ckpt"
expect "not a checkpoint" "garbage.ckpt: not a kiln checkpoint" --resume "$tmp/garbage.ckpt"
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn" || exit 1
"$tmp/cnn" --steps 1 --quiet --save "$tmp/cnn.ckpt" --batch 8 > /dev/null 2>&1 || exit 1
expect "another model's checkpoint" "are not values of this model" --resume "$tmp/cnn.ckpt"
expect "missing checkpoint" "nothere.ckpt" --resume "$tmp/nothere.ckpt"
exit $fail
