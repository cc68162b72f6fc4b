#!/usr/bin/env bash
# NCCL for the CUDA backend (runtime/exec/nccl.c), checked without a GPU:
#  - the real libnccl opens and every entry point Kiln uses resolves
#    (skipped, exit 77, only when no libnccl is installed);
#  - a missing library and one lacking an entry point are refused naming
#    the file and the symbol;
#  - through a fake libnccl that prints its arguments: the communicator's
#    bootstrap and each collective reach NCCL with the right counts, NCCL
#    data types (f32 7, f16 6, bf16 9) and ops (sum 0, max 2), on the
#    stream given;
#  - a failing call (the fake returns ncclInvalidUsage) ends the process
#    with exit 1 and an error naming the rank, the call, the collective,
#    its operand and ncclGetErrorString's message.
#   nccl.sh NCCL_CHECK FAKE_LIB FAKE_LIB_WITHOUT_BROADCAST
set -uo pipefail
source "$(dirname "$0")/../../lib.sh"
check=$1 fake=$2 partial=$3
new_tmpdir
unset KILN_NCCL_LIB FAKE_NCCL_FAIL KILN_MPI

if ! "$check" symbols > "$tmp/real.txt" 2> "$tmp/real.err"; then
  if grep -q "cannot open libnccl.so.2" "$tmp/real.err"; then
    echo "SKIP: no libnccl on this machine: $(cat "$tmp/real.err")"; exit 77
  fi
  bad "the real libnccl: $(cat "$tmp/real.err")"
else
  ok "the real libnccl: $(tail -1 "$tmp/real.txt")"
fi

KILN_NCCL_LIB=/nonexistent/libnccl.so.2 "$check" symbols > /dev/null 2> "$tmp/e.txt"
rc=$?
[ $rc -eq 3 ] && grep -q "cannot open /nonexistent/libnccl.so.2 (.*); install NCCL" "$tmp/e.txt" &&
  ok "a missing library: $(cat "$tmp/e.txt")" || bad "a missing library (exit $rc): $(cat "$tmp/e.txt")"
"$check" symbols "$partial" > /dev/null 2> "$tmp/e.txt"
rc=$?
[ $rc -eq 3 ] && grep -q "libfake_nccl_partial.so has no ncclBroadcast" "$tmp/e.txt" &&
  ok "a library lacking an entry point: $(cat "$tmp/e.txt")" || bad "a library lacking ncclBroadcast (exit $rc): $(cat "$tmp/e.txt")"

KILN_NCCL_LIB=$fake "$check" calls > "$tmp/calls.txt" 2> "$tmp/calls.err" || bad "the fake's calls: $(cat "$tmp/calls.err")"
cat > "$tmp/want.txt" <<'T'
ncclGetUniqueId
ncclCommInitRank nranks=1 rank=0 id=fake-id
ncclAllReduce count=4 type=7 op=0 inplace=0 stream=0x5
ncclAllReduce count=3 type=9 op=2 inplace=1 stream=0x5
ncclReduceScatter recvcount=5 type=6 op=0 stream=0x5
ncclAllGather sendcount=6 type=7 stream=0x5
ncclBroadcast count=7 type=9 root=0 stream=0x5
ncclCommDestroy ours
nccl_check: done
T
diff "$tmp/want.txt" "$tmp/calls.txt" > "$tmp/d.txt" && ok "bootstrap and collectives reach NCCL with their counts, types, ops and stream" ||
  { bad "the calls NCCL saw differ:"; cat "$tmp/d.txt"; }

# fails CALL MESSAGE: the fake fails CALL; exit 1 and MESSAGE on stderr.
fails() {
  local call=$1 want=$2
  FAKE_NCCL_FAIL=$call KILN_NCCL_LIB=$fake "$check" calls > /dev/null 2> "$tmp/e.txt"
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF "$want" "$tmp/e.txt"; then
    ok "$call fails: $(head -1 "$tmp/e.txt")"
  else
    bad "$call fails (exit $rc), want \"$want\":"; cat "$tmp/e.txt"
  fi
}
fails ncclGetUniqueId "rank 0 of 1: ncclGetUniqueId (the communicator's start of its id, 1 i64) failed: invalid usage (fake NCCL)"
fails ncclCommInitRank "rank 0 of 1: ncclCommInitRank (the communicator's start of its id, 1 i64) failed: invalid usage (fake NCCL)"
fails ncclAllReduce "rank 0 of 1: ncclAllReduce (all_reduce sum of w.grad, 4 f32) failed: invalid usage (fake NCCL)"
fails ncclReduceScatter "rank 0 of 1: ncclReduceScatter (reduce_scatter sum of bucket.0, 5 f16) failed: invalid usage (fake NCCL)"
fails ncclAllGather "rank 0 of 1: ncclAllGather (all_gather of w.shard, 6 f32) failed: invalid usage (fake NCCL)"
fails ncclBroadcast "rank 0 of 1: ncclBroadcast (rank_broadcast of w.init, 7 bf16) failed: invalid usage (fake NCCL)"
exit $fail
