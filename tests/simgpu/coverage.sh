#!/usr/bin/env bash
# Line coverage (gcov) of the CUDA backend's host code by the simulated
# device's tests: builds the tree with --coverage into its own build
# directory (build-coverage, or $KILN_COVERAGE_BUILD; -DKILN_COVERAGE=ON,
# which the executables kiln build links get too), runs the tests
# labelled simgpu there (and, without a regex, the suite's other tests of
# these files: the two occupancy checks that read NVRTC's ptxas logs and
# comm.nccl, nccl.c through a fake libnccl), and prints, per file, the
# lines executed and
# the lines never executed (file:line: source). Not part of the suite
# (a full build and the simgpu tests: minutes); run by hand from the
# repository root:
#   tests/simgpu/coverage.sh [CTEST_REGEX]   (default: every simgpu test)
#   tests/simgpu/coverage.sh --report        (the last run's counts again)
# Exits 1 when the total is under 90% (the issue's target).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
[ -f tests/simgpu/train.sh ] || { echo "run from the repository root" >&2; exit 2; }
bdir=${KILN_COVERAGE_BUILD:-build-coverage}
files=(runtime/exec/backend_cuda.c runtime/exec/backend_cuda_gemm.c runtime/exec/backend_cuda_api.c
       runtime/exec/nvrtc.c runtime/exec/nccl.c)
if [ "${1:-}" != --report ]; then
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$bdir" "${launcher[@]}" -DKILN_COVERAGE=ON -DCMAKE_C_FLAGS= -DCMAKE_EXE_LINKER_FLAGS= \
  -DCMAKE_SHARED_LINKER_FLAGS= > "$bdir.configure.log" 2>&1 || { tail "$bdir.configure.log"; exit 2; }
cmake --build "$bdir" -j2 --target kiln_cli kiln_simgpu simgpu_api_check simgpu_nccl_check simgpu_san_check kernel_check \
  occupancy_check nccl_check fake_nccl fake_nccl_partial > "$bdir.build.log" 2>&1 || { tail -20 "$bdir.build.log"; exit 2; }
# The kernels' host builds and NVRTC's images are the same as the plain
# build's: start from its cache when there is one.
[ -d build/kiln-cache ] && [ ! -d "$bdir/kiln-cache" ] && cp -a build/kiln-cache "$bdir/kiln-cache"
find "$bdir" -name '*.gcda' -delete
ctest --test-dir "$bdir" -L simgpu ${1:+-R "$1"} -j2 --output-on-failure > "$bdir.ctest.log" 2>&1 ||
  echo "some simgpu tests failed (see $bdir.ctest.log); coverage of what ran:"
# NVRTC's ptxas log reader (the occupancy checks, about 11 s) and nccl.c's
# loading and failures through a fake libnccl (comm.nccl, a second).
[ -n "${1:-}" ] || ctest --test-dir "$bdir" -R '^(cuda\.occupancy_fails|cudaattn\.occupancy|comm\.nccl)$' --output-on-failure \
  >> "$bdir.ctest.log" 2>&1 || echo "the occupancy checks or comm.nccl failed (see $bdir.ctest.log)"
fi
objdir=$bdir/CMakeFiles/kiln_runtime_exec.dir/runtime/exec
new_tmpdir
total=0 hit=0
for f in "${files[@]}"; do
  gcda=$PWD/$objdir/$(basename "$f").gcda
  (cd "$tmp" && gcov -o "$(dirname "$gcda")" "$gcda" > /dev/null 2>&1)
  g=$tmp/$(basename "$f").gcov
  [ -f "$g" ] || { echo "$f: no coverage data"; continue; }
  n=$(grep -cE '^ *([0-9]+\*?|#####):' "$g")
  miss=$(grep -cE '^ *#####:' "$g")
  total=$((total + n)) hit=$((hit + n - miss))
  awk -v f="$f" -v n="$n" -v m="$miss" 'BEGIN { printf "%s: %d of %d lines executed (%.1f%%)\n", f, n - m, n, n ? 100 * (n - m) / n : 0 }'
  awk -F: -v f="$f" '/^ *#####:/ { line = $2 + 0; src = substr($0, index($0, $3)); gsub(/^ +/, "", src); printf "  %s:%d: %s\n", f, line, src }' "$g"
done
awk -v t="$total" -v h="$hit" 'BEGIN { printf "total: %d of %d lines executed (%.1f%%)\n", h, t, t ? 100 * h / t : 0; exit (t && h * 10 >= t * 9) ? 0 : 1 }'
