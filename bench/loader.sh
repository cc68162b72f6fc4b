#!/usr/bin/env bash
# The shard loader's throughput, in one run: Fashion-MNIST's 60,000
# training images as PNG shards (tests/data/make_shards.py, 6 shards of
# 10,000), read and decoded by Kiln's loader alone with 1 and 2 workers
# (streamed, and cache = memory), against the webdataset library decoding
# the same shards with Pillow in one Python process (PyTorch's DataLoader
# is not installed here); then the CNN trained from the shards with 2
# workers: the data wait as a share of the step time.
#
#   bench/loader.sh [STEPS]
#
# Needs a built Kiln with its tests (cmake --build build); installs
# webdataset and Pillow with pip into build/pydeps when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
check=./build/tests/data_loader_check
[ -x "$check" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
export PYTHONPATH=$PWD/build/pydeps
python3 -c "import webdataset, PIL" 2> /dev/null || python3 -m pip install -q --target build/pydeps webdataset pillow
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tests/data/make_shards.py /usr/share/datasets/fashion-mnist train "$tmp/train" --per-shard 10000
python3 tests/data/make_shards.py /usr/share/datasets/fashion-mnist t10k "$tmp/test" --per-shard 10000
pattern="$tmp/train-{000000..000005}.tar"
# One pass over the files first, so that every reader finds them in the page cache.
cat "$tmp"/*.tar > /dev/null
for w in 1 2; do "$check" --bench "$pattern" 128 $w 0 2; done | tee "$tmp/kiln.txt"
"$check" --bench "$pattern" 128 2 1 3
python3 - "$tmp" <<'PY' | tee "$tmp/wds.txt"
import sys, time
import numpy as np
import webdataset as wds
tmp = sys.argv[1]
ds = wds.WebDataset(f"{tmp}/train-{{000000..000005}}.tar", shardshuffle=False).shuffle(1000).decode("l8").to_tuple("png", "cls")
t0 = time.time(); n = 0; batch = []
for img, cls in ds:
    batch.append(img)
    if len(batch) == 128:
        np.stack(batch); n += 128; batch = []
dt = time.time() - t0
print(f"webdataset + Pillow, one process: {n / dt:.0f} samples/s ({n} samples, {dt:.2f} s)")
PY
k1=$(sed -n 's/^workers 1, streamed: \([0-9]*\) samples.*/\1/p' "$tmp/kiln.txt")
py=$(sed -n 's/.*one process: \([0-9]*\) samples.*/\1/p' "$tmp/wds.txt")
awk -v k="$k1" -v p="$py" 'BEGIN { printf "ratio, Kiln 1 worker / webdataset one process: %.2fx\n", k / p }'
sed 's#data      = idx("/usr/share/datasets/fashion-mnist")#data      = shards("train-{000000..000005}.tar", test = "test-000000.tar", workers = 2)#' \
  examples/fashion_cnn.kl > "$tmp/cnn.kl"
./build/kiln build "$tmp/cnn.kl" -o "$tmp/cnn"
for cache in none memory; do
  "$tmp/cnn" --steps "$steps" --eval-every 0 --log-every "$steps" --set "data=shards(\"$pattern\", workers = 2, cache = $cache)" \
    --metrics "$tmp/cnn.json" > "$tmp/cnn.txt"
  line=$(grep '^done' "$tmp/cnn.txt")
  echo "CNN, cache = $cache: $line"
  echo "$line" | sed -n 's/.*steps \([0-9.]*\) s (.*data wait \([0-9.]*\) s).*/\1 \2/p' |
    awk '{ printf "  data wait: %.2f%% of the step time\n", 100 * $2 / $1 }'
done
