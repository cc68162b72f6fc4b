#!/usr/bin/env python3
"""Rewrites a Kiln checkpoint (runtime/checkpoint.c, version 2 or 1) with crafted
content and a valid checksum, so that the loader's own checks are what
refuses it.

  ckpt_craft.py IN OUT step N            the run state's step
  ckpt_craft.py IN OUT dup NAME OTHER    NAME's entry twice, OTHER's gone
  ckpt_craft.py IN OUT bytes NAME DELTA  NAME's byte count (and data) +DELTA
  ckpt_craft.py IN OUT skipped N         the skipped-steps counter
  ckpt_craft.py IN OUT v1                version 1 (the step alone, no scaler state)
  ckpt_craft.py IN OUT show              print the run state (no OUT written)
"""
import struct
import sys

MASK = (1 << 64) - 1


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def parse(data):
    """The entries as [name, head (up to the byte count), data] and the run state."""
    assert data[:8] == b"KILNCKPT", "not a kiln checkpoint"
    version, count = struct.unpack_from("<II", data, 8)
    assert version in (1, 2), version
    off, entries = 16, []
    for _ in range(count):
        start = off
        (n,) = struct.unpack_from("<I", data, off)
        name = data[off + 4 : off + 4 + n].decode()
        off += 4 + n
        _, rank = struct.unpack_from("<II", data, off)
        off += 8 + 8 * rank
        head = data[start:off]
        (nbytes,) = struct.unpack_from("<Q", data, off)
        off += 8
        entries.append([name, head, data[off : off + nbytes]])
        off += nbytes
    # Version 1 ends with the step alone.
    state = list(struct.unpack_from("<Qqqqd", data, off)) if version == 2 else [struct.unpack_from("<Q", data, off)[0]]
    return entries, state


def write(path, entries, state):
    version = 2 if len(state) == 5 else 1
    body = b"KILNCKPT" + struct.pack("<II", version, len(entries))
    for _, head, blob in entries:
        body += head + struct.pack("<Q", len(blob)) + blob
    body += struct.pack("<Qqqqd", *state) if version == 2 else struct.pack("<Q", state[0])
    open(path, "wb").write(body + struct.pack("<Q", fnv1a(body)))


def main():
    src, dst, op = sys.argv[1:4]
    args = sys.argv[4:]
    entries, state = parse(open(src, "rb").read())
    if op == "show":
        print(" ".join(str(x) for x in state))
        return
    if op == "step":
        state[0] = int(args[0]) & MASK
    elif op == "skipped":
        assert len(state) == 5, "a version 1 checkpoint has no skipped count"
        state[2] = int(args[0])
    elif op == "v1":
        state = state[:1]
    elif op == "dup":
        keep = [e for e in entries if e[0] == args[0]]
        assert keep and any(e[0] == args[1] for e in entries), args
        entries = [e for e in entries if e[0] != args[1]] + keep
    elif op == "bytes":
        delta = int(args[1])
        for e in entries:
            if e[0] == args[0]:
                e[2] = e[2] + b"\0" * delta if delta > 0 else e[2][: len(e[2]) + delta]
    else:
        sys.exit("unknown operation " + op)
    write(dst, entries, state)


if __name__ == "__main__":
    main()
