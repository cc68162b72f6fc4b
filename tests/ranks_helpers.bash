# The helpers of the many-rank test scripts (tests/ranks.sh, tests/overlap.sh,
# tests/zero/*.sh), sourced after lib.sh:
#   source "$(dirname "$0")/ranks_helpers.bash"   (or ../ from tests/zero)
# The script sets kiln, here (tests/) and tmp before; shard_args (flags
# every ranks() run adds, e.g. --shard zero2) may be set at any time.
#
# Every comparison is of 20 steps' losses (rtol 1e-5) and of the final
# params and optimizer state in the checkpoints (rtol 1e-5 of each
# element, plus 1e-5 of the value's largest magnitude for elements near
# zero), with tests/ranks_compare.py; mpirun --oversubscribe, one thread
# per rank (lib.sh).
command -v mpirun > /dev/null || { echo "FAIL: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 1; }
# Sanitizer builds: Open MPI's own allocations are not Kiln's leaks; the
# full unwinder, so that their stacks reach Open MPI's libraries (the
# fast one stops in frames without frame pointers).
export LSAN_OPTIONS="suppressions=$here/ranks.lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
mpi=(timeout 120 mpirun --allow-run-as-root --oversubscribe)
loud=(--data synthetic:600 --steps 20 --eval-every 0 --log-every 1)
common=("${loud[@]}" --quiet)
shard_args=()
compare() { python3 "$here/ranks_compare.py" "$@"; }
# one NAME EXE ARGS...: one rank (no launcher), metrics and checkpoint NAME.
one() { local n=$1 exe=$2; shift 2; "$exe" "${common[@]}" --metrics "$tmp/$n.json" --save "$tmp/$n.ckpt" "$@" > /dev/null; }
# ranks N NAME EXE ARGS...: N ranks under mpirun, with shard_args.
ranks() {
  local np=$1 n=$2 exe=$3; shift 3
  "${mpi[@]}" -np "$np" "$exe" "${common[@]}" ${shard_args[@]+"${shard_args[@]}"} --metrics "$tmp/$n.json" \
    --save "$tmp/$n.ckpt" "$@" > /dev/null
}
# same A B [SKIP...]: equal losses and final values.
same() {
  local a=$1 b=$2; shift 2
  compare losses "$tmp/$a.json" "$tmp/$b.json" 1e-5 || { echo "FAIL: losses of $a and $b differ"; exit 1; }
  compare params "$tmp/$a.ckpt" "$tmp/$b.ckpt" 1e-5 "$@" || { echo "FAIL: final values of $a and $b differ"; exit 1; }
}
# differ A B: the control: losses that must not match.
differ() {
  if compare losses "$tmp/$1.json" "$tmp/$2.json" 1e-5 > /dev/null; then
    echo "FAIL: $1 and $2 match: the comparison sees nothing"; exit 1
  fi
}
build() { "$kiln" build "examples/$1.kl" -o "$tmp/$1"; }
