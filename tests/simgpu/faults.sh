#!/usr/bin/env bash
# The CUDA backend's error paths on the simulated device, each made to
# happen on purpose: KILN_SIMGPU_FAIL=FUNCTION:N fails the Nth call of a
# driver, cuBLASLt, NVRTC or NCCL function with an error code its API
# documents (tests/simgpu/sim_fault.c), KILN_SIMGPU_ABSENT hides a
# library, KILN_SIMULATED_GPU=p100 is a part too old for Kiln. Each run is
# checked against what Kiln documents for it, never only for "it ran":
#   - a refusal or a fatal error: exit status 1 (no signal, no sanitizer
#     report, no internal error), the error naming the call (file and
#     line) or the reason, and the injected failure said to have fired;
#   - a fallback: the run goes on (to the CPU, or without CUDA graphs, or
#     to PTX) and its losses are the CPU backend's (bit for bit on the
#     CPU, within 1e-4 relative on the simulated device, as train.sh).
#   faults.sh KILN CLASS   CLASS: start | run | graph | nvrtc | nccl
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 class=$2
new_tmpdir
build_example mlp "$tmp/mlp"
common=(--steps 6 --log-every 1 --seed 1 --eval-every 0 --data synthetic:2000)
"$tmp/mlp" --device cpu "${common[@]}" --metrics "$tmp/cpu.json" > "$tmp/cpu.log" 2>&1 ||
  { bad "the CPU run failed"; tail -3 "$tmp/cpu.log"; exit 1; }
train_losses "$tmp/cpu.json" > "$tmp/cpu.losses"

# fired OUT NAME: the KILN_SIMGPU_FAIL of the environment was hit (when set,
# and not REFUSED), and nothing else went wrong.
fired() {
  [ -z "${KILN_SIMGPU_FAIL:-}" ] || [ -n "${REFUSED:-}" ] || grep -q "simulated device: KILN_SIMGPU_FAIL: call [0-9]* of .* fails with" <<< "$1" ||
    { bad "$2: the injected failure ($KILN_SIMGPU_FAIL) never fired"; return 1; }
  ! grep -q "sanitizer:\|internal error" <<< "$1" || { bad "$2: $(grep -m1 "sanitizer:\|internal error" <<< "$1")"; return 1; }
}

# fails NAME PATTERN [VAR=VALUE...]: --device cuda ends with exit 1 and PATTERN.
fails() {
  local name=$1 pattern=$2
  shift 2
  (export KILN_SIMULATED_GPU=h200 "$@"
   expect_error "$name" "$pattern" "$tmp/mlp" --device cuda "${common[@]}" && fired "$out" "$name"
   exit $fail) || fail=1
}

# agree NAME FILE BOUND: FILE's losses against the CPU run's.
agree() {
  train_losses "$2" > "$tmp/x.losses"
  paste "$tmp/cpu.losses" "$tmp/x.losses" | awk -v b="$3" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > b * ($1 < 0 ? -$1 : $1)) bad = 1; n++ }
    END { exit (bad || n != '"$(wc -l < "$tmp/cpu.losses")"') }' && ok "$1: its losses are the CPU run's" ||
    bad "$1: its losses differ from the CPU run's"
}

# recovers NAME PATTERN DEVICE [VAR=VALUE...]: the run (--device DEVICE, or
# none) prints PATTERN, exits 0 and trains to the CPU run's losses.
recovers() {
  local name=$1 pattern=$2 dev=$3
  shift 3
  local flag=()
  [ "$dev" = auto ] || flag=(--device "$dev")
  (export KILN_SIMULATED_GPU=h200 "$@"
   out=$("$tmp/mlp" "${flag[@]}" "${common[@]}" --metrics "$tmp/r.json" 2>&1)
   rc=$?
   [ $rc -eq 0 ] && grep -qF -- "$pattern" <<< "$out" ||
     { bad "$name: exit $rc, expected 0 and '$pattern'; got:"; tail -3 <<< "$out"; exit 1; }
   ok "$name: $(grep -F -m1 -- "$pattern" <<< "$out")"
   fired "$out" "$name" || exit 1
   agree "$name" "$tmp/r.json" "$([ "$dev" = auto ] && echo 0 || echo 1e-4)"
   exit $fail) || fail=1
}

case $class in
start)
  # Refused at start: with --device cuda an error, without it the CPU.
  fails "cuInit fails" "--device cuda: the CUDA driver does not start: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" \
    KILN_SIMGPU_FAIL=cuInit:1
  recovers "cuInit fails, no --device" \
    "kiln: no usable GPU (the CUDA driver does not start: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (system has unsupported display driver / cuda driver combination)); training on the CPU" \
    auto KILN_SIMGPU_FAIL=cuInit:1
  fails "no device count" "no GPU found: CUDA_ERROR_NOT_INITIALIZED (initialization error)" KILN_SIMGPU_FAIL=cuDeviceGetCount:1
  fails "a device query fails" "cannot query GPU 0: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)" \
    KILN_SIMGPU_FAIL=cuDeviceGetAttribute:2
  fails "no context" "cannot open a context on NVIDIA H200 (simulated device): CUDA_ERROR_OUT_OF_MEMORY (out of memory)" \
    KILN_SIMGPU_FAIL=cuDevicePrimaryCtxRetain:1
  recovers "the context cannot be made current" \
    "no usable GPU (cannot make the context on NVIDIA H200 (simulated device) current: CUDA_ERROR_INVALID_CONTEXT" \
    auto KILN_SIMGPU_FAIL=cuCtxSetCurrent:1
  fails "an old part" "NVIDIA Tesla P100-SXM2-16GB (simulated device) has compute capability 6.0; Kiln needs 7.0 or newer" \
    KILN_SIMULATED_GPU=p100
  fails "no driver" "--device cuda: no CUDA driver (libcuda.so.1: cannot open shared object file" KILN_SIMGPU_ABSENT=libcuda
  fails "no cuBLASLt" "--device cuda: no cuBLASLt (libcublasLt.so.13: cannot open shared object file" \
    KILN_SIMGPU_ABSENT=libcublasLt
  fails "no NVRTC" "--device cuda: cannot open NVRTC: libnvrtc.so.13: cannot open shared object file" \
    KILN_SIMGPU_ABSENT=libnvrtc
  fails "nvrtcVersion fails" "cannot open NVRTC: nvrtcVersion failed: NVRTC_ERROR_INVALID_INPUT" KILN_SIMGPU_FAIL=nvrtcVersion:1
  fails "cuBLASLt does not start" "cublasLtCreate(&cb->lt) failed: CUBLAS_STATUS_NOT_INITIALIZED" \
    KILN_SIMGPU_FAIL=cublasLtCreate:1
  fails "no stream" "cuStreamCreate(&cb->copy, CU_STREAM_NON_BLOCKING) failed: CUDA_ERROR_OUT_OF_MEMORY" \
    KILN_SIMGPU_FAIL=cuStreamCreate:2
  # No simulated device, and no GPU (lib.sh hides any: CUDA_VISIBLE_DEVICES
  # is empty): the CPU, as on any machine without one.
  (unset KILN_SIMULATED_GPU
   out=$("$tmp/mlp" "${common[@]}" --metrics "$tmp/nodrv.json" 2>&1) &&
     grep -q "kiln: no usable GPU (.*); training on the CPU" <<< "$out" ||
     { bad "without a GPU: no fallback to the CPU"; tail -3 <<< "$out"; exit 1; }
   ok "without a GPU: $(grep -m1 -o 'no usable GPU (.*); training on the CPU' <<< "$out")"
   agree "without a GPU" "$tmp/nodrv.json" 0
   exit $fail) || fail=1
  # The knobs themselves refuse what they do not know.
  fails "a bad KILN_SIMGPU_FAIL" "KILN_SIMGPU_FAIL must be FUNCTION:N[,FUNCTION:N...] (at most 16), each a function the simulated device can fail (tests/simgpu/sim_fault.c) and N its call from 1, not 'cuBogus:1'" \
    KILN_SIMGPU_FAIL=cuBogus:1 REFUSED=1
  fails "a bad KILN_SIMGPU_ABSENT" "KILN_SIMGPU_ABSENT must name libcuda, libcublasLt, libnvrtc, libnccl or libnvidia-ml, not 'libfoo'" \
    KILN_SIMGPU_ABSENT=libfoo
  ;;
run)
  # Fatal after start-up: the failing call, file and line; exit 1.
  fails "pinned memory" "cuMemHostAlloc(p, n, 0) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" \
    KILN_SIMGPU_FAIL=cuMemHostAlloc:1
  fails "a copy to the device" "cuMemcpyHtoDAsync(" KILN_SIMGPU_FAIL=cuMemcpyHtoDAsync:3
  fails "a copy to the host" "cuMemcpyDtoHAsync(cb->bounce" KILN_SIMGPU_FAIL=cuMemcpyDtoHAsync:1
  fails "a launch" "cuLaunchKernel(k->l[i].f, k->l[i].grid, 1, 1, k->l[i].block, 1, 1, 0, cb->compute, params, NULL) failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" \
    KILN_SIMGPU_FAIL=cuLaunchKernel:3
  fails "an earlier launch's error" "cuEventSynchronize(e) failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" \
    KILN_SIMGPU_FAIL=cuEventSynchronize:2
  fails "a kernel image" "cannot load kernel" KILN_SIMGPU_FAIL=cuModuleLoadData:2
  fails "a kernel's function" "cuModuleGetFunction(&cl->f, ck.mod, L->fn) failed: CUDA_ERROR_NOT_FOUND" \
    KILN_SIMGPU_FAIL=cuModuleGetFunction:1
  fails "a GEMM" "cublasLtMatmul(cb->lt, " KILN_SIMGPU_FAIL=cublasLtMatmul:2
  fails "cuBLASLt's heuristic" "cublasLtMatmulAlgoGetHeuristic failed: CUBLAS_STATUS_INVALID_VALUE" \
    KILN_SIMGPU_FAIL=cublasLtMatmulAlgoGetHeuristic:1
  fails "cuBLASLt without an algorithm" "has no algorithm for a f32 x f32 -> f32 GEMM of" KILN_SIMGPU_LT_NO_ALGORITHM=all
  fails "a GEMM's layout" "cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld) failed: CUBLAS_STATUS_ALLOC_FAILED" \
    KILN_SIMGPU_FAIL=cublasLtMatrixLayoutCreate:1
  ;;
graph)
  # A step that cannot be recorded as a CUDA graph runs without one.
  recovers "capture refused" \
    "kiln: note: cannot capture a CUDA graph: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (operation not permitted when stream is capturing); running without graphs" \
    cuda KILN_SIMGPU_FAIL=cuStreamBeginCapture:1
  recovers "capture invalidated" \
    "kiln: note: recording the step as a CUDA graph failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (operation failed due to a previous error during capture); running without graphs" \
    cuda KILN_SIMGPU_FAIL=cuStreamEndCapture:1
  recovers "no memory for the graph" \
    "kiln: note: recording the step as a CUDA graph failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory); running without graphs" \
    cuda KILN_SIMGPU_FAIL=cuGraphInstantiate:1
  fails "a graph launch" "cuGraphLaunch((CUgraphExec)graph, cb_of(be)->compute) failed: CUDA_ERROR_INVALID_VALUE" \
    KILN_SIMGPU_FAIL=cuGraphLaunch:2
  ;;
nvrtc)
  # A kernel cache of this test's own (private, as Kiln wants it), warmed
  # once; before each run one CUBIN is taken out of it, so that NVRTC
  # compiles that kernel alone and the failure hits it. The host builds
  # of the kernels stay in the suite's cache.
  cache=$tmp/cache
  mkdir -m 700 "$cache"
  ln -s "${KILN_CACHE_DIR:?}/simgpu" "$cache/simgpu"
  export KILN_CACHE_DIR=$cache
  recovers "a cold kernel cache" "kiln: NVRTC" cuda
  one_out() { local f; f=$(find "$cache/cuda" -name '*.cubin' | sort | head -1); rm -f "$f"; }
  one_out
  fails "a compile error" "NVRTC could not compile kernel" KILN_SIMGPU_FAIL=nvrtcCompileProgram:1
  grep -q "^    1  " <<< "$(KILN_SIMULATED_GPU=h200 KILN_SIMGPU_FAIL=nvrtcCompileProgram:1 "$tmp/mlp" --device cuda "${common[@]}" 2>&1)" &&
    ok "the program is printed with line numbers" || bad "no numbered program after the compile error"
  fails "no program" "nv.nvrtcCreateProgram(&prog, j->src, j->name, 0, NULL, NULL) failed: NVRTC_ERROR_OUT_OF_MEMORY" \
    KILN_SIMGPU_FAIL=nvrtcCreateProgram:1
  fails "no CUBIN size" "nv.nvrtcGetCUBINSize(prog, &size) failed: NVRTC_ERROR_INVALID_PROGRAM" \
    KILN_SIMGPU_FAIL=nvrtcGetCUBINSize:1
  fails "no CUBIN" "nv.nvrtcGetCUBIN(prog, j->image) failed: NVRTC_ERROR_INVALID_PROGRAM" KILN_SIMGPU_FAIL=nvrtcGetCUBIN:1
  fails "no PTX" "nv.nvrtcGetPTXSize(prog, &size) failed: NVRTC_ERROR_INVALID_PROGRAM" KILN_CUDA_PTX=1 \
    KILN_SIMGPU_FAIL=nvrtcGetPTXSize:1
  # An NVRTC older than the part: PTX for the newest target it has, which
  # the driver compiles; the run trains as with CUBINs.
  recovers "an NVRTC older than the part" "sm_90 is newer than NVRTC" cuda KILN_SIMGPU_NVRTC_ARCHS=75,80,86
  recovers "PTX on request" "kiln: NVRTC" cuda KILN_CUDA_PTX=1
  ;;
nccl)
  # Two ranks on the simulated device: a failing NCCL call, or no NCCL,
  # ends the job (non-zero, no hang) with an error naming the rank, the
  # call and the collective.
  job() { # NAME PATTERN VAR=VALUE...
    local name=$1 pattern=$2
    shift 2
    env KILN_SIMULATED_GPU=h200 "$@" timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$tmp/mlp" --device cuda \
      "${common[@]}" --batch 24 > "$tmp/job.out" 2> "$tmp/job.err"
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -lt 128 ] && grep -qF -- "$pattern" "$tmp/job.err" &&
       ! grep -q "sanitizer:\|internal error" "$tmp/job.err"; then
      ok "$name: exit $rc: $(grep -F -m1 -- "$pattern" "$tmp/job.err")"
    else
      bad "$name: exit $rc, expected an error exit and '$pattern'"; grep -v '^\[' "$tmp/job.err" | head -5
    fi
  }
  job "an all-reduce fails" "of 2: ncclAllReduce (all_reduce sum of" KILN_SIMGPU_FAIL=ncclAllReduce:1
  job "the communicator does not start" "of 2: ncclCommInitRank (the communicator's start of its id, 1 i64) failed: unhandled system error" \
    KILN_SIMGPU_FAIL=ncclCommInitRank:1
  job "NCCL does not start" "of 2: collectives on the GPU need NCCL: libnccl.so.2: ncclGetVersion failed" \
    KILN_SIMGPU_FAIL=ncclGetVersion:1
  job "no NCCL" "of 2: collectives on the GPU need NCCL: cannot open libnccl.so.2 (libnccl.so.2: cannot open shared object file: No such file or directory (KILN_SIMGPU_ABSENT)); install NCCL" \
    KILN_SIMGPU_ABSENT=libnccl
  ;;
*)
  echo "unknown class $class"; exit 2 ;;
esac
exit $fail
