#!/usr/bin/env bash
# The numbers a training run prints about its own speed (issue 14):
#  - the progress lines' windows together cover exactly the run's step
#    time (an epoch's evaluation between two lines once shrank a window's
#    time but not its steps: 3x too high a rate);
#  - the summary's ms/step and samples/s are the steps' time alone, not
#    evaluation's or start-up's;
#  - a resumed run counts only the steps it ran;
#  - --eval-every 0: no evaluation at all, not even at the end;
#  - the default thread count is the rule (OMP_NUM_THREADS, else the
#    physical cores this process may run on), printed at start-up.
# No assertion on how fast anything is: only on how the figures relate.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
# 600 samples at batch 128: 4 steps an epoch, logged every 5 steps, so
# progress windows span epoch boundaries (and their evaluations).
run=(--data synthetic:600 --threads 1 --log-every 5)

# ---- windows and summary against the steps' time ----
./mlp "${run[@]}" --steps 23 --metrics m.jsonl --save c.ckpt > out 2>&1 || { bad "run failed"; cat out; }
python3 - m.jsonl 23 23 <<'PY' && ok "windows cover the step time; summary rates exclude evaluation" || bad "rates (see above)"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps, run_steps = int(sys.argv[2]), int(sys.argv[3])
train = [r for r in recs if r["type"] == "train"]
summ = [r for r in recs if r["type"] == "summary"][-1]
errs = []
# Each window: steps since the previous line; its ms/step x steps is its time.
prev, total_s = steps - run_steps, 0.0
for r in train:
    n = r["step"] - prev
    prev = r["step"]
    total_s += r["ms_per_step"] * n / 1e3
    # ms/step and samples/s come from one interval: their product is the batch.
    if abs(r["samples_per_s"] * r["ms_per_step"] / 1e3 - 128) > 0.5:
        errs.append("step %d: %.1f samples/s x %.3f ms != 128 samples" % (r["step"], r["samples_per_s"], r["ms_per_step"]))
if abs(total_s - summ["step_seconds"]) > 0.0006 + 0.0005 * len(train):
    errs.append("progress windows add up to %.4f s, the steps took %.4f s" % (total_s, summ["step_seconds"]))
if summ["steps"] != steps or summ["run_steps"] != run_steps:
    errs.append("summary steps %s, run_steps %s; expected %d, %d" % (summ["steps"], summ.get("run_steps"), steps, run_steps))
if abs(summ["ms_per_step"] * run_steps / 1e3 - summ["step_seconds"]) > 0.0006 + run_steps * 5e-7:
    errs.append("summary %.3f ms/step x %d steps != step time %.3f s" % (summ["ms_per_step"], run_steps, summ["step_seconds"]))
if summ["step_seconds"] + summ["eval_seconds"] > summ["seconds"] + 0.002:
    errs.append("steps %.3f s + evaluation %.3f s exceed the run's %.3f s" % (summ["step_seconds"], summ["eval_seconds"], summ["seconds"]))
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY

# ---- a resumed run counts its own steps ----
./mlp "${run[@]}" --steps 30 --resume c.ckpt --metrics r.jsonl > out 2>&1 || { bad "resumed run failed"; cat out; }
grep -qF "done: 30 steps (7 in this run) in" out && ok "resumed summary: $(grep -F done: out)" ||
  { bad "resumed summary"; grep -F done: out; }
python3 - r.jsonl 30 7 <<'PY' && ok "resumed run: rates over its own 7 steps" || bad "resumed rates (see above)"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
summ = [r for r in recs if r["type"] == "summary"][-1]
steps, run_steps = int(sys.argv[2]), int(sys.argv[3])
bad = summ["steps"] != steps or summ["run_steps"] != run_steps or \
      abs(summ["ms_per_step"] * run_steps / 1e3 - summ["step_seconds"]) > 0.0006 + run_steps * 5e-7
if bad:
    print("  summary", summ)
sys.exit(1 if bad else 0)
PY

# ---- --eval-every 0: no evaluation at all ----
./mlp "${run[@]}" --steps 9 --eval-every 0 --metrics e.jsonl > out 2>&1 || { bad "--eval-every 0 run failed"; cat out; }
if grep -q " eval " out || grep -qF '"type": "eval"' e.jsonl || grep -qF '"final_' e.jsonl || grep -qF "final accuracy" out; then
  bad "--eval-every 0 still evaluated:"; grep -E " eval |final" out e.jsonl
elif ! grep -qF '"eval_seconds": 0.000' e.jsonl; then
  bad "--eval-every 0: evaluation time not 0"; tail -1 e.jsonl
else
  ok "--eval-every 0: no eval line, no eval record, no final metric"
fi
# Without the flag: each epoch's end (9 steps: epochs 1, 2 and the run's end).
./mlp "${run[@]}" --steps 9 --metrics d.jsonl > out 2>&1
n=$(grep -cF '"type": "eval"' d.jsonl)
[ "$n" = 3 ] && ok "default: an evaluation at each epoch's end and the run's ($n)" || bad "default: $n evaluations, expected 3"

# ---- the thread rule, printed at start-up ----
want=$(python3 - <<'PY'
import os, glob
cores = set()
for cpu in os.sched_getaffinity(0):
    d = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
    try:
        cores.add((open(d + "physical_package_id").read().strip(), open(d + "core_id").read().strip()))
    except OSError:
        pass
print(len(cores))
PY
)
line=$(env -u OMP_NUM_THREADS ./mlp --data synthetic:600 --steps 1 --eval-every 0 2>&1 | grep -oE "cpu, [0-9]+ threads? \([^)]*\)")
[ "$line" = "cpu, $want thread$( [ "$want" = 1 ] || echo s) (physical cores)" ] && ok "default: $line" || bad "default threads: '$line', expected $want physical cores"
line=$(OMP_NUM_THREADS=3 ./mlp --data synthetic:600 --log-every 5 --steps 1 --eval-every 0 2>&1 | grep -oE "cpu, [0-9]+ threads? \([^)]*\)")
[ "$line" = "cpu, 3 threads (OMP_NUM_THREADS)" ] && ok "$line" || bad "OMP_NUM_THREADS=3: '$line'"
line=$(OMP_NUM_THREADS=3 ./mlp "${run[@]}" --steps 1 --eval-every 0 2>&1 | grep -oE "cpu, [0-9]+ threads? \([^)]*\)")
[ "$line" = "cpu, 1 thread (--threads)" ] && ok "--threads wins: $line" || bad "--threads 1: '$line'"
line=$(OMP_NUM_THREADS=3 ./mlp --data synthetic:600 --set threads=2 --steps 1 --eval-every 0 2>&1 | grep -oE "cpu, [0-9]+ threads? \([^)]*\)")
[ "$line" = "cpu, 2 threads (the train block's threads)" ] && ok "train block wins: $line" || bad "threads=2: '$line'"

# ---- kiln bench: the same thread rule; medians with their spread ----
env -u OMP_NUM_THREADS "$kiln" bench "$testdir/../examples/mlp.kl" --repeats 5 --json > b.json 2> b.err || { bad "kiln bench failed"; cat b.err; }
python3 - b.json "$want" <<'PY' && ok "kiln bench: threads by the rule, medians inside their IQR, inconclusive exactly when the ranges overlap" || bad "kiln bench (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
errs = []
if d["device"] != "cpu, %s thread%s (physical cores)" % (sys.argv[2], "" if sys.argv[2] == "1" else "s"):
    errs.append("device %r, expected %s physical cores" % (d["device"], sys.argv[2]))
for p in ("", "unfused_"):
    if not d[p + "step_ms_q1"] <= d[p + "step_ms"] <= d[p + "step_ms_q3"]:
        errs.append("%sstep_ms %.4f outside its IQR %.4f-%.4f" % (p, d[p + "step_ms"], d[p + "step_ms_q1"], d[p + "step_ms_q3"]))
overlap = d["step_ms_q1"] <= d["unfused_step_ms_q3"] and d["unfused_step_ms_q1"] <= d["step_ms_q3"]
if d["inconclusive"] != overlap:
    errs.append("inconclusive %s, but the ranges %s" % (d["inconclusive"], "overlap" if overlap else "are apart"))
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY
exit $fail
