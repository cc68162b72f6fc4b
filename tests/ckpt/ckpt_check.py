#!/usr/bin/env python3
"""Checks of checkpoints and safetensors files for tests/ckpt_*.sh, against
Kiln's format as documented (parsed here independently of runtime/).

  ckpt_check.py same A B            every non-.lowp value and the step equal
  ckpt_check.py lowp A              each NAME.lowp is NAME rounded to bf16/f16
                                    (round to nearest even)
  ckpt_check.py export ST CKPT D    ST (read with the safetensors library)
                                    holds CKPT's params and running
                                    statistics, in dtype D (f32 or bf16),
                                    with its metadata
  ckpt_check.py write-st SRC OUT OP writes OUT with the safetensors library
                                    from SRC's tensors: OP is scale (x0.5),
                                    f16 (as float16), drop-extra (dense.3.w
                                    gone, head.w added), shape (dense.1.b
                                    one longer)
  ckpt_check.py init ST CKPT OP     CKPT (saved right after --init ST) holds
                                    ST's values (converted to f32); OP
                                    partial: all but dense.3.w
  ckpt_check.py predict NPY ACC     the .npy's records: pred = argmax(logits),
                                    mean(pred == label) = ACC (%.6g)
"""
import json
import struct
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from ckpt_craft import parse  # noqa: E402


def entries(path):
    version, header, ents, state = parse(open(path, "rb").read())
    out = {}
    for name, head, blob in ents:
        role = ""
        if version >= 3:
            n = struct.unpack_from("<I", head, 0)[0]
            rl = struct.unpack_from("<I", head, 4 + n)[0]
            role = head[8 + n : 8 + n + rl].decode()
            off = 8 + n + rl
        else:
            off = 4 + struct.unpack_from("<I", head, 0)[0]
        dt, rank = struct.unpack_from("<II", head, off)
        dims = struct.unpack_from("<%dq" % rank, head, off + 8)
        out[name] = (role, dt, dims, blob)
    return header, out, state


def round16(bits, kind):
    """f32 bits -> bf16 bits (round to nearest even); f16 via struct."""
    if kind == "bf16":
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    f = struct.unpack("<f", struct.pack("<I", bits))[0]
    return struct.unpack("<H", struct.pack("<e", f))[0]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def cmd_same(a, b):
    _, ea, sa = entries(a)
    _, eb, sb = entries(b)
    ka = {k for k in ea if not k.endswith(".lowp")}
    kb = {k for k in eb if not k.endswith(".lowp")}
    if ka != kb:
        fail("names differ: %s" % sorted(ka ^ kb))
    for k in sorted(ka):
        if ea[k][1:] != eb[k][1:]:
            fail("%s differs between %s and %s" % (k, a, b))
    if sa[0] != sb[0]:
        fail("steps differ: %s %s" % (sa[0], sb[0]))
    print("ok: %d values and the step (%d) equal" % (len(ka), sa[0]))


def cmd_lowp(a):
    _, e, _ = entries(a)
    n = 0
    for k, (role, dt, dims, blob) in e.items():
        if not k.endswith(".lowp"):
            continue
        kind = {4: "f16", 5: "bf16"}[dt]
        master = e[k[:-5]][3]
        bits = struct.unpack("<%dI" % (len(master) // 4), master)
        want = struct.pack("<%dH" % len(bits), *(round16(x, kind) for x in bits))
        if want != blob:
            fail("%s is not %s rounded to %s" % (k, k[:-5], kind))
        n += 1
    if not n:
        fail("no .lowp values in " + a)
    print("ok: %d low-precision copies are their masters rounded" % n)


def cmd_export(st, ckpt, dtype):
    from safetensors import safe_open

    header, e, state = entries(ckpt)
    want = {k: v for k, v in e.items() if v[0] in ("param", "state")}
    with safe_open(st, "np") as f:
        meta = f.metadata()
        keys = set(f.keys())
    if keys != set(want):
        fail("names: extra %s, missing %s" % (sorted(keys - set(want)), sorted(set(want) - keys)))
    expect = {"kiln.model": header[0], "kiln.step": str(state[0]), "kiln.version": header[2], "kiln.precision": header[1], "kiln.format": "1"}
    if meta != expect:
        fail("metadata %s, expected %s" % (meta, expect))
    if dtype == "f32":
        from safetensors.numpy import load_file

        got = load_file(st)
        for k, (role, dt, dims, blob) in want.items():
            a = got[k]
            if str(a.dtype) != "float32" or tuple(a.shape) != tuple(dims) or a.tobytes() != blob:
                fail("%s: %s %s differs from the checkpoint's f32 %s" % (k, a.dtype, a.shape, list(dims)))
    else:
        # numpy has no bf16: the library gives the layout, the bytes are
        # compared with the checkpoint's values rounded here.
        raw = open(st, "rb").read()
        (hl,) = struct.unpack_from("<Q", raw, 0)
        hdr = json.loads(raw[8 : 8 + hl])
        for k, (role, dt, dims, blob) in want.items():
            h = hdr[k]
            if h["dtype"] != "BF16" or h["shape"] != list(dims):
                fail("%s: %s %s" % (k, h["dtype"], h["shape"]))
            b, end = h["data_offsets"]
            data = raw[8 + hl + b : 8 + hl + end]
            bits = struct.unpack("<%dI" % (len(blob) // 4), blob)
            if data != struct.pack("<%dH" % len(bits), *(round16(x, "bf16") for x in bits)):
                fail("%s: the bf16 values are not the checkpoint's rounded" % k)
    print("ok: %s holds the checkpoint's %d model values (%s) and its metadata" % (st, len(want), dtype))


def cmd_write_st(src, out, op):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    t = load_file(src)
    if op == "scale":
        t = {k: (v * np.float32(0.5)).astype(np.float32) for k, v in t.items()}
    elif op == "f16":
        t = {k: v.astype(np.float16) for k, v in t.items()}
    elif op == "drop-extra":
        del t["dense.3.w"]
        t["head.w"] = np.ones((3, 4), np.float32)
    elif op == "shape":
        t["dense.1.b"] = np.zeros(t["dense.1.b"].shape[0] + 1, np.float32)
    save_file(t, out, metadata={"written_by": "safetensors " + __import__("safetensors").__version__})


def cmd_init(st, ckpt, op):
    import numpy as np
    from safetensors.numpy import load_file

    t = load_file(st)
    _, e, _ = entries(ckpt)
    n = 0
    for k, v in t.items():
        if k not in e:
            if op == "partial":
                continue
            fail("%s is not in the checkpoint" % k)
        want = v.astype(np.float32).tobytes()
        if e[k][3] != want:
            fail("%s: the checkpoint's values are not the file's" % k)
        n += 1
    print("ok: %d values came from %s exactly" % (n, st))


def cmd_predict(npy, acc):
    import numpy as np

    r = np.load(npy)
    if r.dtype.names != ("pred", "label", "logits"):
        fail("fields %s" % (r.dtype.names,))
    if not (r["logits"].argmax(axis=1) == r["pred"]).all():
        fail("pred is not the argmax of the logits")
    got = "%.6g" % float((r["pred"] == r["label"]).mean())
    if got != acc:
        fail("argmax accuracy %s, the evaluation's %s" % (got, acc))
    print("ok: %d predictions, argmax accuracy %s = the evaluation's" % (len(r), got))


if __name__ == "__main__":
    op, args = sys.argv[1], sys.argv[2:]
    {"same": cmd_same, "lowp": cmd_lowp, "export": cmd_export, "write-st": cmd_write_st, "init": cmd_init,
     "predict": cmd_predict}[op](*args)
