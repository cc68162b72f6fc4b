#!/usr/bin/env python3
"""Compares two training runs for the ranks tests (tests/ranks/data_parallel.sh).

  ranks_compare.py losses A.json B.json RTOL [scaled]
                                               the train records' losses (and
                                               skipped counts) step by step; B may
                                               start later (a resumed run); scaled:
                                               ATOL = RTOL * A's largest loss
  ranks_compare.py params A.ckpt B.ckpt RTOL [SKIP...]
                                               every f32 param and optimizer state of
                                               two checkpoints (but names holding a
                                               SKIP string)
  ranks_compare.py model A.ckpt B.ckpt RTOL [SKIP...]
                                               the params (no optimizer state) as one
                                               vector, normwise

Exit 0 when they agree within RTOL (losses and params: |a - b| <= RTOL *
max(|a|, |b|) + ATOL, ATOL = RTOL * the value's largest magnitude, for
elements near zero; model: ||a - b|| <= RTOL * max(||a||, ||b||) in the
2-norm), else 1 with the worst element named."""
import json
import math
import operator
import struct
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__) + "/../ckpt")
from ckpt_craft import parse  # noqa: E402

F32 = 6  # ir_dtype's order in ir/ir.h: none u8 i32 i64 f16 bf16 f32 f64


def records(path):
    return [r for r in (json.loads(line) for line in open(path)) if r.get("type") == "train"]


def close(a, b, rtol, scale):
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + rtol * scale


def losses(a, b, rtol, *how):
    ra, rb = records(a), {r["step"]: r for r in records(b)}
    scale = max((abs(r["loss"]) for r in ra), default=0.0) if "scaled" in how else 0.0
    # B may be a resumed run: its steps must all be in A.
    if not rb or any(k not in {r["step"] for r in ra} for k in rb):
        print(f"{a} has steps {[r['step'] for r in ra]}, {b} has {sorted(rb)}")
        return 1
    pairs = [(x, rb[x["step"]]) for x in ra if x["step"] in rb]
    worst = 0.0
    for x, y in pairs:
        if x["skipped"] != y["skipped"] or not close(x["loss"], y["loss"], rtol, scale):
            print(f"step {x['step']}: loss {x['loss']} skipped {x['skipped']} ({a}) against "
                  f"loss {y['loss']} skipped {y['skipped']} ({b}), rtol {rtol}")
            return 1
        top = max(abs(x["loss"]), abs(y["loss"])) + scale
        worst = max(worst, abs(x["loss"] - y["loss"]) / top if top else 0.0)
    x, y = pairs[-1]
    print(f"{len(pairs)} losses agree within rtol {rtol}{' of the loss and the largest loss' if scale else ''} "
          f"(largest difference {worst:.2e}): step {x['step']} "
          f"{x['loss']} and {y['loss']}, skipped {x['skipped']}")
    return 0


def values(path):
    version, _, entries, _ = parse(open(path, "rb").read())
    out = {}
    for name, head, blob in entries:
        (n,) = struct.unpack_from("<I", head, 0)
        at = 4 + n
        if version >= 3:  # the value's role follows its name
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
        scale = max(max(map(abs, x), default=0.0), max(map(abs, y), default=0.0))
        # The largest |a - b| at C speed (map, not a Python loop: 700 K
        # values a comparison); within rtol * scale, every element is
        # close. Otherwise each element as close() says, to name the first
        # that is not.
        diff = max(map(abs, map(operator.sub, x, y)), default=0.0)
        if not diff <= rtol * scale:
            for i, (p, q) in enumerate(zip(x, y)):
                if not close(p, q, rtol, scale):
                    print(f"{name}[{i}]: {p!r} ({a}) against {q!r} ({b}), rtol {rtol}")
                    return 1
        d = diff / scale if scale else 0.0
        if d > worst[0]:
            worst = (d, name)
    print(f"{len(va)} f32 values agree within rtol {rtol} (largest difference {worst[0]:.2e} of a value's magnitude, in {worst[1]})")
    return 0


def model(a, b, rtol, *skip):
    va, vb = values(a), values(b)
    # Params only: optimizer state carries a role suffix (.adam_m, ...).
    names = sorted(n for n in va if n in vb and "." + n.rsplit(".", 1)[-1] not in STATE and not any(k in n for k in skip))
    if not names or sorted(n for n in vb if n in names) != names:
        print(f"{a} and {b} hold no common params")
        return 1
    # Sums of squares per tensor, through map (C speed, not a Python loop).
    def squares(x):
        return sum(map(operator.mul, x, x))

    dd = {n: squares(list(map(operator.sub, va[n], vb[n]))) for n in names}
    d = math.sqrt(sum(dd.values()))
    na = math.sqrt(sum(squares(va[n]) for n in names))
    nb = math.sqrt(sum(squares(vb[n]) for n in names))
    ratio = d / max(na, nb) if max(na, nb) else 0.0
    # The tensor that contributes most to the difference, for the message.
    top = max(names, key=lambda n: dd[n])
    if not ratio <= rtol:
        print(f"params of {a} and {b}: ||a - b|| / ||a|| = {ratio:.2e} over rtol {rtol} (most in {top})")
        return 1
    print(f"{len(names)} params agree as one vector within rtol {rtol} (||a - b|| / ||a|| = {ratio:.2e}, most in {top})")
    return 0


# Optimizer state's suffixes (passes/optimizer.c), and accumulators.
STATE = (".adam_m", ".adam_v", ".momentum", ".grad_acc")


def main():
    op, a, b, rtol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    sys.exit({"losses": losses, "params": params, "model": model}[op](a, b, rtol, *sys.argv[5:]))


if __name__ == "__main__":
    main()
