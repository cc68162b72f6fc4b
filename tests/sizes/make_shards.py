#!/usr/bin/env python3
"""Writes the crafted shards of tests/sizes/shards.sh into a folder:
ok.tar (16 good samples, KEY.png 28x28 gray and KEY.cls) and
npyover.tar (16 samples, KEY.feats.npy f32[4] and KEY.cls, the data of
tests/data/wds_mlp.kl) whose sample 3's .npy has a shape whose product
wraps int64 to 0 (2^32 x 2^32 f4, no data bytes)."""
import io
import os
import struct
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
from make_shards import png_gray  # noqa: E402


def npy(shape, data=b""):
    head = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (shape,)).ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + data


def write(path, change=None):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(16):
            m = [(f"{i:06d}.png", png_gray(bytes((i * 31 + p) % 256 for p in range(784)), 28, 28)),
                 (f"{i:06d}.cls", str(i % 10).encode())]
            for name, data in change(i, m) if change else m:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


d = sys.argv[1]
write(f"{d}/ok.tar")
write(f"{d}/npyover.tar", lambda i, m: [(f"{i:06d}.feats.npy", npy((1 << 32, 1 << 32)) if i == 3 else
                                           npy((4,), struct.pack("<4f", i, 1, 2, 3))), m[1]])
