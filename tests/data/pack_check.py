"""Reads kiln pack's output back with the standard library alone (tarfile,
zlib, json, struct) and compares it with the input, byte for byte:

  pack_check.py idx OUT IDXDIR LIMIT     every PNG decodes to the IDX pixels,
                                         every .cls is the IDX label
  pack_check.py images OUT ROOT          every member is its image file's
                                         bytes, labels by sorted class
  pack_check.py npy OUT SPLIT NAME=FILE...  every sample's .npy holds the
                                         input's row (header and bytes)
  pack_check.py tokens OUT TEXT VAL_FRACTION  the token files' header and
                                         tokens against the text's bytes

Every mode also checks the manifest's counts against the shards, that each
key appears once, and the tar headers (ustar, uid/gid 0, mtime 0)."""
import gzip
import json
import os
import struct
import sys
import tarfile
import zlib


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_split(out, name):
    """{key: {ext: bytes}} of a split, in stored order, checking tar headers."""
    man = json.load(open(os.path.join(out, "manifest.json")))
    split = man["splits"][name]
    samples = {}
    order = []
    total = 0
    for f in split["files"]:
        path = os.path.join(out, f["name"])
        if os.path.getsize(path) != f["bytes"]:
            fail(f"{path}: {os.path.getsize(path)} bytes, the manifest says {f['bytes']}")
        n = 0
        with tarfile.open(path, "r:") as t:
            for m in t.getmembers():
                if not m.isreg() or m.mtime != 0 or m.uid != 0 or m.gid != 0 or m.mode != 0o444:
                    fail(f"{path}: {m.name}: not a plain member with mtime/uid/gid 0 and mode 0444")
                key, ext = m.name.split(".", 1)
                if not order or key != order[-1]:
                    if key in samples:
                        fail(f"{path}: key {key} appears twice")
                    samples[key] = {}
                    order.append(key)
                    n += 1
                samples[key][ext] = t.extractfile(m).read()
        with open(path, "rb") as fh:
            head = fh.read(512)
        if head[257:263] != b"ustar\x00":
            fail(f"{path}: not a POSIX ustar archive")
        if n != f["samples"]:
            fail(f"{path}: {n} samples, the manifest says {f['samples']}")
        total += n
    if total != split["samples"] or len(samples) != total:
        fail(f"{name}: {total} samples in the shards, the manifest says {split['samples']}")
    return man, samples, order


def png_decode(data):
    """8-bit greyscale or RGB PNG -> (h, w, c, pixel bytes): chunks, zlib,
    and the five row filters of the PNG specification."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]:
            fail("PNG chunk CRC mismatch")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind not in (b"IEND",):
            fail(f"unexpected PNG chunk {kind}")
        pos += 12 + n
    w, h, depth, ctype = ihdr[:4]
    if depth != 8 or ctype not in (0, 2):
        fail(f"PNG depth {depth} type {ctype}")
    c = 1 if ctype == 0 else 3
    raw = zlib.decompress(idat)
    stride = w * c
    out = bytearray()
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - c] if i >= c else 0
            b = prev[i]
            cc = prev[i - c] if i >= c else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - cc
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else cc
                line[i] = (line[i] + pr) & 255
            elif f != 0:
                fail(f"PNG filter {f}")
        out += line
        prev = line
    return h, w, c, bytes(out)


def idx_read(path):
    data = open(path, "rb").read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    rank = data[3]
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return dims, data[4 + 4 * rank:]


def check_idx(out, src, limit):
    for split, prefix in (("train", "train"), ("test", "t10k")):
        (count, h, w), pixels = idx_read(os.path.join(src, prefix + "-images-idx3-ubyte.gz"))
        _, labels = idx_read(os.path.join(src, prefix + "-labels-idx1-ubyte.gz"))
        man, samples, order = read_split(out, split)
        n = min(count, limit)
        if sorted(samples) != [f"{i:06d}" for i in range(n)]:
            fail(f"{split}: keys are not 000000..{n - 1:06d}")
        for key, s in samples.items():
            i = int(key)
            if sorted(s) != ["cls", "png"]:
                fail(f"{split} {key}: members {sorted(s)}")
            ph, pw, pc, pix = png_decode(s["png"])
            if (ph, pw, pc) != (h, w, 1) or pix != pixels[i * h * w:(i + 1) * h * w]:
                fail(f"{split} {key}: the PNG does not decode to the IDX image")
            if s["cls"] != str(labels[i]).encode():
                fail(f"{split} {key}: label {s['cls']!r}, IDX has {labels[i]}")
        print(f"ok: {split}: {n} samples, every PNG decodes to the IDX pixels and every label matches"
              f" (stored order starts {' '.join(order[:4])})")
    if man["fields"]["png"]["shape"] != [28, 28, 1] or man["num_classes"] != 10:
        fail(f"manifest fields {man['fields']}")


def check_images(out, root):
    man = json.load(open(os.path.join(out, "manifest.json")))
    splits = [s for s in ("train", "val", "test") if os.path.isdir(os.path.join(root, s))] or [None]
    classes = sorted(c for c in os.listdir(os.path.join(root, splits[0] or "")) if not c.startswith("."))
    if man["class_names"] != classes:
        fail(f"class_names {man['class_names']}, expected {classes}")
    for split in splits:
        d = os.path.join(root, split) if split else root
        files = []
        for ci, c in enumerate(sorted(os.listdir(d))):
            for f in sorted(os.listdir(os.path.join(d, c))):
                files.append((os.path.join(d, c, f), classes.index(c)))
        _, samples, _ = read_split(out, split or "train")
        if len(samples) != len(files):
            fail(f"{split}: {len(samples)} samples for {len(files)} files")
        for i, (path, label) in enumerate(files):
            s = samples[f"{i:06d}"]
            ext = "png" if path.lower().endswith(".png") else "jpg"
            if s.get(ext) != open(path, "rb").read() or s.get("cls") != str(label).encode():
                fail(f"{split} {i:06d}: does not hold {path} as it is with label {label}")
        print(f"ok: {split or 'train'}: {len(files)} images stored as they are, labels by sorted class name")


def npy_parse(data):
    """(descr, shape, payload) of a .npy."""
    if data[:6] != b"\x93NUMPY":
        fail("not a .npy")
    if data[6] == 1:
        hl, off = struct.unpack("<H", data[8:10])[0], 10
    else:
        hl, off = struct.unpack("<I", data[8:12])[0], 12
    header = eval(data[off:off + hl].decode("latin1"))  # a Python dict literal, as numpy writes it
    if (off + hl) % 64:
        fail(".npy data not 64-byte aligned")
    return header["descr"], tuple(header["shape"]), data[off + hl:]


def check_npy(out, split, specs):
    _, samples, _ = read_split(out, split)
    for spec in specs:
        name, path = spec.split("=", 1)
        descr, shape, payload = npy_parse(open(path, "rb").read())
        item = int(descr[2:])
        per = item
        for d in shape[1:]:
            per *= d
        for i in range(shape[0]):
            s = samples[f"{i:06d}"]
            row = payload[i * per:(i + 1) * per]
            if name == "cls":
                want = str(int.from_bytes(row, "little", signed=descr[1] == "i")).encode()
                if s["cls"] != want:
                    fail(f"{split} {i}: cls {s['cls']!r}, expected {want!r}")
                continue
            d2, s2, p2 = npy_parse(s["npy" if name == "npy" else name + ".npy"])
            if d2 != descr or s2 != shape[1:] or p2 != row:
                fail(f"{split} {i}: {name}.npy is {d2} {s2}, expected {descr} {shape[1:]} and the input's row")
        print(f"ok: {split}: field {name}: {shape[0]} samples match {os.path.basename(path)} ({descr}, {shape[1:]})")


def fnv(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def check_tokens(out, text_path, frac):
    text = open(text_path, "rb").read()
    nval = int(len(text) * float(frac))
    parts = {"train": text[:len(text) - nval], "val": text[len(text) - nval:]}
    man = json.load(open(os.path.join(out, "manifest.json")))
    for name, want in parts.items():
        data = open(os.path.join(out, name + ".tok"), "rb").read()
        magic, version, dtype, count, vocab, checksum, reserved = struct.unpack("<8sIIQQQQ", data[:48])
        if (magic, version, dtype, count, vocab, reserved) != (b"KILNTOK\0", 1, 1, len(want), 256, 0):
            fail(f"{name}.tok: header {magic, version, dtype, count, vocab, reserved}")
        if checksum != fnv(want) or data[48:] != want:
            fail(f"{name}.tok: tokens or checksum differ from the text's bytes")
        if man["splits"][name]["tokens"] != len(want):
            fail(f"manifest: {name} tokens {man['splits'][name]['tokens']}")
        print(f"ok: {name}.tok: {len(want)} byte tokens, header and checksum as specified")


def png_encode(w, h, c, pixels):
    """A PNG with filter 0 rows (the reader above takes any filter)."""
    raw = b"".join(b"\0" + pixels[y * w * c:(y + 1) * w * c] for y in range(h))
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0 if c == 1 else 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def jpeg_header(w, h, c):
    """The start of a baseline JPEG (SOI, APP0, SOF0, EOI): what kiln pack
    reads of a JPEG; it stores the bytes as they are."""
    app0 = b"JFIF\0\1\1\0\0\1\0\1\0\0"
    sof = struct.pack(">BHHB", 8, h, w, c) + b"".join(bytes([i + 1, 0x11, 0]) for i in range(c))
    return (b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", len(app0) + 2) + app0
            + b"\xff\xc0" + struct.pack(">H", len(sof) + 2) + sof + b"\xff\xd9")


def make_images(root, split_tree):
    """Three classes (sorted order differs from creation order), PNG and JPEG."""
    for split in (["train", "test"] if split_tree else [""]):
        for ci, cls in enumerate(["zebra", "cat", "Dog"]):
            d = os.path.join(root, split, cls)
            os.makedirs(d, exist_ok=True)
            for k in range(2 if split == "test" else 3 + ci):
                px = bytes((ci * 50 + k * 7 + i) % 256 for i in range(6 * 5 * 3))
                if k % 2:
                    open(os.path.join(d, f"img{k}.jpeg"), "wb").write(jpeg_header(5, 6, 3) + px)
                else:
                    open(os.path.join(d, f"img{k}.png"), "wb").write(png_encode(5, 6, 3, px))


def npy_bytes(descr, shape, payload, version=1):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(header) + 1) % 64) % 64
    header = (header + " " * pad + "\n").encode()
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header + payload


def make_npy(d):
    """x: f32 [n, 3, 4], y: i64 [n] labels, for train (n = 10, a version 2
    header) and test (n = 4); and broken ones for the error cases."""
    os.makedirs(d, exist_ok=True)
    for split, n in (("train", 10), ("test", 4)):
        xs = struct.pack("<%df" % (n * 12), *[(i * 0.37 - 2.5) * (1 if split == "train" else -1) for i in range(n * 12)])
        open(os.path.join(d, f"{split}_x.npy"), "wb").write(npy_bytes("<f4", (n, 3, 4), xs, 2 if split == "train" else 1))
        ys = struct.pack("<%dq" % n, *[(i * 3) % 5 + (1 if i == 7 else 0) * 1000 for i in range(n)])
        open(os.path.join(d, f"{split}_y.npy"), "wb").write(npy_bytes("<i8", (n,), ys))
    open(os.path.join(d, "u8.npy"), "wb").write(npy_bytes("|u1", (10, 2), bytes(range(20))))
    open(os.path.join(d, "other_shape.npy"), "wb").write(npy_bytes("<f4", (4, 4, 3), bytes(4 * 48)))
    open(os.path.join(d, "nine.npy"), "wb").write(npy_bytes("<f4", (9, 3, 4), bytes(4 * 108)))
    open(os.path.join(d, "object.npy"), "wb").write(npy_bytes("|O", (10,), bytes(80)))
    open(os.path.join(d, "big.npy"), "wb").write(npy_bytes(">f4", (10, 2), bytes(80)))
    open(os.path.join(d, "fortran.npy"), "wb").write(npy_bytes("<f4", (10, 2), bytes(80)).replace(b"False", b"True "))
    open(os.path.join(d, "float_labels.npy"), "wb").write(npy_bytes("<f4", (10,), bytes(40)))
    whole = npy_bytes("<f4", (10, 3, 4), bytes(480))
    open(os.path.join(d, "truncated.npy"), "wb").write(whole[:-5])
    open(os.path.join(d, "negative_labels.npy"), "wb").write(npy_bytes("<i4", (3,), struct.pack("<3i", 0, 2, -1)))
    open(os.path.join(d, "scalar.npy"), "wb").write(npy_bytes("<f4", (), bytes(4)))


mode = sys.argv[1]
if mode == "make-images":
    make_images(sys.argv[2], sys.argv[3] == "split")
elif mode == "make-npy":
    make_npy(sys.argv[2])
elif mode == "idx":
    check_idx(sys.argv[2], sys.argv[3], int(sys.argv[4]))
elif mode == "images":
    check_images(sys.argv[2], sys.argv[3])
elif mode == "npy":
    check_npy(sys.argv[2], sys.argv[3], sys.argv[4:])
elif mode == "tokens":
    check_tokens(sys.argv[2], sys.argv[3], sys.argv[4])
else:
    fail(f"unknown mode {mode}")
