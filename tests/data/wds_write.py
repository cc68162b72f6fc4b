#!/usr/bin/env python3
"""Writes shards with the webdataset library (ShardWriter, 40 samples a
shard) and prints what Kiln must read from them, in loader_check --dump's
form: one line per sample and field, "N FIELD TYPE VALUES...".

    wds_write.py OUT_DIR COUNT > expected.txt"""
import os
import sys

import numpy as np
import webdataset as wds

sys.path.insert(0, os.path.dirname(__file__))
from make_shards import png_gray  # noqa: E402

out, count = sys.argv[1], int(sys.argv[2])
with wds.ShardWriter(os.path.join(out, "wds-%06d.tar"), maxcount=40, verbose=0) as sink:
    for i in range(count):
        pixels = bytes((i * 13 + p * 7) % 256 for p in range(8 * 8))
        feats = np.array([i * 0.5 + k * 0.25 for k in range(4)], dtype=np.float32)
        sink.write({"__key__": f"s{i:05d}", "png": png_gray(pixels, 8, 8), "cls": i % 10, "feats.npy": feats})
        lines = [f"{i} png u8[1, 8, 8] " + " ".join(str(b) for b in pixels),
                 f"{i} cls i64 {i % 10}",
                 f"{i} feats.npy f32[4] " + " ".join(format(float(x), ".9g") for x in feats)]
        print("\n".join(sorted(lines)))
