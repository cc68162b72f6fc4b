#!/usr/bin/env python3
"""kiln plan's predicted step times against the measured ones
(bench/plan_validate.sh writes OUT/results.tsv and OUT/MODEL.planW.json;
the measurement is the step on an otherwise idle machine, see there).

Prints a markdown table (model, world, layout, measured, predicted,
predicted / measured, bound), Spearman's rank correlation of predicted
against measured (over all rows and per model; ties get their mean rank)
and the share of rows predicted within 25% of the measurement.

    python3 bench/plan_validate.py OUT
"""
import json
import os
import sys


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def main():
    out = sys.argv[1]
    plans = {}
    rows = []
    for line in open(os.path.join(out, "results.tsv")):
        m, w, shard, P, sched, micro, acc, ms, wall, cpu = line.split("\t")
        w, P, micro, acc, ms, wall, cpu = int(w), int(P), int(micro), int(acc), float(ms), float(wall), float(cpu)
        key = (m, w)
        if key not in plans:
            plans[key] = json.load(open(os.path.join(out, f"{m}.plan{w}.json")))
        D = w // P
        found = None
        for l in plans[key]["layouts"]:
            if (l["T"] == 1 and l["P"] == P and l["D"] == D and l["micro"] == micro and l["accumulate"] == acc
                    and l["precision"] == "fp32" and (l["shard"] == shard or D == 1)
                    and (P == 1 or l["schedule"] == sched) and l.get("fits")):
                found = l
        if not found:
            print(f"no prediction for {m} world {w} {shard} P{P} {sched} {micro}x{acc}", file=sys.stderr)
            continue
        lay = f"{shard} P{P}{' ' + sched if P > 1 else ''} {micro}x{acc}"
        rows.append((m, w, lay, ms, found["step_s"] * 1e3, found["bound"], wall, cpu))
    print("| model | ranks | layout | measured ms (idle) | wall ms, CPU share | predicted ms | predicted / measured | bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for m, w, lay, ms, pr, bound, wall, cpu in rows:
        print(f"| {m} | {w} | {lay} | {ms:.1f} | {wall:.1f}, {cpu:.0f}% | {pr:.1f} | {pr / ms:.2f} | {bound} |")
    meas = [r[3] for r in rows]
    pred = [r[4] for r in rows]
    within = sum(1 for a, b in zip(meas, pred) if abs(b - a) <= 0.25 * a)
    print()
    print(f"{len(rows)} layouts: Spearman {spearman(pred, meas):.3f}; within 25%: {within} of {len(rows)} "
          f"({100 * within / max(len(rows), 1):.0f}%)")
    for m in sorted({r[0] for r in rows}):
        sub = [r for r in rows if r[0] == m]
        a = [r[3] for r in sub]
        b = [r[4] for r in sub]
        win = sum(1 for x, y in zip(a, b) if abs(y - x) <= 0.25 * x)
        print(f"  {m}: {len(sub)} layouts, Spearman {spearman(b, a):.3f}, within 25%: {win} of {len(sub)}")


if __name__ == "__main__":
    main()
