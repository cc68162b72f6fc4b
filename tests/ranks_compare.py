#!/usr/bin/env python3
"""Compares two training runs for the ranks tests (tests/ranks.sh).

  ranks_compare.py losses A.json B.json RTOL   the train records' losses (and
                                               skipped counts) step by step
  ranks_compare.py params A.ckpt B.ckpt RTOL   every f32 param and optimizer state of
                                               two checkpoints

Exit 0 when they agree within RTOL (|a - b| <= RTOL * max(|a|, |b|) + ATOL,
ATOL = RTOL * the value's largest magnitude, for elements near zero), else 1
with the worst element named."""
import json
import struct
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from ckpt_craft import parse  # noqa: E402

F32 = 6  # ir_dtype's order in ir/ir.h: none u8 i32 i64 f16 bf16 f32 f64


def records(path):
    return [r for r in (json.loads(line) for line in open(path)) if r.get("type") == "train"]


def close(a, b, rtol, scale):
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + rtol * scale


def losses(a, b, rtol):
    ra, rb = records(a), records(b)
    if len(ra) != len(rb) or not ra:
        print(f"{a}: {len(ra)} train records, {b}: {len(rb)}")
        return 1
    for x, y in zip(ra, rb):
        if x["step"] != y["step"] or x["skipped"] != y["skipped"] or not close(x["loss"], y["loss"], rtol, 0):
            print(f"step {x['step']}: loss {x['loss']} skipped {x['skipped']} ({a}) against "
                  f"step {y['step']}: loss {y['loss']} skipped {y['skipped']} ({b})")
            return 1
    print(f"{len(ra)} losses agree within rtol {rtol}: last {ra[-1]['loss']} and {rb[-1]['loss']}, "
          f"skipped {ra[-1]['skipped']}")
    return 0


def values(path):
    entries, _ = parse(open(path, "rb").read())
    out = {}
    for name, head, blob in entries:
        (n,) = struct.unpack_from("<I", head, 0)
        (dt,) = struct.unpack_from("<I", head, 4 + n)
        # The runtime rewrites these before every step (the gradient
        # multiplier counts the ranks): not training state.
        if dt == F32 and name not in ("optimizer.hyper", "loss_scale"):
            out[name] = struct.unpack(f"<{len(blob) // 4}f", blob)
    return out


def params(a, b, rtol):
    va, vb = values(a), values(b)
    if sorted(va) != sorted(vb) or not va:
        print(f"{a} and {b} hold different values: {sorted(va)} against {sorted(vb)}")
        return 1
    worst = (0.0, None)
    for name in sorted(va):
        x, y = va[name], vb[name]
        scale = max(max(abs(t) for t in x), max(abs(t) for t in y))
        for i, (p, q) in enumerate(zip(x, y)):
            if not close(p, q, rtol, scale):
                print(f"{name}[{i}]: {p!r} ({a}) against {q!r} ({b}), rtol {rtol}")
                return 1
            d = abs(p - q) / scale if scale else 0.0
            if d > worst[0]:
                worst = (d, name)
    print(f"{len(va)} f32 values agree within rtol {rtol} (largest difference {worst[0]:.2e} of a value's magnitude, in {worst[1]})")
    return 0


def main():
    op, a, b, rtol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    sys.exit({"losses": losses, "params": params}[op](a, b, rtol))


if __name__ == "__main__":
    main()
