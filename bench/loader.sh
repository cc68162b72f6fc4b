#!/usr/bin/env bash
# The shard loader's throughput against PyTorch's DataLoader + webdataset,
# in one run (issue 13, item 7):
#
#   - Fashion-MNIST's 60,000 training images packed as PNG shards
#     (kiln pack --idx, 6 shards of 10,000, classes mixed by --shuffle);
#   - 20,000 generated 3x32x32 JPEG images (an ImageFolder of 10 classes
#     written here with Pillow, quality 90) packed as 4 shards of 5,000
#     (kiln pack --images);
#
# each read and decoded into batches of 128 (shuffle buffer 1,000, two
# epochs, files in the page cache) by Kiln's loader alone
# (tests/data/loader_check.c --bench) and by torch.utils.data.DataLoader
# over webdataset.WebDataset(...).shuffle(1000).decode(...).batched(128)
# with the same number of workers (1 and 2; persistent workers); the
# ratio Kiln / PyTorch per set and worker count. Then the CNN trained from
# the PNG shards with 2 workers (--threads 1): the data wait as a share of
# the step time, streamed and with cache = memory.
#
#   bench/loader.sh [STEPS]
#
# Needs a built Kiln with its tests (cmake --build build). Python: the
# interpreter in $KILN_BENCH_PYTHON when set (one with torch, webdataset,
# Pillow and numpy), else a venv build/bench-venv made here: webdataset,
# Pillow and numpy from PyPI, torch from PyTorch's CPU index or, where
# that cannot be reached, from PyPI (large: the CUDA build and its
# libraries). Without torch the comparison is against webdataset in one
# Python process, and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
check=./build/tests/data_loader_check
kiln=./build/kiln
[ -x "$check" ] || { echo "build Kiln first: cmake -S . -B build && cmake --build build"; exit 1; }
py=${KILN_BENCH_PYTHON:-}
if [ -z "$py" ]; then
  py=build/bench-venv/bin/python
  if [ ! -x "$py" ]; then python3 -m venv build/bench-venv; fi
  "$py" -c "import webdataset, PIL, numpy" 2> /dev/null || "$py" -m pip install -q webdataset pillow numpy
  "$py" -c "import torch" 2> /dev/null ||
    "$py" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu 2> /dev/null ||
    "$py" -m pip install -q torch || echo "note: torch could not be installed; comparing with webdataset alone"
fi
if "$py" -c "import torch" 2> /dev/null; then torch=1; else torch=0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The data sets.
"$kiln" pack --idx /usr/share/datasets/fashion-mnist -o "$tmp/fm" --samples-per-shard 10000 --shuffle 1 > /dev/null
"$py" - "$tmp/img" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(1)
yy, xx = np.mgrid[0:32, 0:32]
for i in range(20000):
    c = i % 10
    # A smooth pattern per class (a JPEG of noise would be atypical), plus noise.
    base = 127 + 100 * np.sin((xx * (c + 1) + yy * (10 - c)) / 8.0 + rng.uniform(0, 6.28))
    img = np.stack([base, np.roll(base, c, 0), np.roll(base, c, 1)], -1) + rng.normal(0, 12, (32, 32, 3))
    d = f"{root}/class{c}"
    os.makedirs(d, exist_ok=True)
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(f"{d}/{i:05d}.jpg", quality=90)
PY
"$kiln" pack --images "$tmp/img" -o "$tmp/jpg" --samples-per-shard 5000 --shuffle 1 > /dev/null
png="$tmp/fm/train-{000000..000005}.tar"
jpg="$tmp/jpg/train-{000000..000003}.tar"
# One pass over the files first, so that every reader finds them in the page cache.
cat "$tmp"/fm/*.tar "$tmp"/jpg/*.tar > /dev/null

# Kiln's loader.
for set in png jpg; do
  pat=$png; [ $set = jpg ] && pat=$jpg
  for w in 1 2; do echo "kiln $set $("$check" --bench "$pat" 128 $w 0 2)"; done
done | tee "$tmp/kiln.txt"
echo "kiln png $("$check" --bench "$png" 128 2 1 3)"

# PyTorch's DataLoader + webdataset (or webdataset alone).
"$py" - "$png" "$jpg" "$torch" <<'PY' | tee "$tmp/torch.txt"
import sys, time
import numpy as np
import webdataset as wds
png, jpg, have_torch = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def dataset(pattern, ext, mode):
    return (wds.WebDataset(pattern, shardshuffle=False, empty_check=False).shuffle(1000)
            .decode(mode).to_tuple(ext, "cls").batched(128, partial=False))

for name, pattern, ext, mode in (("png", png, "png", "l8"), ("jpg", jpg, "jpg", "rgb8")):
    for w in (1, 2):
        if have_torch:
            import torch
            torch.set_num_threads(1)
            it = torch.utils.data.DataLoader(dataset(pattern, ext, mode), batch_size=None, num_workers=w,
                                             persistent_workers=True)
            what = f"torch DataLoader + webdataset, workers {w}"
        elif w == 1:
            it = dataset(pattern, ext, mode)
            what = "webdataset, one process"
        else:
            continue
        t0 = time.time(); n = 0
        for epoch in range(2):
            for imgs, cls in it:
                n += len(imgs)
        dt = time.time() - t0
        print(f"{name} {what}: {n / dt:.0f} samples/s ({n} samples, {dt:.2f} s)", flush=True)
        del it
PY
echo "ratios, Kiln's loader / the Python side, same workers:"
for set in png jpg; do
  for w in 1 2; do
    k=$(sed -n "s/^kiln $set workers $w, streamed: \([0-9]*\) samples.*/\1/p" "$tmp/kiln.txt")
    p=$(sed -n "s/^$set torch DataLoader + webdataset, workers $w: \([0-9]*\) samples.*/\1/p" "$tmp/torch.txt")
    [ -n "$p" ] || p=$(sed -n "s/^$set webdataset, one process: \([0-9]*\) samples.*/\1/p" "$tmp/torch.txt")
    [ -n "$p" ] && awk -v s=$set -v w=$w -v k="$k" -v p="$p" \
      'BEGIN { printf "  %s, %d worker%s: %.0f / %.0f = %.2fx\n", s, w, (w > 1 ? "s" : ""), k, p, k / p }'
  done
done

# The CNN from the PNG shards, 2 workers.
sed "s#data      = idx(\"/usr/share/datasets/fashion-mnist\")#data      = shards(\"$tmp/fm/train-{000000..000005}.tar\", workers = 2)#" \
  examples/fashion_cnn.kl > "$tmp/cnn.kl"
"$kiln" build "$tmp/cnn.kl" -o "$tmp/cnn" > /dev/null
for cache in none memory; do
  "$tmp/cnn" --threads 1 --steps "$steps" --eval-every 0 --log-every "$steps" \
    --set "data=shards(\"$png\", workers = 2, shuffle_buffer = 1000, cache = $cache)" > "$tmp/cnn.txt"
  line=$(grep '^done' "$tmp/cnn.txt")
  echo "CNN, cache = $cache: $line"
  echo "$line" | sed -n 's/.*steps \([0-9.]*\) s (.*data wait \([0-9.]*\) s).*/\1 \2/p' |
    awk '{ printf "  data wait: %.2f%% of the step time\n", 100 * $2 / $1 }'
done
