#!/usr/bin/env bash
# Collectives overlapped with backward (README, "Many ranks", overlap):
# the communication thread against the synchronous path.
#
#   overlap.sh KILN CASE   CASE: same | trace | fault
#
# same:  --overlap on and off end with bit-identical losses (every step's)
#        and checkpoints (params and optimizer state) on 2 and 3 ranks,
#        shard dp and zero1, accumulate 2; on 2 ranks without
#        accumulation (collectives posted while backward goes on), mlp
#        and fashion_cnn; 64 KiB buckets (16 KiB for the cnn): several
#        collectives per step.
# trace: the Chrome trace has a communication track (its own tid) with
#        each collective's span, every track's spans nest, and each
#        collective lies inside its optimizer step.
# fault: a collective that fails on the communication thread of rank 1
#        (KILN_FAULT_COLLECTIVE) ends every rank with an error naming the
#        rank and the op, well before mpirun's timeout.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"
build mlp
small=(--batch 8 --bucket 64KiB --steps 8)

case $case_ in
same)
  # pair NP WHAT EXE ARGS...: on and off, bit-identical.
  pair() {
    local np=$1 what=$2 exe=$3; shift 3
    ranks "$np" on "$exe" "$@" --overlap on
    ranks "$np" off "$exe" "$@" --overlap off
    grep -q '"overlap": true' "$tmp/on.json" && grep -q '"overlap": false' "$tmp/off.json" ||
      { echo "FAIL: $what: the summaries do not say overlap on and off"; exit 1; }
    compare losses "$tmp/on.json" "$tmp/off.json" 0 ||
      { echo "FAIL: $what: the losses with overlap on and off differ"; exit 1; }
    cmp "$tmp/on.ckpt" "$tmp/off.ckpt" ||
      { echo "FAIL: $what: the checkpoints with overlap on and off differ"; exit 1; }
    echo "ok: $what: overlap on and off bit-identical"
  }
  for np in 2 3; do
    for shard in dp zero1; do
      pair "$np" "$np ranks, shard $shard, accumulate 2" "$tmp/mlp" "${small[@]}" --accumulate 2 --shard "$shard"
    done
  done
  # Without accumulation the collectives are posted in the middle of
  # backward, whose later steps reuse the memory around them.
  for shard in dp zero1; do
    pair 2 "2 ranks, shard $shard, accumulate 1" "$tmp/mlp" "${small[@]}" --shard "$shard"
  done
  build fashion_cnn
  pair 2 "fashion_cnn, 2 ranks, shard dp" "$tmp/fashion_cnn" --batch 4 --bucket 16KiB --steps 4
  ;;
trace)
  "${mpi[@]}" -np 2 "$tmp/mlp" "${small[@]}" --steps 3 --eval-every 0 --quiet --trace "$tmp/t.json" > /dev/null
  python3 - "$tmp/t.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
comm = [t for t, n in names.items() if n == "communication"]
assert comm, f"no communication track: {names}"
spans = [e for e in ev if e.get("ph") == "X"]
coll = [e for e in spans if e["tid"] == comm[0]]
assert coll and all(e["cat"] == "collective" for e in coll), "the communication track has no collective spans"
assert all(e["cat"] != "collective" for e in spans if e["tid"] != comm[0]), "a collective off the communication track"
eps = 0.002  # microseconds: the file's rounding
for tid in names:
    stack = []
    for e in sorted((e for e in spans if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - eps:
            stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + eps:
            sys.exit(f"track {names[tid]}: {e['name']} overlaps {stack[-1]['name']} without nesting")
        stack.append(e)
steps = [e for e in spans if e["cat"] == "step"]
for c in coll:
    if not any(s["ts"] - eps <= c["ts"] and c["ts"] + c["dur"] <= s["ts"] + s["dur"] + eps for s in steps):
        sys.exit(f"collective {c['name']} at {c['ts']} lies in no optimizer step")
per = len(coll) / len(steps)
assert per >= 2, f"{per} collectives per step: expected several (64 KiB buckets)"
print(f"ok: {len(coll)} collectives on the communication track over {len(steps)} steps, spans nest")
PY
  ;;
fault)
  # Rank 1's third collective is the third gradient bucket's all_reduce
  # of the first step, on the communication thread.
  start=$(date +%s)
  rc=0
  KILN_FAULT_COLLECTIVE=1:3 "${mpi[@]}" -np 2 "$tmp/mlp" "${small[@]}" --eval-every 0 --quiet > "$tmp/out.txt" 2> "$tmp/err.txt" || rc=$?
  took=$(( $(date +%s) - start ))
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: the failed collective gave exit $rc"; cat "$tmp/err.txt"; exit 1; }
  grep -q "rank 1 of 2: MPI_Allreduce (all_reduce sum of .*) failed: a fault injected by KILN_FAULT_COLLECTIVE" "$tmp/err.txt" ||
    { echo "FAIL: no error naming rank 1 and the all_reduce"; cat "$tmp/err.txt"; exit 1; }
  [ "$took" -lt 60 ] || { echo "FAIL: the job took $took s to end"; exit 1; }
  echo "ok: a failed collective on the communication thread ended the job in $took s (exit $rc), naming rank and op"
  ;;
*)
  echo "unknown case $case_"; exit 2
  ;;
esac
