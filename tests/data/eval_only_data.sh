#!/usr/bin/env bash
# --eval-only opens the test split alone: a data folder without its
# training files (IDX) or a train pattern with no shards there evaluates
# exactly as the full data set does (it used to load, or fail to load,
# the training set first). A test split whose samples do not fit the
# model is still refused (the model's input checks its size).
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
src=/usr/share/datasets/fashion-mnist
enter_tmpdir
build_example mlp
./mlp --threads 1 --quiet --steps 2 --eval-every 0 --save c.ckpt > /dev/null || exit 1
ev=(./mlp --threads 1 --eval-only --resume c.ckpt)
"${ev[@]}" > full.out 2>&1 || { bad "--eval-only on the full data"; cat full.out; }
mkdir testonly && ln -s "$src"/t10k-* testonly/
"${ev[@]}" --data "$tmp/testonly" > idx.out 2>&1 && cmp -s full.out idx.out &&
  ok "IDX without training files: $(cat idx.out)" || { bad "IDX without training files:"; cat idx.out; }
# A test split of 14 x 14 images: refused, naming it and its sample size.
mkdir small
python3 - small <<'PY'
import gzip, struct, sys
d = sys.argv[1]
with gzip.open(d + "/t10k-images-idx3-ubyte.gz", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 10, 14, 14) + bytes(10 * 196))
with gzip.open(d + "/t10k-labels-idx1-ubyte.gz", "wb") as f:
    f.write(struct.pack(">II", 0x801, 10) + bytes(10))
PY
expect_error "IDX test images of another size" "196" "${ev[@]}" --data "$tmp/small"
# Shards: the test pattern alone is there.
python3 "$testdir/data/make_shards.py" "$src" t10k test --count 300 --per-shard 200 > /dev/null || exit 1
sed 's#data      = idx("/usr/share/datasets/fashion-mnist")#data      = shards("train-{000000..000001}.tar", test = "test-{000000..000001}.tar", shuffle_buffer = 0)#' \
  "$testdir/../examples/mlp.kl" > m.kl
"$kiln" build m.kl -o m > /dev/null || exit 1
./m --threads 1 --eval-only --resume c.ckpt > shards.out 2>&1 && grep -qx 'eval  loss [0-9.]*  accuracy [0-9.]*  (300 samples)' shards.out &&
  ok "shards without training shards: $(cat shards.out)" || { bad "shards without training shards:"; cat shards.out; }
expect_error "training without them" "train-000000.tar: cannot open" ./m --threads 1 --steps 1
exit $fail
