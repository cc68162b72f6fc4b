#!/usr/bin/env bash
# The bottleneck summary (runtime/observe/bottleneck.c) at the end of a --profile
# run and in kiln bench:
#  - its categories add up to the step's time and their shares to 100%;
#  - the GEMM/conv row's GFLOP/s x ms is the plan's GEMM FLOPs per step,
#    as kiln counters computes them without timing (an independent count);
#  - the verdict names the largest category (no input-bound or
#    launch-bound share here is asserted: that depends on the machine);
#  - kiln bench --json carries the same categories and a verdict.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
"$kiln" counters "$testdir/../examples/mlp.kl" --json > c.json || exit 1
./mlp --data synthetic:1200 --threads 1 --steps 8 --eval-every 0 --profile --quiet > out 2>&1 || { bad "--profile run"; cat out; }
sed -n '/^where the step/,/^verdict/p' out
python3 - out c.json <<'PY' && ok "--profile: categories add up; GEMM FLOPs agree with kiln counters; verdict names the top" || bad "--profile summary (see above)"
import json, re, sys
text = open(sys.argv[1]).read()
flops = json.load(open(sys.argv[2]))["counters"]["train.gemm_flops"]
errs = []
m = re.search(r"^where the step's time goes \(([0-9.]+) ms a step; peak: copy ([0-9.]+) GB/s, GEMM ([0-9.]+) GFLOP/s, measured\):$", text, re.M)
if not m:
    print("  no summary"); sys.exit(1)
step_ms = float(m.group(1))
rows = dict((r[0].strip(), (float(r[1]), float(r[2]), r[3])) for r in
            re.findall(r"^  ([a-zA-Z/ ]+?) +([0-9.]+) ms +([0-9.]+)%(.*)$", text, re.M))
want = ["GEMM/conv", "fused elementwise", "reductions/norms", "optimizer", "copies", "collectives", "data wait", "host overhead"]
if list(rows) != want:
    errs.append("rows %s" % list(rows))
else:
    total = sum(v[0] for v in rows.values())
    # Host overhead is what is left, so the rows add up to the step unless
    # the kernels alone took longer (then host overhead is 0).
    if rows["host overhead"][0] > 0 and abs(total - step_ms) > 0.001 * len(rows) + 1e-4 * step_ms:
        errs.append("rows add up to %.3f ms, the step is %.3f ms" % (total, step_ms))
    if rows["host overhead"][0] > 0 and abs(sum(v[1] for v in rows.values()) - 100) > 0.06 * len(rows):
        errs.append("shares add up to %.1f%%" % sum(v[1] for v in rows.values()))
    g = re.search(r"([0-9.]+) GFLOP/s", rows["GEMM/conv"][2])
    if not g:
        errs.append("no GEMM rate")
    else:
        per_step = float(g.group(1)) * 1e9 * rows["GEMM/conv"][0] / 1e3
        if abs(per_step / flops - 1) > 0.01 + 0.05 / float(g.group(1)) + 0.0005 / rows["GEMM/conv"][0]:
            errs.append("GEMM row: %.4g FLOP a step, kiln counters says %d" % (per_step, flops))
    top = max(want[:6], key=lambda k: rows[k][0])
    v = re.search(r"^verdict: (.*)$", text, re.M)
    verdict = v.group(1) if v else ""
    named = {"GEMM/conv": "compute-bound on GEMMs"}.get(top, "memory-bound in " + top)
    if not (verdict.startswith(named) or verdict.startswith(("input-bound", "launch-bound"))):
        errs.append("verdict %r, the largest row is %s" % (verdict, top))
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY
"$kiln" bench "$testdir/../examples/mlp.kl" --repeats 3 --threads 1 --json > b.json 2> b.err || { bad "kiln bench"; cat b.err; }
python3 - b.json c.json <<'PY' && ok "kiln bench --json: categories, GEMM FLOPs as kiln counters, a verdict" || bad "kiln bench bottleneck (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
flops = json.load(open(sys.argv[2]))["counters"]["train.gemm_flops"]
b = d["bottleneck"]
errs = []
if set(b) != {"GEMM/conv", "fused elementwise", "reductions/norms", "optimizer", "copies", "collectives", "data wait", "host overhead"}:
    errs.append("categories %s" % sorted(b))
if b["GEMM/conv"]["flops"] != flops:
    errs.append("GEMM flops %s, kiln counters %s" % (b["GEMM/conv"]["flops"], flops))
kernels = sum(v["ms"] for k, v in b.items() if k not in ("data wait", "host overhead"))
if abs(kernels - d["sum_of_steps_ms"]) > 1e-3:
    errs.append("categories %.4f ms, sum of steps %.4f ms" % (kernels, d["sum_of_steps_ms"]))
if b["host overhead"]["ms"] > 0 and abs(kernels + b["host overhead"]["ms"] - d["step_ms"]) > 1e-3:
    errs.append("with host overhead %.4f ms, the step %.4f ms" % (kernels + b["host overhead"]["ms"], d["step_ms"]))
if not d.get("verdict") or not d["gemm_peak_gflop_s"] > 0:
    errs.append("verdict %r, GEMM peak %r" % (d.get("verdict"), d.get("gemm_peak_gflop_s")))
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY
"$kiln" bench "$testdir/../examples/mlp.kl" --repeats 3 --threads 1 > b.txt 2>&1 && grep -q "^verdict: " b.txt && ok "kiln bench: $(grep '^verdict' b.txt)" || { bad "kiln bench text"; cat b.txt; }
exit $fail
