#!/usr/bin/env python3
"""Helpers of tests/gpu/run.sh: read what the stages wrote, compare, and
print the closing table. Standard library only.

    report.py losses CPU.json GPU.json BOUND   per-step losses of two runs (metrics JSON lines)
    report.py summary RUN.json KEY...          values of a run's summary line
    report.py bench BENCH.json                 kernels' share of copy bandwidth (kiln bench --json)
    report.py torch TORCH.json                 samples/s and ms/step of a PyTorch run
    report.py attention BENCH.json             the attention kernels' times (kiln bench --json)
    report.py table RESULTS.tsv                the table (stage, result, goal, verdict)
    report.py json RESULTS.tsv OUT.json [KEY=VALUE...]   the same rows as JSON, with KEY=VALUE beside them

Each subcommand prints `key<TAB>value` lines that run.sh appends to its
results file, and exits 1 when a check fails.
"""
import json
import math
import os
import sys


def json_lines(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def cmd_losses(cpu_path, gpu_path, bound):
    """The largest relative difference of per-step training losses."""
    bound = float(bound)
    a = {r["step"]: r["loss"] for r in json_lines(cpu_path) if r.get("type") == "train"}
    b = {r["step"]: r["loss"] for r in json_lines(gpu_path) if r.get("type") == "train"}
    steps = sorted(set(a) & set(b))
    if not steps:
        print("losses\tno common steps")
        return 1
    worst, at = 0.0, steps[0]
    for s in steps:
        x, y = a[s], b[s]
        if not (math.isfinite(x) and math.isfinite(y)):
            worst, at = float("inf"), s
            break
        d = abs(x - y) / max(abs(x), 1e-12)
        if d > worst:
            worst, at = d, s
    ok = worst <= bound
    print("steps\t%d" % len(steps))
    print("first_loss\t%.6g %.6g" % (a[steps[0]], b[steps[0]]))
    print("last_loss\t%.6g %.6g" % (a[steps[-1]], b[steps[-1]]))
    print("max_rel_diff\t%.3g (step %d, bound %g)" % (worst, at, bound))
    print("verdict\t%s" % ("ok" if ok else "FAIL"))
    return 0 if ok else 1


def cmd_summary(path, *keys):
    rows = [r for r in json_lines(path) if r.get("type") == "summary"]
    if not rows:
        print("summary\tmissing")
        return 1
    s = rows[-1]
    for k in keys:
        v = s.get(k)
        if v is None:  # final_<metric>: the metric's name varies
            v = next((s[x] for x in s if x.startswith(k)), None)
        print("%s\t%s" % (k, "n/a" if v is None else v))
    return 0


def kernel_kind(ops):
    """Which family a fused kernel belongs to, from its ops label."""
    o = ops.split(" @")[0]
    parts = [p.strip() for p in o.split("+")]
    if any(p.startswith("batchnorm") for p in parts):
        return "batchnorm"
    if any(p in ("matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight") for p in parts):
        return "conv"
    if any(p.startswith(("sum", "mean", "max", "softmax", "log_softmax", "cross_entropy", "accuracy", "layernorm",
                         "maxpool", "avgpool")) for p in parts):
        return "reduction"
    if any(p.endswith("_update") for p in parts):
        return "update"
    return "elementwise"


def cmd_bench(path):
    """Bytes-weighted share of the measured copy bandwidth, per family."""
    with open(path) as f:
        data = json.load(f)
    by = {}
    for s in data["steps"]:
        if s["kernel"].startswith("gemm"):
            continue
        k = kernel_kind(s["ops"])
        t, b = by.get(k, (0.0, 0))
        by[k] = (t + s["ms"], b + s["bytes"])
    bw = data["copy_gb_s"]
    print("copy_gb_s\t%.1f" % bw)
    for k in sorted(by):
        ms, b = by[k]
        gbs = b / ms / 1e6 if ms > 0 else 0
        print("share_%s\t%.0f%% (%.1f GB/s over %.2f ms)" % (k, 100 * gbs / bw if bw else 0, gbs, ms))
    ms, b = 0.0, 0
    for k in ("elementwise", "batchnorm"):
        if k in by:
            ms += by[k][0]
            b += by[k][1]
    share = (b / ms / 1e6) / bw if ms > 0 and bw else 0
    print("share_elementwise_batchnorm\t%.0f%%" % (100 * share))
    print("step_ms\t%.3f" % data["step_ms"])
    if "unfused_step_ms" in data:
        print("fusion_speedup\t%.2fx (%d fewer kernels)" % (data["speedup"], data["unfused_kernels"] - data["kernels"]))
    return 0


def cmd_attention(path):
    """Milliseconds per step of each attention kernel, and of the step."""
    with open(path) as f:
        data = json.load(f)
    by = {}
    for s in data["steps"]:
        op = s["ops"].split(" @")[0].strip()
        if op in ("attention", "attention_grad_q", "attention_grad_kv"):
            by[op] = by.get(op, 0.0) + s["ms"]
    if not by:
        print("attention\tno attention kernel in the bench")
        return 1
    for op in ("attention", "attention_grad_q", "attention_grad_kv"):
        print("%s_ms\t%.3f" % (op, by.get(op, 0.0)))
    print("attention_total_ms\t%.3f" % sum(by.values()))
    print("step_ms\t%.3f" % data["step_ms"])
    return 0


def cmd_torch(path):
    with open(path) as f:
        r = json.load(f)
    print("samples_per_s\t%.1f" % r["samples_per_s"])
    print("ms_per_step\t%.3f" % r["ms_per_step"])
    return 0


def read_rows(path):
    """stage<TAB>result[<TAB>goal<TAB>verdict] lines -> 4-tuples."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                rows.append((parts + ["", ""])[:4])
    return rows


def cmd_table(path):
    """The rows as one aligned table."""
    rows = read_rows(path)
    head = ("check", "result", "goal", "verdict")
    w = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
    line = lambda r: "| " + " | ".join(r[i].ljust(w[i]) for i in range(4)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    for r in rows:
        print(line(r))
    return 1 if any(r[3] == "FAIL" for r in rows) else 0


def cmd_json(path, out, *extra):
    """The rows as JSON (written under a temporary name, then renamed), and
    how many failed."""
    rows = read_rows(path)
    doc = dict(kv.split("=", 1) for kv in extra)
    doc["failures"] = sum(r[3] == "FAIL" for r in rows)
    doc["rows"] = [dict(zip(("check", "result", "goal", "verdict"), r)) for r in rows]
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(out + ".tmp", out)
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    return {"losses": cmd_losses, "summary": cmd_summary, "bench": cmd_bench, "attention": cmd_attention, "torch": cmd_torch,
            "table": cmd_table, "json": cmd_json}[cmd](*args)


if __name__ == "__main__":
    sys.exit(main())
