# A crafted checkpoint (runtime/ckpt/checkpoint.c's format, version 5) of
# 300,000 one-float entries named t0 ... t299999: OUT/many.ckpt.
import struct
import sys

F32 = 6  # ir/ir.h IR_DTYPES: none u8 i32 i64 f16 bf16 f32


def s(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def main(out):
    n = 300000
    parts = [b"KILNCKPT", struct.pack("<II", 5, n), s("mlp"), s("fp32"), s("0.1.0"), s("")]
    one = struct.pack("<IIqQf", F32, 1, 1, 4, 1.0)
    parts += [s("t%d" % i) + s("state") + one for i in range(n)]
    parts.append(struct.pack("<QqqqdQ", 0, 0, 0, 0, 1.0, 0))
    body = b"".join(parts)
    h = 0xCBF29CE484222325
    for byte in body:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    with open(out + "/many.ckpt", "wb") as f:
        f.write(body + struct.pack("<Q", h))


main(sys.argv[1])
