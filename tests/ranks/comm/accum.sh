#!/usr/bin/env bash
# Collectives overlapped with backward under gradient accumulation
# (passes/schedule.c, passes/fusion.c): at the accumulation boundary each
# bucket's accumulators are written by a kernel of their own as soon as
# their gradients are ready, and the bucket's collective follows at once.
#  - the plan's steps (kiln ir --format steps), 2 ranks, accumulate 2,
#    64 KiB buckets, shard dp (all_reduce) and zero1 (reduce_scatter): the
#    first collective comes before the last gradient's matmul, right after
#    its bucket's grad_accumulate kernel; one grad_accumulate kernel per
#    collective; on one rank the accumulators stay one kernel;
#  - training, 2 ranks, accumulate 2 and 3: overlap on and off end with
#    bit-identical losses and checkpoints, and the same losses as one rank
#    with the same global batch (rtol 1e-5).
#   accum.sh KILN
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
source "$testdir/ranks/helpers.bash"

# order SHARD RANKS: the checks on the plan's steps.
order() {
  "$kiln" ir examples/mlp.kl --after memplan --format steps --ranks "$2" --set accumulate=2 --set bucket=64KiB \
    --set shard="$1" > "$tmp/steps.$1.$2.txt"
  python3 - "$tmp/steps.$1.$2.txt" "$1" "$2" <<'PY'
import re, sys
path, shard, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [re.match(r"\s*(\d+) (\w+)\s+(.*)", l).groups() for l in open(path) if l.strip()]
coll = "all_reduce" if shard == "dp" else "reduce_scatter"
acc = [i for i, (_, ph, w) in enumerate(steps) if w.startswith("grad_accumulate")]
if ranks == 1:
    if len(acc) != 1 or any(w.startswith(coll) for _, _, w in steps):
        sys.exit(f"FAIL: one rank: {len(acc)} grad_accumulate kernels (want 1, no collectives)")
    print(f"ok: one rank, {shard}: the accumulators in one kernel, as before")
    sys.exit(0)
colls = [i for i, (_, ph, w) in enumerate(steps) if w.startswith(coll)]
grads = [i for i, (_, ph, w) in enumerate(steps) if ph == "backward" and w.startswith("matmul")]
if not colls or not grads:
    sys.exit(f"FAIL: {shard}: no {coll} or no backward matmul in the steps")
if colls[0] > grads[-1]:
    sys.exit(f"FAIL: {shard}: the first {coll} is step {colls[0]}, after the last gradient's matmul (step {grads[-1]})")
if len(acc) != len(colls):
    sys.exit(f"FAIL: {shard}: {len(acc)} grad_accumulate kernels for {len(colls)} collectives")
for a, c in zip(acc, colls):
    between = [w for _, _, w in steps[a + 1:c]]
    if a > c or any(w.startswith(("matmul", "grad_accumulate")) for w in between):
        sys.exit(f"FAIL: {shard}: {coll} at step {c} does not follow its grad_accumulate (step {a}) at once: {between}")
print(f"ok: {shard}, {ranks} ranks: first {coll} at step {colls[0]}, before the last gradient's matmul (step {grads[-1]}); "
      f"{len(acc)} grad_accumulate kernels, each followed by its collective")
PY
}
order dp 2
order zero1 2
order dp 1

build mlp
small=(--batch 8 --bucket 64KiB)
for acc in 2 3; do
  ranks 2 on.$acc "$tmp/mlp" "${small[@]}" --accumulate $acc --overlap on
  ranks 2 off.$acc "$tmp/mlp" "${small[@]}" --accumulate $acc --overlap off
  compare losses "$tmp/on.$acc.json" "$tmp/off.$acc.json" 0 ||
    { echo "FAIL: accumulate $acc: the losses with overlap on and off differ"; exit 1; }
  cmp "$tmp/on.$acc.ckpt" "$tmp/off.$acc.ckpt" || { echo "FAIL: accumulate $acc: the checkpoints differ"; exit 1; }
  one one.$acc "$tmp/mlp" --batch 16 --bucket 64KiB --accumulate $acc
  compare losses "$tmp/on.$acc.json" "$tmp/one.$acc.json" 1e-5 ||
    { echo "FAIL: accumulate $acc: 2 ranks and one rank with the same global batch differ"; exit 1; }
  echo "ok: accumulate $acc, 2 ranks: overlap on and off bit-identical, and as one rank (batch 16)"
done
