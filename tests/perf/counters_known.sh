#!/usr/bin/env bash
# kiln counters against numbers worked out by hand for examples/mlp.kl
# (784-256-128-10, u8 images, i32 labels, AdamW):
#  - GEMM FLOPs: evaluation 2 B (784*256 + 256*128 + 128*10); training adds
#    every weight gradient and the input gradients of the two upper layers;
#  - host -> device: the batch's image bytes (B*784) and labels (4 B);
#  - persistent: the 235,146 fp32 params in evaluation;
#  - accumulate=2 doubles the GEMMs and the copies per optimizer step;
#  - --no-fusion: one launch per op, more than fused.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
mlp=$(cd "$(dirname "$0")/../.." && pwd)/examples/mlp.kl
new_tmpdir
"$kiln" counters "$mlp" --batch 32 --json > "$tmp/a.json" || exit 1
"$kiln" counters "$mlp" --batch 32 --set accumulate=2 --json > "$tmp/b.json" || exit 1
"$kiln" counters "$mlp" --batch 32 --no-fusion --json > "$tmp/c.json" || exit 1
python3 - "$tmp/a.json" "$tmp/b.json" "$tmp/c.json" <<'PY'
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:4])
A, B, C = a["counters"], b["counters"], c["counters"]
n = 32
fwd = 784 * 256 + 256 * 128 + 128 * 10
params = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10
want = {
    "eval.gemm_flops": 2 * n * fwd,
    "train.gemm_flops": 2 * n * (2 * fwd + 256 * 128 + 128 * 10),
    "eval.gemm_calls": 3,
    "train.gemm_calls": 8,
    "train.h2d_bytes": n * 784 + 4 * n,
    "eval.h2d_bytes": n * 784 + 4 * n,
    "eval.persistent_bytes": 4 * params,
    "eval.d2h_bytes": 8,
}
errs = ["%s: %s, expected %s" % (k, A[k], v) for k, v in want.items() if A[k] != v]
if a["batch"] != n or a["precision"] != "fp32":
    errs.append("batch %s precision %s" % (a["batch"], a["precision"]))
# accumulate 2: forward and backward twice per optimizer step.
for k in ("train.gemm_flops", "train.gemm_calls", "train.h2d_bytes", "train.d2h_bytes"):
    if B[k] != 2 * A[k]:
        errs.append("accumulate=2: %s %s, expected 2 x %s" % (k, B[k], A[k]))
if B["train.arena_bytes"] < A["train.arena_bytes"] or B["train.persistent_bytes"] < A["train.persistent_bytes"]:
    errs.append("accumulate=2: memory below accumulate=1's")
if not C["train.launches"] > A["train.launches"] or C["train.gemm_flops"] != A["train.gemm_flops"]:
    errs.append("--no-fusion: launches %s vs %s, flops %s vs %s" % (C["train.launches"], A["train.launches"], C["train.gemm_flops"], A["train.gemm_flops"]))
for e in errs:
    print("FAIL: " + e)
if not errs:
    print("ok: mlp counters as worked out by hand (%d GEMM FLOPs a step at batch %d)" % (A["train.gemm_flops"], n))
sys.exit(1 if errs else 0)
PY
