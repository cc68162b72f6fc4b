#!/usr/bin/env bash
# OpenMP waiting on a shared machine (issue 32 item 14, runtime/cpu/cpu_wait.c):
#  - a training executable runs itself again with GOMP_SPINCOUNT=1000 (read
#    from /proc/PID/environ of the running process), unless the user set
#    OMP_WAIT_POLICY or GOMP_SPINCOUNT (then neither is added);
#  - after warm-up, threads that waited for a core (KILN_TEST_RUNQ_SHARE
#    stands in for the measured share) get one hint naming the share and
#    the waiting policy; none at share 0, none on one thread.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build "$testdir/train/tiny.kl" -o "$tmp/tiny" > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }

# env_of VAR=VALUE...: the variables GOMP_SPINCOUNT, KILN_CPU_WAIT and
# OMP_WAIT_POLICY of a running executable started with VAR=VALUE.
env_of() {
  env "$@" "$tmp/tiny" --threads 2 --epochs 100000 > "$tmp/bg.txt" 2>&1 &
  local pid=$! i
  # Its first epoch line: past main, so past the new run's exec.
  for i in $(seq 100); do
    grep -q '^epoch' "$tmp/bg.txt" && break
    sleep 0.1
  done
  tr '\0' '\n' < /proc/$pid/environ | grep -E '^(GOMP_SPINCOUNT|KILN_CPU_WAIT|OMP_WAIT_POLICY)=' | sort | tr '\n' ' '
  kill $pid
  wait $pid 2> /dev/null || true
}
got=$(env_of)
[ "$got" = "GOMP_SPINCOUNT=1000 KILN_CPU_WAIT=1 " ] && ok "the run's environment: $got" || bad "the run's environment: '$got'"
got=$(env_of OMP_WAIT_POLICY=passive)
[ "$got" = "OMP_WAIT_POLICY=passive " ] && ok "the user's OMP_WAIT_POLICY stays alone: $got" || bad "with OMP_WAIT_POLICY: '$got'"
got=$(env_of GOMP_SPINCOUNT=5)
[ "$got" = "GOMP_SPINCOUNT=5 " ] && ok "the user's GOMP_SPINCOUNT stays: $got" || bad "with GOMP_SPINCOUNT=5: '$got'"

hints() { env "$@" "$tmp/tiny" --epochs 10 --log-every 100 2>&1 | grep '^hint:' || true; }
h=$(hints KILN_TEST_RUNQ_SHARE=0.5 OMP_NUM_THREADS=2)
want="hint: over 20 steps (* ms each) the 2 threads waited for a core 50% of the time and ran on * cores: other processes hold the cores, and each step waits for its slowest thread (OpenMP waiting: GOMP_SPINCOUNT=1000 (Kiln's default)) ---> try --threads 1"
[ "$(grep -c . <<< "$h")" -eq 1 ] && [[ "$h" == $want ]] && ok "a stall: $h" || bad "a stall: '$h'"
h=$(hints KILN_TEST_RUNQ_SHARE=0.5 OMP_NUM_THREADS=2 OMP_WAIT_POLICY=active)
[[ "$h" == *"(OpenMP waiting: OMP_WAIT_POLICY=active (yours))"* ]] && ok "the hint names the user's policy" || bad "user's policy: '$h'"
h=$(hints KILN_TEST_RUNQ_SHARE=0 OMP_NUM_THREADS=2)
[ -z "$h" ] && ok "no stall: no hint" || bad "no stall, yet: $h"
h=$(hints KILN_TEST_RUNQ_SHARE=0.5 OMP_NUM_THREADS=1)
[ -z "$h" ] && ok "one thread: no hint" || bad "one thread, yet: $h"
exit $fail
