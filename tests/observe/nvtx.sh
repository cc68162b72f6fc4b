#!/usr/bin/env bash
# NVTX ranges (runtime/observe/nvtx.c): a run under a stand-in injection library
# (tests/observe/nvtx_inject.c, loaded through NVTX_INJECTION64_PATH as Nsight
# Systems loads its own) reports "step N" ranges, the phases forward,
# backward and update, each kernel and GEMM by its ops and model-file
# line, data wait and evaluation; pushes and pops balance. Without a tool
# the same run trains to the same losses (the ranges change nothing).
# The ranges come from the executor, so this runs on the CPU backend.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
include=$2
enter_tmpdir
${CC:-cc} -shared -fPIC -O1 -I"$include" "$testdir/observe/nvtx_inject.c" -o libinject.so || { echo "FAIL: cannot build the injection library"; exit 1; }
build_example mlp
run=(--data synthetic:600 --threads 1 --steps 5 --log-every 1 --eval-every 0)
NVTX_INJECTION64_PATH=$tmp/libinject.so KILN_NVTX_LOG=$tmp/ranges.log ./mlp "${run[@]}" --metrics a.jsonl > out 2>&1 || { bad "run with the tool"; cat out; }
./mlp "${run[@]}" --metrics b.jsonl > /dev/null 2>&1 || bad "run without"
python3 - ranges.log <<'PY' && ok "ranges: $(grep -c '^push' ranges.log) pushes, balanced, with steps, phases, kernels, data wait" || bad "ranges (see above)"
import re, sys
lines = [l.rstrip("\n") for l in open(sys.argv[1])]
errs, depth, names = [], 0, []
for l in lines:
    if l.startswith("push "):
        depth += 1
        names.append(l[5:])
    elif l == "pop":
        depth -= 1
        if depth < 0:
            errs.append("pop without push")
if depth != 0:
    errs.append("%d ranges left open" % depth)
for want in ("step 1", "step 5", "forward", "backward", "update", "data wait"):
    if want not in names:
        errs.append("no range %r" % want)
# Kernels and GEMMs by ops and model-file location: "matmul @8:12 in dense.1".
if not any(re.search(r"@\d+:\d+", n) for n in names):
    errs.append("no range names a model-file line")
# The phases nest inside steps, kernels inside phases.
if names and names[0] != "step 1":
    errs.append("first range %r, not step 1" % names[0])
for e in errs:
    print("  " + e)
print("  e.g. " + ", ".join(n for n in names if "@" in n)[:150])
sys.exit(1 if errs else 0)
PY
a=$(grep -o '"loss": [^,]*' a.jsonl); b=$(grep -o '"loss": [^,]*' b.jsonl)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "the same losses with and without the tool" || bad "losses differ with the tool"
exit $fail
