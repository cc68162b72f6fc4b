#!/usr/bin/env python3
"""Writes the broken shards of tests/data/bad_shards.sh into a folder:
each a shard of 16 samples (KEY.png 28x28 gray, KEY.cls) with one fault."""
import io
import os
import struct
import sys
import tarfile
import zlib

sys.path.insert(0, os.path.dirname(__file__))
from make_shards import png_gray  # noqa: E402


def png_rgb(h, w):
    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes((r * 7 + c) % 256 for c in range(3 * w)) for r in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def image(i, h=28, w=28):
    return png_gray(bytes((i * 31 + p) % 256 for p in range(h * w)), h, w)


def write(path, members):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def samples(change=None, n=16):
    """The members of n good samples; change(i, members) edits sample i's."""
    out = []
    for i in range(n):
        m = [(f"{i:06d}.png", image(i)), (f"{i:06d}.cls", str(i % 10).encode())]
        if change:
            m = change(i, m)
        out += m
    return out


def at(k, fn):
    return lambda i, m: fn(m) if i == k else m


d = sys.argv[1]
write(f"{d}/ok-000000.tar", samples())
write(f"{d}/badpng.tar", samples(at(3, lambda m: [(m[0][0], b"\x89PNG\r\n\x1a\nnot really a png"), m[1]])))
write(f"{d}/cutpng.tar", samples(at(3, lambda m: [(m[0][0], m[0][1][:len(m[0][1]) // 2]), m[1]])))
write(f"{d}/nocls.tar", samples(at(5, lambda m: m[:1])))
write(f"{d}/label42.tar", samples(at(4, lambda m: [m[0], (m[1][0], b"42")])))
write(f"{d}/negative.tar", samples(at(7, lambda m: [m[0], (m[1][0], b"-1")])))
write(f"{d}/clstext.tar", samples(at(2, lambda m: [m[0], (m[1][0], b"cat")])))
write(f"{d}/shape.tar", samples(at(6, lambda m: [(m[0][0], image(6, 30, 28)), m[1]])))
write(f"{d}/rgb.tar", samples(lambda i, m: [(m[0][0], png_rgb(28, 28)), m[1]]))
write(f"{d}/badjpg.tar", samples(lambda i, m: [(f"{i:06d}.jpg", b"\xff\xd8\xff\xe0 broken"), m[1]]))
write(f"{d}/nokey.tar", [("README", b"not a sample")] + samples())
write(f"{d}/dup.tar", samples(at(1, lambda m: [m[0], m[0], m[1]])))
write(f"{d}/pix.tar", samples(lambda i, m: [(f"{i:06d}.pix.png", m[0][1]), m[1]]))
npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + b"{'descr': '<f4', 'fortran_order': True, 'shape': (28, 28), }".ljust(117) + b"\n"
write(f"{d}/fortran.tar", samples(lambda i, m: [(f"{i:06d}.npy", npy + bytes(28 * 28 * 4)), m[1]]))
write(f"{d}/empty.tar", [])
with open(f"{d}/ok-000000.tar", "rb") as f:
    whole = f.read()
with open(f"{d}/trunc.tar", "wb") as f:
    f.write(whole[:len(whole) * 2 // 3 + 100])
with open(f"{d}/garbage.tar", "wb") as f:
    f.write(b"this is not a tar archive, only some text\n" * 40)
