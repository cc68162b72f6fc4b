#!/usr/bin/env python3
"""The expected output of loader_check --dump-augmented on shards made by
make_shards.py from Fashion-MNIST's first N training images, computed
independently: the sample's random crop (pad 4) and flip drawn as
runtime/data/wds_data.c's kl_augment_apply documents (seed 7, epoch 3), then
(x / 255 - 0.5) / 0.25 rounded to f32.

    augment_ref.py IDX_DIR N"""
import gzip
import struct
import sys

M = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


idx_dir, n = sys.argv[1], int(sys.argv[2])
with gzip.open(f"{idx_dir}/train-images-idx3-ubyte.gz") as f:
    data = f.read()
with gzip.open(f"{idx_dir}/train-labels-idx1-ubyte.gz") as f:
    labels = f.read()[8:]
H = W = 28
P = 4
seed, epoch = 7, 3
for i in range(n):
    img = data[16 + i * H * W:16 + (i + 1) * H * W]
    r = mix(seed ^ mix(epoch + 1) ^ mix(0xA5A5 + i))
    dy, dx, flip = r % (2 * P + 1), (r >> 20) % (2 * P + 1), (r >> 50) & 1
    out = []
    for y in range(H):
        for x in range(W):
            sy, sx = y + dy - P, (W - 1 - x if flip else x) + dx - P
            v = img[sy * W + sx] if 0 <= sy < H and 0 <= sx < W else 0
            out.append(format(f32((v / 255.0 - 0.5) / 0.25), ".9g"))
    print(f"{i} cls i64 {labels[i]}")
    print(f"{i} png f32[1, 28, 28] " + " ".join(out))
