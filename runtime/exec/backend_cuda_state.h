/* Private to the CUDA backend (backend_cuda.c, backend_cuda_gemm.c): the
 * driver's and cuBLASLt's entry points, the checks every call goes
 * through, and the backend's state. */
#ifndef KILN_BACKEND_CUDA_STATE_H
#define KILN_BACKEND_CUDA_STATE_H

#include <cublasLt.h>
#include <cuda.h>
#include <stdint.h>

#include "backend_cuda.h"
#include "cuda_lt.h"

#define STR_(x) #x
#define STR(x) STR_(x) /* the name after macro expansion: cuMemAlloc -> "cuMemAlloc_v2" */

#define CU_FUNCS(X)                                                                                        \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute)            \
    X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)       \
    X(cuCtxSetCurrent) X(cuGetErrorName) X(cuGetErrorString) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo)   \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)          \
    X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuStreamCreate) X(cuStreamDestroy)      \
    X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)       \
    X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime) X(cuModuleLoadData) X(cuModuleUnload)                     \
    X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuOccupancyMaxPotentialBlockSize)    \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuStreamBeginCapture) X(cuStreamEndCapture)          \
    X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)

#define LT_FUNCS(X)                                                                                        \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusString)                 \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)            \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)      \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                                  \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

/* Entry points of the driver and of cuBLASLt, found once per process;
 * read-only afterwards. */
typedef struct cuda_api {
#define X(f) __typeof__(&f) f;
    CU_FUNCS(X)
    LT_FUNCS(X)
#undef X
} cuda_api;

/* Found once per process by kl_cuda_backend_new; read-only afterwards. */
extern cuda_api kl_cu_api;

/* The driver's name and text of r: "CUDA_ERROR_X (text)" (per thread). */
const char *kl_cu_error(CUresult r);
/* A failed call names the call, file and line and exits. */
void kl_cu_check(CUresult r, const char *call, const char *file, int line);
void kl_lt_check(cublasStatus_t s, const char *call, const char *file, int line);
/* Every driver and cuBLASLt call is checked. */
#define CU(call) kl_cu_check((call), #call, __FILE__, __LINE__)
#define LT(call) kl_lt_check((call), #call, __FILE__, __LINE__)

/* ---- the backend's state ---- */

typedef struct cu_launch {
    CUfunction f;
    unsigned grid, block;
} cu_launch;

typedef struct cu_kernel {
    char *name;
    CUmodule mod;
    cu_launch *l;
    int nl, nbufs;
    bool split_ws; /* takes the split workspace after its buffers */
} cu_kernel;

/* A GEMM's shape: everything its cuBLASLt descriptors and algorithm
 * depend on. Compared with memcmp (zeroed before filling). */
typedef struct gemm_key {
    int dtype, out_dtype, ta, tb;
    int64_t m, n, k, batch, stride_a, stride_b, stride_c;
    int align_a, align_b, align_c;
    int beta_zero;
    int epi, align_bias, align_aux; /* kl_lt_epi; KL_LT_NONE: none */
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    bool ok; /* cuBLASLt has an algorithm (always, without an epilogue) */
} gemm_plan;

/* A pinned host buffer and a device staging buffer for one copy in
 * flight; `done` is recorded on the compute stream after the last use. */
typedef struct copy_slot {
    void *host;
    size_t host_cap;
    CUdeviceptr dev;
    size_t dev_cap;
    CUevent copied, done;
    bool used;
} copy_slot;

#define NSLOTS 8
/* Copies up to this size go straight from pinned memory on the compute
 * stream (no staging): a transfer this small is not worth overlapping. */
#define SMALL_COPY (64 << 10)
/* Larger copies than this (checkpoints) go in pinned chunks of a quarter
 * of it, without staging. */
#define LARGE_COPY (64 << 20)

typedef struct cuda_backend {
    kl_backend base;
    kl_cuda_options o;
    CUdevice dev;
    CUcontext ctx;
    int sms;
    char arch[16];
    CUstream compute, copy, comm;
    /* comm_ready: recorded on compute before a collective; comm_done: on
     * comm after it (comm_pending: not yet waited for by compute). */
    CUevent comm_ready, comm_done;
    bool comm_pending;
    /* NCCL communicators, one per kl_comm used (the world, a
     * tensor-parallel group), made on first use; reduce_scatter's padded
     * operand. */
    KL_VEC(struct kl_nccl *) nccl;
    CUdeviceptr comm_pad;
    size_t comm_pad_bytes;
    CUdeviceptr kargs;
    kl_kargs kargs_now;
    bool kargs_set, capturing;
    cublasLtHandle_t lt;
    bool lt_epilogues; /* apply the plan's GEMM epilogues (KILN_CUDA_LT_EPILOGUE, default 1) */
    CUdeviceptr workspace;
    size_t workspace_bytes;
    /* Generated kernels' split reductions' partial values
     * (KIR_CUDA_WORKSPACE_BYTES, allocated once: captured graphs keep it). */
    CUdeviceptr split_ws;
    KL_VEC(gemm_plan) gemms;
    KL_VEC(cu_kernel) kernels;
    int *index; /* open addressing over kernels by name hash; -1 empty */
    int index_cap;
    copy_slot slots[NSLOTS];
    int next_slot;
    void *bounce; /* pinned, for copy_out */
    size_t bounce_cap;
    CUevent t0, t1;
    CUevent host_ev; /* recorded where the host waits for a stream (host_wait) */
} cuda_backend;

static inline cuda_backend *cb_of(kl_backend *be)
{
    return (cuda_backend *)be;
}

static inline CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

/* GEMMs through cuBLASLt (backend_cuda_gemm.c): kl_backend.gemm and
 * .gemm_epilogue. */
void kl_cuda_gemm(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c);
bool kl_cuda_gemm_epilogue(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c, const kl_epi_ptrs *x);

#endif
