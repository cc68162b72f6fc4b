#!/usr/bin/env python3
"""Compares two training runs for the ranks tests (tests/ranks.sh).

  ranks_compare.py losses A.json B.json RTOL   the train records' losses (and
                                               skipped counts) step by step; B may
                                               start later (a resumed run)
  ranks_compare.py params A.ckpt B.ckpt RTOL [SKIP...]
                                               every f32 param and optimizer state of
                                               two checkpoints (but names holding a
                                               SKIP string)

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


def losses(a, b, rtol, *_):
    ra, rb = records(a), {r["step"]: r for r in records(b)}
    # B may be a resumed run: its steps must all be in A.
    if not rb or any(k not in {r["step"] for r in ra} for k in rb):
        print(f"{a} has steps {[r['step'] for r in ra]}, {b} has {sorted(rb)}")
        return 1
    pairs = [(x, rb[x["step"]]) for x in ra if x["step"] in rb]
    for x, y in pairs:
        if x["skipped"] != y["skipped"] or not close(x["loss"], y["loss"], rtol, 0):
            print(f"step {x['step']}: loss {x['loss']} skipped {x['skipped']} ({a}) against "
                  f"loss {y['loss']} skipped {y['skipped']} ({b})")
            return 1
    x, y = pairs[-1]
    print(f"{len(pairs)} losses agree within rtol {rtol}: step {x['step']} {x['loss']} and {y['loss']}, "
          f"skipped {x['skipped']}")
    return 0


def values(path):
    version, _, entries, _ = parse(open(path, "rb").read())
    out = {}
    for name, head, blob in entries:
        (n,) = struct.unpack_from("<I", head, 0)
        at = 4 + n
        if version == 3:  # the value's role follows its name
            (r,) = struct.unpack_from("<I", head, at)
            at += 4 + r
        (dt,) = struct.unpack_from("<I", head, at)
        # The runtime rewrites these before every step (the gradient
        # multiplier counts the ranks): not training state.
        if dt == F32 and name not in ("optimizer.hyper", "loss_scale"):
            out[name] = struct.unpack(f"<{len(blob) // 4}f", blob)
    return out


def params(a, b, rtol, *skip):
    va, vb = values(a), values(b)
    # Gradient accumulators exist only with accumulate > 1 (and hold the
    # last step's sums): the one-rank reference may accumulate where the
    # ranks do not.
    only = sorted(n for n in set(va) ^ set(vb) if not n.endswith(".grad_acc"))
    if only or not va:
        print(f"{a} and {b} hold different values: {only}")
        return 1
    va = {n: x for n, x in va.items() if n in vb and not n.endswith(".grad_acc") and not any(k in n for k in skip)}
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
    sys.exit({"losses": losses, "params": params}[op](a, b, rtol, *sys.argv[5:]))


if __name__ == "__main__":
    main()
