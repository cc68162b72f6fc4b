#!/usr/bin/env python3
"""zero3's gathers in a plan (tests/ranks/zero/zero3.sh, plan).

  zero3_plan.py SCHEDULE.kir STEPS.txt TIMELINE.txt

SCHEDULE.kir: `kiln ir --after schedule` (program order); STEPS.txt and
TIMELINE.txt: `kiln ir --after memplan --format steps|timeline`. Checks:
  1. before use: each gathered param (%NAME.gathered, %NAME.gathered_bwd)
     is read only after its bucket's all_gather;
  2. just in time in forward: between a bucket's gather and its first
     reader no other bucket's gathered param is read;
  3. gathered again in backward: no backward node reads a forward
     gather's param;
  4. prefetch one bucket ahead in backward: each bucket's gather (but the
     first) comes before the first reader of the bucket backward reads
     before it, and after the first reader of the one before that;
  5. freed after use: every forward gather's buffer is dead before
     backward's first step, every backward one before the update's.
Prints what it checked; exits 1 with the broken rule.
"""
import re
import sys

LINE = re.compile(r"^  (?:(backward|update|startup) )?(?:%(\S+) : .*? = )?(\w+)\((.*?)\)")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def parse(path):
    """(line, phase, name, op, operands) per node; a node of a fusion group
    (one kernel) is at its group's first line."""
    nodes, start = [], {}
    with open(path) as f:
        for i, text in enumerate(f):
            m = LINE.match(text)
            if not m:
                continue
            group = re.search(r" group (\d+) ", text)
            at = start.setdefault(group.group(1), i) if group else i
            nodes.append((at, m.group(1) or "forward", m.group(2), m.group(3), re.findall(r"%([\w.]+)", m.group(4))))
    return nodes


def main():
    nodes = parse(sys.argv[1])
    defs = {n[2]: n for n in nodes if n[2]}
    gathers = {n[2]: n for n in nodes if n[3] == "all_gather" and n[2] and ".gathered" in n[2]}
    if not gathers:
        fail("no zero3 gathers in the plan")
    # The gathered params: slices and reshapes of a gather, and its bucket.
    bucket_of = {g: g for g in gathers}  # read whole (one member, no padding)
    for n in nodes:
        if n[3] in ("slice", "reshape") and n[4] and n[4][0] in bucket_of:
            bucket_of[n[2]] = bucket_of[n[4][0]]
    readers = {}
    for n in nodes:
        for v in n[4]:
            if v in bucket_of and n[2] not in bucket_of:
                readers.setdefault(v, []).append(n)
    first_read = {}
    for v, rs in readers.items():
        g = bucket_of[v]
        first_read[g] = min(first_read.get(g, 1 << 30), min(r[0] for r in rs))
        # 1. before use
        for r in rs:
            if r[0] < gathers[g][0]:
                fail(f"%{v} is read (line {r[0] + 1}) before its gather %{g} (line {gathers[g][0] + 1})")
            # 3. backward reads backward gathers
            if r[1] == "backward" and not g.endswith("_bwd"):
                fail(f"backward reads %{v}, forward's gather (line {r[0] + 1}): the params stay whole through the step")
    fwd = sorted((g for g in gathers if not g.endswith("_bwd") and g in first_read), key=lambda g: gathers[g][0])
    bwd = sorted((g for g in gathers if g.endswith("_bwd") and g in first_read), key=lambda g: first_read[g])
    if not bwd:
        fail("backward gathers nothing")
    # 2. just in time in forward
    for g in fwd:
        lo, hi = gathers[g][0], first_read[g]
        for v, rs in readers.items():
            if bucket_of[v] != g and any(lo < r[0] < hi for r in rs):
                fail(f"%{v} of another bucket is read between %{g} (line {lo + 1}) and its first reader (line {hi + 1}): "
                     "the gather is not just before its use")
    # 4. prefetch one bucket ahead
    for j in range(1, len(bwd)):
        at = gathers[bwd[j]][0]
        if at > first_read[bwd[j - 1]]:
            fail(f"%{bwd[j]} (line {at + 1}) comes after the first reader of %{bwd[j - 1]}: no prefetch")
        if j >= 2 and at < first_read[bwd[j - 2]]:
            fail(f"%{bwd[j]} (line {at + 1}) is gathered more than one bucket ahead")
    print(f"ok: {len(fwd)} forward gathers just before their readers, {len(bwd)} backward gathers one bucket ahead")
    # 5. freed after use (the memory plan's live steps)
    phase = {}
    with open(sys.argv[2]) as f:
        for text in f:
            m = re.match(r"^\s*(\d+) (\w+)", text)
            if m:
                phase[int(m.group(1))] = m.group(2)
    first_bwd = min(s for s, p in phase.items() if p == "backward")
    first_upd = min(s for s, p in phase.items() if p == "update")
    seen = 0
    with open(sys.argv[3]) as f:
        for text in f:
            m = re.match(r"^\s*\d+\s+\d+\s+(\d+)\.\.(\d+)\s+\S+\s+(.*)$", text)
            if not m or ".gathered" not in m.group(3):
                continue
            seen += 1
            lo, hi, name = int(m.group(1)), int(m.group(2)), m.group(3)
            if "_bwd" in name and not (first_bwd <= lo and hi < first_upd):
                fail(f"{name} lives over steps {lo}..{hi}, outside backward ({first_bwd}..{first_upd - 1})")
            if "_bwd" not in name and hi >= first_bwd:
                fail(f"{name} lives until step {hi}, into backward (from step {first_bwd}): not freed after forward")
    if not seen:
        fail("no gathered buffer in the memory plan's timeline")
    print(f"ok: {seen} gathered buffers in the arena, each freed in the phase that gathered it")


main()
