#!/usr/bin/env python3
"""kiln plan's predicted step times against the measured ones
(bench/plan_validate.sh writes OUT/runs.tsv, one line per run, and
OUT/MODEL.planW.json; the measurement is the wall time of a step, the
median of the rounds, see there).

Prints a markdown table (model, world, layout, measured median and the
rounds' range, rank 0's CPU share and the load average during the runs,
predicted, predicted / measured, the measured collective time a step
against the predicted one, bound), Spearman's rank correlation of
predicted against measured (over all rows and per model; ties get
their mean rank) and the share of rows predicted within 25% of the
measurement.

    python3 bench/plan_validate.py OUT
"""
import json
import os
import statistics
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
    runs = {}
    order = []
    for line in open(os.path.join(out, "runs.tsv")):
        m, w, shard, P, sched, micro, acc, r, ms, cpu, load, cms, cexp = line.rstrip("\n").split("\t")
        key = (m, int(w), shard, int(P), sched, int(micro), int(acc))
        if key not in runs:
            runs[key] = []
            order.append(key)
        runs[key].append((float(ms), float(cpu), float(load), float(cms), float(cexp)))
    rows = []
    for key in order:
        m, w, shard, P, sched, micro, acc = key
        if (m, w) not in plans:
            plans[(m, w)] = json.load(open(os.path.join(out, f"{m}.plan{w}.json")))
        D = w // P
        found = None
        for l in plans[(m, w)]["layouts"]:
            if (l["T"] == 1 and l["P"] == P and l["D"] == D and l["micro"] == micro and l["accumulate"] == acc
                    and l["precision"] == "fp32" and (l["shard"] == shard or D == 1)
                    and (P == 1 or l["schedule"] == sched) and l.get("fits")):
                found = l
        if not found:
            print(f"no prediction for {m} world {w} {shard} P{P} {sched} {micro}x{acc}", file=sys.stderr)
            continue
        v = runs[key]
        ms = statistics.median(x[0] for x in v)
        lay = f"{shard} P{P}{' ' + sched if P > 1 else ''} {micro}x{acc}"
        comm = statistics.median(x[3] for x in v)
        pcomm = 1e3 * (found.get("exposed_intra_s", 0) + found.get("exposed_inter_s", 0))
        rows.append(dict(m=m, w=w, lay=lay, ms=ms, lo=min(x[0] for x in v), hi=max(x[0] for x in v),
                         cpu=statistics.median(x[1] for x in v), load=statistics.median(x[2] for x in v),
                         comm=comm, cexp=statistics.median(x[4] for x in v), pcomm=pcomm,
                         pr=found["step_s"] * 1e3, bound=found["bound"], n=len(v)))
    print("| model | ranks | layout | measured ms (median, range) | CPU share, load | predicted ms | predicted / measured "
          "| collectives ms: measured (exposed) / predicted exposed | bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        c = f"{r['comm']:.2f} ({r['cexp']:.2f}) / {r['pcomm']:.2f}" if r["w"] > 1 else "-"
        print(f"| {r['m']} | {r['w']} | {r['lay']} | {r['ms']:.1f} ({r['lo']:.1f}-{r['hi']:.1f}) | {r['cpu']:.0f}%, "
              f"{r['load']:.1f} | {r['pr']:.1f} | {r['pr'] / r['ms']:.2f} | {c} | {r['bound']} |")
    # Per term, for the rows with collectives: the step without the
    # collective time rank 0 waited for, measured and predicted (the
    # compute and host part), and the collectives themselves.
    multi = [r for r in rows if r["w"] > 1]
    if multi:
        print()
        print("| model | ranks | layout | step less exposed collectives: measured / predicted | ratio | "
              "collectives exposed: measured / predicted |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in multi:
            mc, pc = r["ms"] - r["cexp"], r["pr"] - r["pcomm"]
            print(f"| {r['m']} | {r['w']} | {r['lay']} | {mc:.1f} / {pc:.1f} | {pc / mc if mc > 0 else 0:.2f} | "
                  f"{r['cexp']:.2f} / {r['pcomm']:.2f} |")
        print()
    meas = [r["ms"] for r in rows]
    pred = [r["pr"] for r in rows]
    within = sum(1 for a, b in zip(meas, pred) if abs(b - a) <= 0.25 * a)
    print()
    print(f"{len(rows)} layouts (median of {min((r['n'] for r in rows), default=0)}-"
          f"{max((r['n'] for r in rows), default=0)} rounds): Spearman {spearman(pred, meas):.3f}; "
          f"within 25%: {within} of {len(rows)} ({100 * within / max(len(rows), 1):.0f}%)")
    for m in sorted({r["m"] for r in rows}):
        sub = [r for r in rows if r["m"] == m]
        a = [r["ms"] for r in sub]
        b = [r["pr"] for r in sub]
        win = sum(1 for x, y in zip(a, b) if abs(y - x) <= 0.25 * x)
        print(f"  {m}: {len(sub)} layouts, Spearman {spearman(b, a):.3f}, within 25%: {win} of {len(sub)}")
    for w in sorted({r["w"] for r in rows}):
        sub = [r for r in rows if r["w"] == w]
        ratios = sorted(r["pr"] / r["ms"] for r in sub)
        print(f"  {w} rank{'s' if w > 1 else ''}: {len(sub)} layouts, predicted / measured "
              f"{ratios[0]:.2f}-{ratios[-1]:.2f}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
