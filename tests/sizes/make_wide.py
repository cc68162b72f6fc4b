#!/usr/bin/env python3
"""Writes wide.tar into a folder for tests/sizes/braces.sh: one sample
(key 000000) of 100,000 empty members 000000.f000000 ... 000000.f099999,
as raw ustar headers (tarfile takes seconds for 100,000 members)."""
import os
import sys


def header(name):
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"00000000000\0"
    h[136:148] = b"00000000000\0"
    h[148:156] = b"        "
    h[156] = ord("0")
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


with open(os.path.join(sys.argv[1], "wide.tar"), "wb") as f:
    f.write(b"".join(header(f"000000.f{i:06d}") for i in range(100000)))
    f.write(bytes(1024))
