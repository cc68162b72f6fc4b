#!/usr/bin/env python3
"""Rewrites a Kiln checkpoint (runtime/ckpt/checkpoint.c, version 6, 5, 4, 3, 2 or 1) with crafted
content and a valid checksum, so that the loader's own checks are what
refuses it.

  ckpt_craft.py IN OUT step N            the run state's step
  ckpt_craft.py IN OUT dup NAME OTHER    NAME's entry twice, OTHER's gone
  ckpt_craft.py IN OUT bytes NAME DELTA  NAME's byte count (and data) +DELTA
  ckpt_craft.py IN OUT skipped N         the skipped-steps counter
  ckpt_craft.py IN OUT v1                version 1 (the step alone, no scaler state)
  ckpt_craft.py IN OUT v2                version 2 (no header strings, no roles)
  ckpt_craft.py IN OUT v3                version 3 (no lr schedule span)
  ckpt_craft.py IN OUT v4                version 4 (no config string)
  ckpt_craft.py IN OUT v5                version 5 (no evaluations' record)
  ckpt_craft.py IN OUT version N         the version field alone
  ckpt_craft.py IN OUT dtype NAME N      NAME's dtype field (version 3)
  ckpt_craft.py IN OUT rank NAME N       NAME's rank field (version 3; dims unchanged)
  ckpt_craft.py IN OUT nan NAME I        NAME's element I (f32) made a NaN
  ckpt_craft.py IN OUT value NAME I X    NAME's element I (f32) set to X (-1, inf, 1e-40)
  ckpt_craft.py IN OUT scale X           the run state's loss scale (versions 2 to 6)
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


def string(data, off):
    (n,) = struct.unpack_from("<I", data, off)
    return data[off + 4 : off + 4 + n].decode(), off + 4 + n


def parse(data):
    """The version, the header strings (version 3; the config, version 5), the entries as [name,
    head (up to the byte count), data] and the run state."""
    assert data[:8] == b"KILNCKPT", "not a kiln checkpoint"
    version, count = struct.unpack_from("<II", data, 8)
    assert version in (1, 2, 3, 4, 5, 6), version
    off, entries, header = 16, [], []
    if version >= 3:
        for _ in range(4 if version >= 5 else 3):
            s, off = string(data, off)
            header.append(s)
    for _ in range(count):
        start = off
        name, off = string(data, off)
        if version >= 3:
            _, off = string(data, off)
        _, rank = struct.unpack_from("<II", data, off)
        off += 8 + 8 * rank
        head = data[start:off]
        (nbytes,) = struct.unpack_from("<Q", data, off)
        off += 8
        entries.append([name, head, data[off : off + nbytes]])
        off += nbytes
    # Version 1 ends with the step alone.
    # Version 4 adds the lr schedule's span, version 6 the evaluations'
    # record (RECORD below).
    state = list(struct.unpack_from("<Qqqqd", data, off)) if version >= 2 else [struct.unpack_from("<Q", data, off)[0]]
    if version >= 4:
        state.append(struct.unpack_from("<Q", data, off + 40)[0])
    if version >= 6:
        state += list(struct.unpack_from(RECORD, data, off + 48))
    return version, header, entries, state


# best, best_epoch, watch_best, watch_epoch, watch_step, watch_bad, evals, watch_name
RECORD = "<dqdqqqqQ"


def pack_str(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def without_role(head):
    """An entry's head without its version 3 role."""
    name, off = string(head, 0)
    _, off2 = string(head, off)
    return head[:off] + head[off2:]


def write(path, version, header, entries, state):
    body = b"KILNCKPT" + struct.pack("<II", version, len(entries))
    if version >= 3:
        body += b"".join(pack_str(s) for s in header[:3])
    if version >= 5:
        body += pack_str(header[3] if len(header) > 3 else "")
    for _, head, blob in entries:
        body += head + struct.pack("<Q", len(blob)) + blob
    body += struct.pack("<Qqqqd", *state[:5]) if version >= 2 else struct.pack("<Q", state[0])
    if version >= 4:
        body += struct.pack("<Q", state[5] if len(state) > 5 else 0)
    if version >= 6:
        body += struct.pack(RECORD, *(state[6:14] if len(state) >= 14 else [0.0, 0, 0.0, 0, 0, 0, 0, 0]))
    open(path, "wb").write(body + struct.pack("<Q", fnv1a(body)))


def main():
    src, dst, op = sys.argv[1:4]
    args = sys.argv[4:]
    version, header, entries, state = parse(open(src, "rb").read())
    if op == "show":
        print(" ".join(str(x) for x in state))
        return
    if op == "step":
        state[0] = int(args[0]) & MASK
    elif op == "skipped":
        assert len(state) >= 5, "a version 1 checkpoint has no skipped count"
        state[2] = int(args[0])
    elif op in ("v1", "v2", "v3", "v4", "v5"):
        if version >= 3 and op in ("v1", "v2"):
            entries = [[n, without_role(h), b] for n, h, b in entries]
        version = int(op[1])
        state = state[:1] if version == 1 else state[:5] if version < 4 else state[:6]
    elif op == "dup":
        keep = [e for e in entries if e[0] == args[0]]
        assert keep and any(e[0] == args[1] for e in entries), args
        entries = [e for e in entries if e[0] != args[1]] + keep
    elif op == "bytes":
        delta = int(args[1])
        for e in entries:
            if e[0] == args[0]:
                e[2] = e[2] + b"\0" * delta if delta > 0 else e[2][: len(e[2]) + delta]
    elif op == "nan":
        for e in entries:
            if e[0] == args[0]:
                i = 4 * int(args[1])
                e[2] = e[2][:i] + struct.pack("<f", float("nan")) + e[2][i + 4 :]
    elif op == "value":
        for e in entries:
            if e[0] == args[0]:
                i = 4 * int(args[1])
                e[2] = e[2][:i] + struct.pack("<f", float(args[2])) + e[2][i + 4 :]
    elif op == "scale":
        assert len(state) >= 5, "a version 1 checkpoint has no loss scale"
        state[4] = float(args[0])
    elif op == "version":
        version = int(args[0])
    elif op in ("dtype", "rank"):
        assert version >= 3, "dtype and rank edit version 3 to 6 heads"
        for e in entries:
            if e[0] == args[0]:
                _, off = string(e[1], 0)
                _, off = string(e[1], off)
                off += 0 if op == "dtype" else 4
                e[1] = e[1][:off] + struct.pack("<I", int(args[1])) + e[1][off + 4 :]
    else:
        sys.exit("unknown operation " + op)
    write(dst, version, header, entries, state)


if __name__ == "__main__":
    main()
