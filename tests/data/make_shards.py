#!/usr/bin/env python3
"""Writes Fashion-MNIST (IDX, gzip) as WebDataset tar shards with the
standard library alone: each sample KEY.png (8-bit gray, written with
zlib) and KEY.cls (the label as text), in the IDX order.

    make_shards.py IDX_DIR SPLIT OUT_PREFIX --count N --per-shard M

(--number-labels: each .cls is the sample's number, for the loader's
checks) writes OUT_PREFIX-000000.tar, OUT_PREFIX-000001.tar, ... holding the first
N samples of SPLIT ("train" or "t10k"), M per shard."""
import argparse
import gzip
import io
import struct
import tarfile
import zlib


def png_gray(pixels, h, w):
    """An 8-bit grayscale PNG of h rows of w bytes."""
    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + pixels[r * w:(r + 1) * w] for r in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("idx_dir")
    ap.add_argument("split")
    ap.add_argument("prefix")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--per-shard", type=int, default=1000)
    ap.add_argument("--number-labels", action="store_true", help="each .cls is the sample's number, not its class")
    a = ap.parse_args()
    (n, h, w), pixels = read_idx(f"{a.idx_dir}/{a.split}-images-idx3-ubyte.gz")
    _, labels = read_idx(f"{a.idx_dir}/{a.split}-labels-idx1-ubyte.gz")
    n = min(n, a.count) if a.count else n
    shard = None
    for i in range(n):
        if i % a.per_shard == 0:
            if shard:
                shard.close()
            shard = tarfile.open(f"{a.prefix}-{i // a.per_shard:06d}.tar", "w", format=tarfile.USTAR_FORMAT)
        key = f"{i:06d}"
        add(shard, key + ".png", png_gray(pixels[i * h * w:(i + 1) * h * w], h, w))
        add(shard, key + ".cls", str(i if a.number_labels else labels[i]).encode())
    shard.close()


if __name__ == "__main__":
    main()
