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
#   hosts.sh KILN CASE   CASE: dp | files
#
#  dp:    data parallel x 2 of the MLP and of the tiny GPT
#         (tests/gpt/tiny.sh), and zero1 of the MLP, across the two
#         hosts: the same losses and final checkpoint (compare.py,
#         tests/ranks/helpers.bash's `same`) as the same two ranks on one
#         host (shared memory), and the start-up line names 2 hosts.
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
printf '10.77.0.2 %s\n' "$nsb" > "$KILN_HOSTS_MAP"
# What the ranks need from this environment, forwarded as a cluster's
# mpirun would (-x); the rest of it does not reach the second host.
fwd=()
for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS CUDA_VISIBLE_DEVICES KILN_CACHE_DIR KILN_TEST_RUNQ_SHARE ASAN_OPTIONS LSAN_OPTIONS; do
  [ -n "${!v+set}" ] && fwd+=(-x "$v")
done
net=(--mca btl tcp,self --mca btl_tcp_if_include kiln0 --mca oob_tcp_if_include kiln0 --mca pml ob1)
hosts_mpi() {
  OMPI_MCA_btl=tcp,self timeout 120 ip netns exec "$nsa" mpirun --allow-run-as-root --hostfile "$tmp/hostfile" \
    --mca plm_rsh_agent "$here/ranks/hosts_rsh" "${net[@]}" ${fwd[@]+"${fwd[@]}"} "$@"
}
# hosts NAME EXE ARGS...: two ranks, one on each host (ranks's flags).
hosts() {
  local n=$1 exe=$2; shift 2
  hosts_mpi -np 2 "$exe" "${common[@]}" ${shard_args[@]+"${shard_args[@]}"} --metrics "$tmp/$n.json" \
    --save "$tmp/$n.ckpt" "$@" > /dev/null
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
  hosts_mpi -np 2 "$tmp/mlp" "${loud[@]}" --steps 2 --batch 8 > "$tmp/start.txt"
  grep -q "^ranks: world 2 (mpirun (Open MPI), 2 hosts), shard dp" "$tmp/start.txt" ||
    { echo "FAIL: the start-up line does not name 2 hosts"; grep "^ranks:" "$tmp/start.txt"; exit 1; }
  grep -q "^10.77.0.2 $nsb$" "$KILN_HOSTS_MAP.started" ||
    { echo "FAIL: Open MPI did not start a daemon on the second host"; exit 1; }
  echo "ok: rank 1 runs in the second namespace; $(grep '^ranks:' "$tmp/start.txt")"
  ranks 2 one_host "$tmp/mlp" --batch 24
  hosts two_hosts "$tmp/mlp" --batch 24
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
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "hosts.two_netns.$case_: ok"
