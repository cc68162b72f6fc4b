/* The CUDA backend's table of driver and cuBLASLt entry points (filled by
 * kl_cuda_backend_new) and the checks every call goes through
 * (backend_cuda_state.h). */
#include <stdio.h>
#include <stdlib.h>

#include "backend_cuda_state.h"

cuda_api kl_cu_api;

const char *kl_cu_error(CUresult r)
{
    const char *name = NULL, *msg = NULL;
    if (kl_cu_api.cuGetErrorName)
        kl_cu_api.cuGetErrorName(r, &name);
    if (kl_cu_api.cuGetErrorString)
        kl_cu_api.cuGetErrorString(r, &msg);
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s (%s)", name ? name : "?", msg ? msg : "unknown error");
    return buf;
}

KL_NORETURN static void fatal(const char *file, int line, const char *call, const char *why)
{
    kl_error("%s:%d: %s failed: %s", file, line, call, why);
    exit(1);
}

void kl_cu_check(CUresult r, const char *call, const char *file, int line)
{
    if (r != CUDA_SUCCESS)
        fatal(file, line, call, kl_cu_error(r));
}

void kl_lt_check(cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        fatal(file, line, call, kl_cu_api.cublasLtGetStatusString ? kl_cu_api.cublasLtGetStatusString(s) : "cuBLASLt error");
}
