#!/usr/bin/env bash
# OpenMP waiting on a shared machine (issue 32 item 14, runtime/cpu/cpu_wait.c):
# the MLP's training step (examples/mlp.kl, batch 128, Fashion-MNIST) on
# one thread and on THREADS threads under three ways of waiting:
#   kiln      Kiln's default (the executable re-runs itself with
#             GOMP_SPINCOUNT=1000: idle threads spin briefly, then sleep)
#   spin      libgomp's own default, as before (GOMP_SPINCOUNT=300000)
#   passive   OMP_WAIT_POLICY=passive (idle threads sleep at once)
# each on the machine as it is and with BUSY competing busy processes (a
# shell loop each). Prints the median ms/step (the run's summary) of
# REPEATS runs, one line per (competitors, setting), then the load.
#
#   bench/cpu_wait.sh [REPEATS]   KILN=path/to/kiln (default ./build/kiln);
#                                 STEPS=N (default 100); THREADS=N (default 2);
#                                 BUSY=N (default 1)
set -euo pipefail
kiln=${KILN:-./build/kiln}
repeats=${1:-3}
steps=${STEPS:-100}
threads=${THREADS:-2}
busy=${BUSY:-1}
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
"$kiln" build examples/mlp.kl -o "$dir/mlp" > /dev/null 2>&1
unset OMP_WAIT_POLICY GOMP_SPINCOUNT KILN_CPU_WAIT OMP_NUM_THREADS
export KILN_TEST_RUNQ_SHARE=0

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
step_ms() { # ENV... -- FLAGS...: one run's ms/step
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$dir/mlp" --steps "$steps" --log-every 100000 --eval-every 0 --metrics "$dir/m.json" "$@" > /dev/null 2>&1
  grep '"type": "summary"' "$dir/m.json" | sed 's/.*"ms_per_step": \([^,]*\),.*/\1/'
}
measure() { # LABEL ENV... -- FLAGS...
  local label=$1 i
  shift
  for i in $(seq "$repeats"); do step_ms "$@"; done | median | xargs printf "%-34s %8.2f ms/step\n" "$label"
}
table() {
  measure "1 thread" KILN_X=1 -- --threads 1
  measure "$threads threads, kiln (spin 1000)" KILN_X=1 -- --threads "$threads"
  measure "$threads threads, spin (libgomp 300000)" GOMP_SPINCOUNT=300000 -- --threads "$threads"
  measure "$threads threads, passive" OMP_WAIT_POLICY=passive -- --threads "$threads"
}
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), no competitor of our own"
table
for i in $(seq "$busy"); do
  (while :; do :; done) &
  pids+=($!)
done
sleep 1
echo "== $busy busy competitor(s), load $(cut -d' ' -f1-3 /proc/loadavg)"
table
