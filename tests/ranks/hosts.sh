#!/usr/bin/env bash
# Jobs across hosts (docs/guides/cluster.md): two "hosts" on this machine,
# two network namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2
# on an interface named kiln0 in each), Open MPI over TCP between them
# (btl tcp,self; btl_tcp_if_include and oob_tcp_if_include kiln0) with a
# hostfile naming both addresses, one slot each, and tests/ranks/hosts_rsh
# as its remote-start agent in place of ssh (it starts Open MPI's daemon
# in the other namespace with a bare environment). mpirun runs in the
# first namespace: rank 0 there, rank 1 in the second.
#
#   hosts.sh KILN CASE   CASE: dp | pipeline | files
#
#  dp:    data parallel x 2 of the MLP and of the tiny GPT
#         (tests/gpt/tiny.sh), and zero1 of the MLP, across the two
#         hosts: the same losses and final checkpoint (compare.py,
#         tests/ranks/helpers.bash's `same`) as the same two ranks on one
#         host (shared memory), and the start-up line names 2 hosts.
#  pipeline: a 2-stage pipeline, one stage per host (1f1b and
#         zero_bubble, 4 micro-batches of the tiny GPT; gpipe of the MLP):
#         activations and their gradients cross the veth pair (MPI
#         point-to-point over TCP); the same bytes as the two stages on
#         one host, and one rank's losses and final values within 1e-5.
#  files: the hosts do not share the run's folder (the second host has a
#         copy of its own mounted over it, hosts_rsh): each host
#         compiles into its own kernel cache, rank 0's files (--save,
#         --metrics) are written on its host alone, a resume from the
#         same copy on each host gives the uninterrupted run's losses, and
#         a copy that differs (another step), or is missing, on the
#         second host is refused before training with an error naming the
#         rank, never a silent run from two different states.
#
# What it does not prove: the veth pair has no real network's latency or
# bandwidth, and both hosts are one CPU (docs/guides/cluster.md).
#
# Where namespaces cannot be made (not root, no CAP_NET_ADMIN, no `ip`),
# it skips (exit 77) with the reason. The namespaces are removed on every
# exit path (the EXIT trap).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"

skip() { echo "SKIP: $*"; exit 77; }
nsa=kiln_hosts_a_$$ nsb=kiln_hosts_b_$$
cleanup() {
  ip netns del "$nsa" 2> /dev/null || true
  ip netns del "$nsb" 2> /dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
command -v ip > /dev/null || skip "no ip command (Debian: apt-get install iproute2)"
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN"
ip netns add "$nsa" 2> "$tmp/ns.err" || skip "cannot create a network namespace: $(tr '\n' ' ' < "$tmp/ns.err")"
ip netns add "$nsb" 2> "$tmp/ns.err" || skip "cannot create a second network namespace: $(tr '\n' ' ' < "$tmp/ns.err")"
# The veth pair is made with its ends inside the namespaces, so its name
# (kiln0 in each) never meets another run's.
if ! { ip link add kiln0 netns "$nsa" type veth peer name kiln0 netns "$nsb" &&
  ip -n "$nsa" addr add 10.77.0.1/24 dev kiln0 && ip -n "$nsb" addr add 10.77.0.2/24 dev kiln0 &&
  ip -n "$nsa" link set kiln0 up && ip -n "$nsb" link set kiln0 up &&
  ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up; } 2> "$tmp/ns.err"; then
  skip "cannot join the namespaces with a veth pair: $(tr '\n' ' ' < "$tmp/ns.err")"
fi

printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$tmp/hostfile"
export KILN_HOSTS_MAP=$tmp/hosts.map
printf '10.77.0.2 %s kiln-host-b\n' "$nsb" > "$KILN_HOSTS_MAP"
# What the ranks need from this environment, forwarded as a cluster's
# mpirun would (-x); the rest of it does not reach the second host.
fwd=()
for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS CUDA_VISIBLE_DEVICES KILN_CACHE_DIR KILN_TEST_RUNQ_SHARE ASAN_OPTIONS LSAN_OPTIONS; do
  [ -n "${!v+set}" ] && fwd+=(-x "$v")
done
# odls_base_sigkill_timeout 0: a job that aborts (the refused runs of
# the files case) ends at once, not after Open MPI's seconds of waiting
# between its signals to the ranks on the second host.
net=(--mca btl tcp,self --mca btl_tcp_if_include kiln0 --mca oob_tcp_if_include kiln0 --mca pml ob1
  --mca odls_base_sigkill_timeout 0)
# mpirun on the first host (named kiln-host-a there, a UTS namespace).
hosts_mpi() {
  # shellcheck disable=SC2016
  OMPI_MCA_btl=tcp,self timeout 120 ip netns exec "$nsa" unshare --uts sh -c 'hostname kiln-host-a && exec "$@"' \
    hosts mpirun --allow-run-as-root --hostfile "$tmp/hostfile" \
    --mca plm_rsh_agent "$here/ranks/hosts_rsh" "${net[@]}" ${fwd[@]+"${fwd[@]}"} "$@"
}
# hosts NAME EXE ARGS...: two ranks, one on each host (ranks's flags);
# rank 0's output in NAME.out.
hosts() {
  local n=$1 exe=$2; shift 2
  hosts_mpi -np 2 "$exe" "${common[@]}" ${shard_args[@]+"${shard_args[@]}"} --metrics "$tmp/$n.json" \
    --save "$tmp/$n.ckpt" "$@" > "$tmp/$n.out"
}
# bitwise A B: the two ranks on two hosts sum in the order they do on
# one (Open MPI picks its all-reduce by the world and the message size,
# not the transport), so the final checkpoints are the same bytes.
bitwise() {
  cmp -s "$tmp/$1.ckpt" "$tmp/$2.ckpt" || { echo "FAIL: $1 and $2 are not the same bytes"; exit 1; }
}

case $case_ in
dp)
  # Where the ranks ran: the start-up line, and the agent's log.
  build mlp
  ranks 2 one_host "$tmp/mlp" --batch 24
  common=("${loud[@]}")
  hosts two_hosts "$tmp/mlp" --batch 24
  common=("${loud[@]}" --quiet)
  grep -q "^ranks: world 2 (mpirun (Open MPI), 2 hosts), shard dp" "$tmp/two_hosts.out" ||
    { echo "FAIL: the start-up line does not name 2 hosts"; grep "^ranks:" "$tmp/two_hosts.out"; exit 1; }
  grep -q "^10.77.0.2 $nsb$" "$KILN_HOSTS_MAP.started" ||
    { echo "FAIL: Open MPI did not start a daemon on the second host"; exit 1; }
  echo "ok: rank 1 runs in the second namespace; $(grep '^ranks:' "$tmp/two_hosts.out")"
  same one_host two_hosts
  bitwise one_host two_hosts
  echo "ok: mlp, dp x 2 across two hosts: the losses and checkpoint of the two ranks on one host"
  # The control: another global batch must not match.
  hosts ctl "$tmp/mlp" --batch 12
  differ one_host ctl
  shard_args=(--shard zero1)
  ranks 2 z1_one_host "$tmp/mlp" --batch 24
  hosts z1_two_hosts "$tmp/mlp" --batch 24
  same z1_one_host z1_two_hosts
  bitwise z1_one_host z1_two_hosts
  shard_args=()
  echo "ok: mlp, zero1 x 2 across two hosts: the same as on one host"
  source "$testdir/gpt/tiny.sh"
  tiny_gpt "$kiln" "$tmp" || exit 1
  "$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt"
  # Its token files, not --data synthetic.
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  ranks 2 gpt_one_host "$tmp/gpt" --batch 4
  hosts gpt_two_hosts "$tmp/gpt" --batch 4
  same gpt_one_host gpt_two_hosts
  bitwise gpt_one_host gpt_two_hosts
  echo "ok: tiny gpt, dp x 2 across two hosts: the same as on one host"
  ;;
pipeline)
  mb=(--batch 16 --accumulate 4)
  build mlp
  one p_ref "$tmp/mlp" "${mb[@]}"
  ranks 2 p_one_host "$tmp/mlp" "${mb[@]}" --set pipeline_parallel=2 --set pipeline_schedule=gpipe
  common=("${loud[@]}")
  hosts p_two_hosts "$tmp/mlp" "${mb[@]}" --set pipeline_parallel=2 --set pipeline_schedule=gpipe
  common=("${loud[@]}" --quiet)
  grep -q "^ranks: world 2 (mpirun (Open MPI), 2 hosts)" "$tmp/p_two_hosts.out" ||
    { echo "FAIL: the start-up line does not name 2 hosts"; grep "^ranks:" "$tmp/p_two_hosts.out"; exit 1; }
  same p_ref p_two_hosts
  bitwise p_one_host p_two_hosts
  echo "ok: mlp, gpipe, a stage on each host: one host's bytes, one rank's losses and values"
  source "$testdir/gpt/tiny.sh"
  tiny_gpt "$kiln" "$tmp" || exit 1
  "$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt"
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  mb=(--batch 4 --accumulate 4)
  one g_ref "$tmp/gpt" "${mb[@]}"
  for sched in 1f1b zero_bubble; do
    ranks 2 "g_${sched}_one_host" "$tmp/gpt" "${mb[@]}" --set pipeline_parallel=2 --set pipeline_schedule=$sched
    hosts "g_${sched}_two_hosts" "$tmp/gpt" "${mb[@]}" --set pipeline_parallel=2 --set pipeline_schedule=$sched
    same g_ref "g_${sched}_two_hosts"
    bitwise "g_${sched}_one_host" "g_${sched}_two_hosts"
    echo "ok: tiny gpt, $sched, a stage on each host: one host's bytes, one rank's losses and values"
  done
  # The control: a wrong global batch across the hosts must not match.
  hosts g_ctl "$tmp/gpt" --batch 4 --accumulate 2 --set pipeline_parallel=2 --set pipeline_schedule=1f1b
  differ g_ref g_ctl
  ;;
files)
  # $tmp/run is the run's folder on both hosts, but the second host's is
  # its own ($tmp/hostb mounted over it): a copy of the executable on
  # each, and the kernel cache in that folder (each host's own).
  run=$tmp/run hostb=$tmp/hostb
  mkdir -p "$run" "$hostb"
  printf '10.77.0.2 %s kiln-host-b %s %s\n' "$nsb" "$hostb" "$run" > "$KILN_HOSTS_MAP"
  "$kiln" build examples/mlp.kl -o "$run/mlp"
  cp "$run/mlp" "$hostb/mlp"
  shared_cache=${KILN_CACHE_DIR:-}
  export KILN_CACHE_DIR=$run/cache
  fwd+=(-x KILN_CACHE_DIR)
  # on2 NAME ARGS...: two ranks, one a host, rank 0's files in $run
  # (on the first host); its exit status.
  on2() {
    local n=$1; shift
    hosts_mpi -np 2 "$run/mlp" "${common[@]}" --batch 12 --comm-timeout 30 --metrics "$run/$n.json" "$@" \
      > "$tmp/$n.out" 2> "$tmp/$n.err"
  }
  on2 full --save "$run/full.ckpt" --save-every 10
  [ -f "$run/full.ckpt" ] && [ -f "$run/full.ckpt.step-10" ] && [ ! -e "$hostb/full.ckpt" ] &&
    [ ! -e "$hostb/full.ckpt.step-10" ] && [ ! -e "$hostb/full.json" ] ||
    { echo "FAIL: rank 0's --save and --metrics are not on its host alone"; ls -la "$run" "$hostb"; exit 1; }
  a=$(find "$run/cache" -type f -name '*.so' | wc -l) b=$(find "$hostb/cache" -type f -name '*.so' | wc -l)
  [ "$a" -gt 0 ] && [ "$b" -gt 0 ] || { echo "FAIL: kernels compiled on host a: $a, on host b: $b (expected each its own)"; exit 1; }
  echo "ok: rank 0's --save and --metrics on its host alone; each host compiled into its own kernel cache ($a and $b objects)"
  # Resume at step 10 (the periodic checkpoint) from a copy on each
  # host: the uninterrupted run's losses.
  mv "$run/full.ckpt.step-10" "$run/half.ckpt"
  rc=0
  on2 missing --resume "$run/half.ckpt" || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: a --resume missing on host b: exit $rc"; cat "$tmp/missing.err"; exit 1; }
  grep -q "rank 1 (on host kiln-host-b) could not read its --resume $run/half.ckpt" "$tmp/missing.err" ||
    { echo "FAIL: no error naming rank 1, its host and the file"; cat "$tmp/missing.err"; exit 1; }
  echo "ok: a --resume missing on host b: $(grep -m1 'rank 1 (on host' "$tmp/missing.err")"
  cp "$run/half.ckpt" "$hostb/half.ckpt"
  on2 resumed --resume "$run/half.ckpt"
  compare losses "$run/full.json" "$run/resumed.json" 1e-5 || { echo "FAIL: resumed from a copy on each host"; exit 1; }
  # Another file at the same path on host b, of the same step (a run
  # with another lr): refused before training, never a silent run of
  # two ranks from two states.
  KILN_CACHE_DIR=$shared_cache "$run/mlp" "${common[@]}" --batch 24 --steps 10 --lr 0.01 --save "$hostb/half.ckpt" > /dev/null
  rc=0
  on2 stale --resume "$run/half.ckpt" || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: another checkpoint on host b: exit $rc"; exit 1; }
  grep -q "the ranks resumed from different checkpoints at $run/half.ckpt: rank 1 (on host kiln-host-b) read step 10 (checksum [0-9a-f]*), rank 0 (on host kiln-host-a) step 10" "$tmp/stale.err" ||
    { echo "FAIL: no error naming the ranks' different checkpoints"; cat "$tmp/stale.err"; exit 1; }
  grep -q '"step": 11' "$run/stale.json" && { echo "FAIL: the ranks trained from different checkpoints"; exit 1; }
  echo "ok: another checkpoint on host b: $(grep -m1 'different checkpoints' "$tmp/stale.err")"
  # --resume latest: each rank looks in its host's --save folder; the
  # second host has none of the series: refused, naming what each found.
  rc=0
  on2 latest --save "$run/full.ckpt" --resume latest || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: --resume latest with the series on host a alone: exit $rc"; exit 1; }
  grep -qF "rank 1 has --resume = latest: no checkpoint of --save's series found, rank 0 has --resume = latest: $run/full.ckpt" "$tmp/latest.err" ||
    { echo "FAIL: no error naming what each rank's --resume latest found"; cat "$tmp/latest.err"; exit 1; }
  echo "ok: --resume latest with the series on host a alone is refused"
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "hosts.two_netns.$case_: ok"
