/* Fault injection (KILN_SIMGPU_FAIL): the Nth call of a function the
 * simulated device stands in for fails with an error code its API
 * documents for it, so that every error path of Kiln's host code can be
 * run on purpose (tests/simgpu/faults.sh).
 *
 *   KILN_SIMGPU_FAIL=cuMemAlloc:4,cublasLtMatmul:2
 *
 * Calls are counted per process from 1, in the order they are made; each
 * entry fires once. A failing call does what the real one does when it
 * fails with that code: nothing (an allocation allocates nothing, a
 * launch queues nothing; cuStreamEndCapture still ends the capture). The
 * simulator says which call it failed ("simulated device: KILN_SIMGPU_FAIL:
 * call 4 of cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY"), so a test
 * can tell an injected failure from a real one. A name not in the table
 * below, or a count that is not a number from 1, is refused: cuInit then
 * fails with CUDA_ERROR_INVALID_VALUE and says why. */
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <nccl.h>
#include <nvrtc.h>

#include "sim.h"

/* Each function that can be made to fail, with the code it fails with. */
#define DRV(f, code) {#f, code, #code},
#define LTF(f, code) {#f, code, #code},
#define NVR(f, code) {#f, code, #code},
#define NCC(f, code) {#f, code, #code},
static const struct {
    const char *name;
    int code;
    const char *code_name;
} points[] = {
    /* the driver */
    DRV(cuInit, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    DRV(cuDeviceGetCount, CUDA_ERROR_NOT_INITIALIZED)
    DRV(cuDeviceGet, CUDA_ERROR_INVALID_DEVICE)
    DRV(cuDeviceGetAttribute, CUDA_ERROR_INVALID_DEVICE)
    DRV(cuDeviceGetName, CUDA_ERROR_INVALID_DEVICE)
    DRV(cuDeviceTotalMem, CUDA_ERROR_INVALID_DEVICE)
    DRV(cuDevicePrimaryCtxRetain, CUDA_ERROR_OUT_OF_MEMORY)
    DRV(cuCtxSetCurrent, CUDA_ERROR_INVALID_CONTEXT)
    DRV(cuMemAlloc, CUDA_ERROR_OUT_OF_MEMORY)
    DRV(cuMemFree, CUDA_ERROR_INVALID_VALUE)
    DRV(cuMemGetInfo, CUDA_ERROR_INVALID_CONTEXT)
    DRV(cuMemHostAlloc, CUDA_ERROR_OUT_OF_MEMORY)
    DRV(cuMemcpyHtoDAsync, CUDA_ERROR_INVALID_VALUE)
    DRV(cuMemcpyDtoHAsync, CUDA_ERROR_INVALID_VALUE)
    DRV(cuMemcpyDtoDAsync, CUDA_ERROR_INVALID_VALUE)
    DRV(cuMemsetD8Async, CUDA_ERROR_INVALID_VALUE)
    DRV(cuMemsetD32Async, CUDA_ERROR_INVALID_VALUE)
    DRV(cuStreamCreate, CUDA_ERROR_OUT_OF_MEMORY)
    /* An error of earlier asynchronous work, which the waits return. */
    DRV(cuStreamSynchronize, CUDA_ERROR_ILLEGAL_ADDRESS)
    DRV(cuStreamWaitEvent, CUDA_ERROR_INVALID_HANDLE)
    DRV(cuEventCreate, CUDA_ERROR_OUT_OF_MEMORY)
    DRV(cuEventRecord, CUDA_ERROR_INVALID_HANDLE)
    DRV(cuEventSynchronize, CUDA_ERROR_ILLEGAL_ADDRESS)
    DRV(cuEventQuery, CUDA_ERROR_ILLEGAL_ADDRESS)
    DRV(cuEventElapsedTime, CUDA_ERROR_INVALID_HANDLE)
    DRV(cuModuleLoadData, CUDA_ERROR_NO_BINARY_FOR_GPU)
    DRV(cuModuleGetFunction, CUDA_ERROR_NOT_FOUND)
    DRV(cuFuncGetAttribute, CUDA_ERROR_INVALID_HANDLE)
    DRV(cuOccupancyMaxPotentialBlockSize, CUDA_ERROR_INVALID_VALUE)
    DRV(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUDA_ERROR_INVALID_VALUE)
    DRV(cuLaunchKernel, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    DRV(cuStreamBeginCapture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    DRV(cuStreamEndCapture, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    DRV(cuGraphInstantiate, CUDA_ERROR_OUT_OF_MEMORY)
    DRV(cuGraphLaunch, CUDA_ERROR_INVALID_VALUE)
    /* cuBLASLt */
    LTF(cublasLtCreate, CUBLAS_STATUS_NOT_INITIALIZED)
    LTF(cublasLtMatmulDescCreate, CUBLAS_STATUS_ALLOC_FAILED)
    LTF(cublasLtMatmulDescSetAttribute, CUBLAS_STATUS_INVALID_VALUE)
    LTF(cublasLtMatrixLayoutCreate, CUBLAS_STATUS_ALLOC_FAILED)
    LTF(cublasLtMatrixLayoutSetAttribute, CUBLAS_STATUS_INVALID_VALUE)
    LTF(cublasLtMatmulPreferenceCreate, CUBLAS_STATUS_ALLOC_FAILED)
    LTF(cublasLtMatmulPreferenceSetAttribute, CUBLAS_STATUS_INVALID_VALUE)
    LTF(cublasLtMatmulAlgoGetHeuristic, CUBLAS_STATUS_INVALID_VALUE)
    LTF(cublasLtMatmul, CUBLAS_STATUS_EXECUTION_FAILED)
    /* NVRTC */
    NVR(nvrtcVersion, NVRTC_ERROR_INVALID_INPUT)
    NVR(nvrtcCreateProgram, NVRTC_ERROR_OUT_OF_MEMORY)
    NVR(nvrtcCompileProgram, NVRTC_ERROR_COMPILATION)
    NVR(nvrtcGetCUBINSize, NVRTC_ERROR_INVALID_PROGRAM)
    NVR(nvrtcGetCUBIN, NVRTC_ERROR_INVALID_PROGRAM)
    NVR(nvrtcGetPTXSize, NVRTC_ERROR_INVALID_PROGRAM)
    NVR(nvrtcGetPTX, NVRTC_ERROR_INVALID_PROGRAM)
    /* NCCL */
    NCC(ncclGetVersion, ncclSystemError)
    NCC(ncclGetUniqueId, ncclSystemError)
    NCC(ncclCommInitRank, ncclSystemError)
    NCC(ncclAllReduce, ncclUnhandledCudaError)
    NCC(ncclReduceScatter, ncclUnhandledCudaError)
    NCC(ncclAllGather, ncclUnhandledCudaError)
    NCC(ncclBroadcast, ncclUnhandledCudaError)
    NCC(ncclCommDestroy, ncclInvalidArgument)
};
#define NPOINTS (sizeof points / sizeof *points)

#define MAX_FAULTS 16
static struct {
    int point; /* index in points */
    long at;   /* the call that fails */
} faults[MAX_FAULTS];
static int nfaults;
static long calls[NPOINTS];
static bool bad_spec;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int point_of(const char *name, size_t len)
{
    for (size_t i = 0; i < NPOINTS; i++)
        if (strlen(points[i].name) == len && !strncmp(points[i].name, name, len))
            return (int)i;
    return -1;
}

static void parse(void)
{
    const char *v = getenv("KILN_SIMGPU_FAIL");
    if (!v || !*v)
        return;
    for (const char *s = v; *s;) {
        const char *colon = strchr(s, ':'), *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        int p = colon && colon < end ? point_of(s, (size_t)(colon - s)) : -1;
        char *num_end = NULL;
        long at = colon && colon < end ? strtol(colon + 1, &num_end, 10) : 0;
        if (p < 0 || at < 1 || num_end != end || nfaults == MAX_FAULTS) {
            sim_say("KILN_SIMGPU_FAIL must be FUNCTION:N[,FUNCTION:N...] (at most %d), each a function the simulated "
                    "device can fail (tests/simgpu/sim_fault.c) and N its call from 1, not '%.*s'",
                    MAX_FAULTS, (int)(end - s), s);
            bad_spec = true;
            nfaults = 0;
            return;
        }
        faults[nfaults].point = p;
        faults[nfaults++].at = at;
        s = *end ? end + 1 : end;
    }
}

bool sim_fault_spec_bad(void)
{
    pthread_once(&once, parse);
    return bad_spec;
}

int sim_fault(const char *fn)
{
    pthread_once(&once, parse);
    if (!nfaults)
        return 0;
    size_t len = strlen(fn);
    int p = point_of(fn, len);
    if (p < 0)
        return 0;
    long n = __atomic_add_fetch(&calls[p], 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < nfaults; i++)
        if (faults[i].point == p && faults[i].at == n) {
            sim_say("KILN_SIMGPU_FAIL: call %ld of %s fails with %s", n, fn, points[p].code_name);
            return points[p].code;
        }
    return 0;
}
