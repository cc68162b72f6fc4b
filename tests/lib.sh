# Sourced by every test script (tests/lib_check.sh checks that each does):
#   source "$(dirname "$0")/lib.sh"        (or ../lib.sh from a subfolder)
#
# Bit-exact comparisons. A test that compares two runs bit for bit needs
# every run to add in the same order. The CPU backend's thread count
# decides that order (OpenMP reductions, OpenBLAS's split of each GEMM),
# and by default that is the machine's physical cores, which differ
# from machine to machine. So one thread, for
# every executable a test script starts (the CPU backend takes
# OMP_NUM_THREADS as its default; --threads and the train block's
# threads still win). And the CPU: a GPU would run atomics in a
# different order every time (the GPU has tests/gpu/run.sh).
export OMP_NUM_THREADS=1
export OPENBLAS_NUM_THREADS=1
export CUDA_VISIBLE_DEVICES=
# Sanitizer builds (KILN_SANITIZE): GCC 12's LeakSanitizer crashes in its
# tracer ("Tracer caught signal 11") while it scans the thread-local
# storage of a process with live OpenMP or MPI threads, at exit, after the
# test has passed. use_tls=0 leaves TLS out of the roots it scans, so a
# block reachable only from TLS is reported, never hidden: libgomp's
# thread pool is, and tests/lsan.supp names it. No effect on an
# unsanitized build.
export LSAN_OPTIONS="use_tls=0:suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# And no hint about threads waiting for cores (runtime/cpu/cpu_wait.c): on a
# loaded test machine it would come and go from run to run
# (tests/train/cpu_wait.sh sets the share it tests).
export KILN_TEST_RUNQ_SHARE=0
# Open MPI on one host: shared memory (vader) and ob1 without probing the
# network stacks (UCX, OFI) in every MPI_Init: 4 ranks start in 0.60 s
# instead of 0.84 (median of 8 here), and the suite starts hundreds.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
# A rank waiting in Open MPI (MPI_Init, a barrier, MPI_Finalize) yields its
# core instead of spinning: the suite runs more ranks than cores (mpirun
# --oversubscribe, other tests beside), and a spinning rank takes the core
# the rank it waits for needs. (Kiln's own waits yield after 1 ms:
# runtime/comm/comm.c comm_wait.)
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

# ---- Helpers for the test scripts (one copy, not one per script) ----
# The folder of the tests (this file's), whichever script sources it.
testdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Checks print "ok: ..." or "FAIL: ..."; a FAIL sets fail, which the
# script ends with (exit $fail).
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# new_tmpdir: a new temporary folder in $tmp, removed when the script
# exits. enter_tmpdir: the same, made the current folder.
new_tmpdir() {
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
}
enter_tmpdir() {
  new_tmpdir
  cd "$tmp" || exit 1
}

# build_example NAME [OUT]: kiln build of examples/NAME.kl to OUT (default
# ./NAME) with $kiln, its output kept out of the log; a failed build
# prints the compiler's output and ends the script.
build_example() {
  local out=${2:-$1} log
  log=$("$kiln" build "$testdir/../examples/$1.kl" -o "$out" 2>&1) || {
    echo "FAIL: kiln build examples/$1.kl"
    echo "$log"
    exit 1
  }
}

# train_losses FILE: the loss of each "train" line of a --metrics file,
# one per line, as printed there.
train_losses() {
  grep '"type": "train"' "$1" | sed 's/.*"loss": \([^,]*\),.*/\1/'
}

# pip_deps DIR MODULES PACKAGE...: Python packages from PyPI, installed
# into DIR once (when `import MODULES` fails there), on PYTHONPATH. Ends
# the script with 77 (ctest's skip) only when PyPI cannot be reached, 1
# when the install fails.
pip_deps() {
  local dir=$1 modules=$2
  shift 2
  if ! PYTHONPATH=$dir python3 -c "import $modules" 2> /dev/null; then
    if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/$1/', timeout=20)" 2> /dev/null; then
      echo "skipped: PyPI (https://pypi.org) cannot be reached to install $*"
      exit 77
    fi
    python3 -m pip install --quiet --disable-pip-version-check --target "$dir" "$@" || { echo "FAIL: pip install $*"; exit 1; }
  fi
  export PYTHONPATH=$dir
}

# expect_error [--not REGEX] NAME PATTERN COMMAND...: COMMAND exits 1 and
# prints PATTERN (a fixed string, on stdout or stderr), and with --not
# prints nothing matching REGEX (e.g. a sign that training started).
# Leaves the output in $out and the exit status in $rc.
expect_error() {
  local not=
  [ "$1" = --not ] && { not=$2; shift 2; }
  local name=$1 pattern=$2
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$pattern" <<< "$out" || { [ -n "$not" ] && grep -q -- "$not" <<< "$out"; }; then
    bad "$name: exit $rc, expected 1 and '$pattern'${not:+ and no '$not'}; got:"
    tail -3 <<< "$out"
    return 1
  fi
  ok "$name: $(grep -F -- "$pattern" <<< "$out" | head -1)"
}

# The fusion groups of an IR dump (standard input), one line per group in
# order of appearance: "pattern: op op ...".
kiln_ir_groups() {
  awk '
  / group [0-9]+ / {
    for (i = 1; i <= NF; i++) if ($i == "group") { g = $(i + 1); p = $(i + 2) }
    for (i = 1; i <= NF; i++) if ($i ~ /^[a-z_0-9]+\(/) { op = $i; sub(/\(.*/, "", op); break }
    if (!(g in pat)) { order[++n] = g; pat[g] = p }
    ops[g] = ops[g] " " op
  }
  END { for (k = 1; k <= n; k++) print pat[order[k]] ":" ops[order[k]] }'
}

# kiln_expect_groups N LINE GROUPS: GROUPS (kiln_ir_groups' output) has
# exactly N groups LINE; otherwise says so and exits 1.
kiln_expect_groups() {
  local got
  got=$(printf '%s\n' "$3" | grep -cxF "$2" || true)
  if [ "$got" -ne "$1" ]; then
    echo "FAIL: expected $1 group(s) '$2', found $got"
    exit 1
  fi
}
