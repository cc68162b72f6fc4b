# The helpers of the many-rank tests (tests/ranks.sh, tests/tp.sh):
# mpirun, one rank's and N ranks' runs of 20 steps with metrics and a
# checkpoint, and their comparison (tests/ranks_compare.py). The caller,
# a script in tests/, sets kiln, here (tests/) and tmp.
source "$(dirname "$0")/lib.sh"
command -v mpirun > /dev/null || { echo "FAIL: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 1; }
# Sanitizer builds: Open MPI's own allocations are not Kiln's leaks; the
# full unwinder, so that their stacks reach Open MPI's libraries (the
# fast one stops in frames without frame pointers).
export LSAN_OPTIONS="suppressions=$here/ranks.lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
mpi=(timeout 120 mpirun --allow-run-as-root --oversubscribe)
loud=(--data synthetic:600 --steps 20 --eval-every 0 --log-every 1)
common=("${loud[@]}" --quiet)
compare() { python3 "$here/ranks_compare.py" "$@"; }

# one NAME EXE ARGS...: one rank (no launcher), metrics and checkpoint NAME.
one() { local n=$1 exe=$2; shift 2; "$exe" "${common[@]}" --metrics "$tmp/$n.json" --save "$tmp/$n.ckpt" "$@" > /dev/null; }
# ranks N NAME EXE ARGS...: N ranks under mpirun.
ranks() {
  local np=$1 n=$2 exe=$3; shift 3
  "${mpi[@]}" -np "$np" "$exe" "${common[@]}" --metrics "$tmp/$n.json" --save "$tmp/$n.ckpt" "$@" > /dev/null
}
# same A B [SKIP...]: equal losses and final values.
same() {
  local a=$1 b=$2; shift 2
  compare losses "$tmp/$a.json" "$tmp/$b.json" 1e-5 || { echo "FAIL: losses of $a and $b differ"; exit 1; }
  compare params "$tmp/$a.ckpt" "$tmp/$b.ckpt" 1e-5 "$@" || { echo "FAIL: final values of $a and $b differ"; exit 1; }
}

build() { "$kiln" build "examples/$1.kl" -o "$tmp/$1"; }
