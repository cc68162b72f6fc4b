#!/usr/bin/env bash
# Kiln's shards read by the Python webdataset library (installed from PyPI
# into the build folder by this test; skipped, status 77, only when PyPI
# cannot be reached): the same keys, images, labels and arrays as the
# inputs, with the shard list taken from the manifest's brace pattern.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
deps=$2
fm=/usr/share/datasets/fashion-mnist
if [ ! -e "$deps/.installed" ]; then
  if ! python3 -m pip install --quiet --disable-pip-version-check --target "$deps" webdataset pillow numpy > "$deps.log" 2>&1; then
    if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/webdataset/', timeout=15)" 2> /dev/null; then
      echo "SKIP: PyPI cannot be reached to install webdataset, pillow and numpy"
      exit 77
    fi
    echo "FAIL: pip install webdataset pillow numpy failed:"; tail -5 "$deps.log"; exit 1
  fi
  touch "$deps/.installed"
fi
export PYTHONPATH=$deps
new_tmpdir
"$kiln" pack --idx "$fm" --limit 600 --samples-per-shard 250 -o "$tmp/fm" > /dev/null || exit 1
python3 "$testdir/data/pack_check.py" make-npy "$tmp/npy" || exit 1
"$kiln" pack --npy x="$tmp/npy/train_x.npy" --npy cls="$tmp/npy/train_y.npy" --samples-per-shard 3 -o "$tmp/np" > /dev/null || exit 1
python3 - "$tmp" "$fm" <<'PY'
import gzip, json, os, struct, sys, warnings
import numpy as np
import webdataset as wds
warnings.simplefilter("ignore")
tmp, fm = sys.argv[1:]
def idx(path):
    d = gzip.decompress(open(path, "rb").read())
    r = d[3]
    dims = struct.unpack(">" + "I" * r, d[4:4 + 4 * r])
    return np.frombuffer(d[4 + 4 * r:], np.uint8).reshape(dims)
fail = 0
for split, prefix in (("train", "train"), ("test", "t10k")):
    images, labels = idx(f"{fm}/{prefix}-images-idx3-ubyte.gz"), idx(f"{fm}/{prefix}-labels-idx1-ubyte.gz")
    man = json.load(open(f"{tmp}/fm/manifest.json"))
    url = f"{tmp}/fm/" + man["splits"][split]["shards"]
    keys = []
    for s in wds.WebDataset(url, shardshuffle=False).decode("l8"):
        i = int(s["__key__"])
        keys.append(i)
        if not (s["png"].dtype == np.uint8 and np.array_equal(s["png"], images[i]) and s["cls"] == labels[i]):
            print(f"FAIL: webdataset {split} sample {i}: image or label differs from the IDX data"); fail = 1; break
    if keys != list(range(600)):
        print(f"FAIL: webdataset {split}: keys {keys[:5]}... ({len(keys)})"); fail = 1
    else:
        print(f"ok: webdataset + PIL read {url}: 600 samples, images and labels equal to the IDX data")
x, y = np.load(f"{tmp}/npy/train_x.npy"), np.load(f"{tmp}/npy/train_y.npy")
man = json.load(open(f"{tmp}/np/manifest.json"))
n = 0
for s in wds.WebDataset(f"{tmp}/np/" + man["splits"]["train"]["shards"], shardshuffle=False).decode():
    i = int(s["__key__"])
    n += 1
    if not (s["x.npy"].dtype == x.dtype and np.array_equal(s["x.npy"], x[i]) and s["cls"] == y[i]):
        print(f"FAIL: webdataset .npy sample {i} differs"); fail = 1
# And the bytes of each member are what np.save writes for the row.
import io, tarfile
with tarfile.open(f"{tmp}/np/train-000000.tar") as t:
    b = io.BytesIO(); np.save(b, x[0])
    if t.extractfile("000000.x.npy").read() != b.getvalue():
        print("FAIL: 000000.x.npy differs from np.save(x[0])"); fail = 1
if n == 10 and not fail:
    print("ok: webdataset + numpy read the .npy shards: 10 samples equal to the input rows and labels; members are np.save's bytes")
sys.exit(fail)
PY
