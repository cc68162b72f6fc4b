/* The simulated device: the parts' attribute tables (H200, A100), cuInit
 * and the device queries, the primary context and error names (device
 * memory and the sanitizer are sim_mem.c's). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* The parts' figures from NVIDIA's data sheets and the CUDA programming
 * guide's compute capability tables. */
static const sim_part parts[] = {
    {"h200", "NVIDIA H200 (simulated device)", 9, 0, 132, 1024, 2048, 32, 65536, 65536, 48 << 10, 227 << 10,
     228 << 10, 50 << 20, 1980000, 3201000, 6144, (size_t)143771 << 20},
    {"a100", "NVIDIA A100-SXM4-80GB (simulated device)", 8, 0, 108, 1024, 2048, 32, 65536, 65536, 48 << 10,
     163 << 10, 164 << 10, 40 << 20, 1410000, 1593000, 5120, (size_t)81920 << 20},
    /* Compute capability 6.0, older than Kiln supports: its refusal. */
    {"p100", "NVIDIA Tesla P100-SXM2-16GB (simulated device)", 6, 0, 56, 1024, 2048, 32, 65536, 65536, 48 << 10,
     48 << 10, 64 << 10, 4 << 20, 1480000, 715000, 4096, (size_t)16280 << 20},
};

const sim_part *sim_dev;
int sim_ndev;
size_t sim_mem_total; /* the part's, or KILN_SIMULATED_GPU_MEMORY */

/* ---- errors ---- */

static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult sticky;

void sim_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kiln: simulated device: %s\n", line);
}

void sim_fail(CUresult r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&err_lock);
    if (!sticky) {
        sticky = r;
        fprintf(stderr, "kiln: simulated device: %s\n", line);
    }
    pthread_mutex_unlock(&err_lock);
}

CUresult sim_sticky(void)
{
    pthread_mutex_lock(&err_lock);
    CUresult r = sticky;
    pthread_mutex_unlock(&err_lock);
    return r;
}

static const struct {
    CUresult r;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capture was not joined with the origin stream"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in this state"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

SIM_EXPORT CUresult cuGetErrorName(CUresult r, const char **s)
{
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
        if (errors[i].r == r) {
            *s = errors[i].name;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
        if (errors[i].r == r) {
            *s = errors[i].text;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- the device ---- */

/* "141G", "512M", "1073741824": bytes, or 0 when malformed. */
static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0)
        return 0;
    double mul = *end == 'G' ? 1073741824.0 : *end == 'M' ? 1048576.0 : *end == 'K' ? 1024.0 : 1.0;
    if (*end && (end[1] || mul == 1.0))
        return 0;
    return (size_t)(v * mul);
}

SIM_EXPORT CUresult cuInit(unsigned flags)
{
    if (sim_fault_spec_bad())
        return CUDA_ERROR_INVALID_VALUE; /* said why */
    SIM_FAULT(CUresult, "cuInit");
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    const char *want = getenv("KILN_SIMULATED_GPU");
    for (size_t i = 0; want && i < sizeof parts / sizeof *parts; i++)
        if (!strcmp(want, parts[i].key))
            sim_dev = &parts[i];
    if (!sim_dev)
        return CUDA_ERROR_NO_DEVICE; /* runtime/cpu/simgpu.c names the choices */
    /* KILN_SIMULATED_GPU_COUNT devices of the part (default 8, an HGX
     * node's), so that each rank of a job on one machine takes its own
     * (its local rank). Each process has its own memory count: the
     * devices share nothing but their NCCL communicators (sim_nccl.c). */
    const char *k = getenv("KILN_SIMULATED_GPU_COUNT");
    if (k && *k) {
        char *end;
        long v = strtol(k, &end, 10);
        if (*end || v < 1 || v > SIM_MAX_DEVICES) {
            sim_dev = NULL;
            sim_say("KILN_SIMULATED_GPU_COUNT must be a count from 1 to %d, not '%.40s'", SIM_MAX_DEVICES, k);
            return CUDA_ERROR_INVALID_VALUE;
        }
        sim_ndev = (int)v;
    } else {
        sim_ndev = 8;
    }
    sim_mem_total = sim_dev->mem_bytes;
    const char *m = getenv("KILN_SIMULATED_GPU_MEMORY");
    if (m && *m) {
        sim_mem_total = parse_size(m);
        if (!sim_mem_total) {
            sim_say("KILN_SIMULATED_GPU_MEMORY must be a size such as 24G or 512M, not '%.40s'", m);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    sim_san_init();
    return CUDA_SUCCESS;
}

#define NEED_INIT()                                                                                                    \
    do {                                                                                                               \
        if (!sim_dev)                                                                                                  \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
    } while (0)

SIM_EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *n)
{
    SIM_FAULT(CUresult, "cuDeviceGetCount");
    NEED_INIT();
    *n = sim_ndev;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    SIM_FAULT(CUresult, "cuDeviceGet");
    NEED_INIT();
    if (ordinal < 0 || ordinal >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    SIM_FAULT(CUresult, "cuDeviceGetName");
    NEED_INIT();
    if (d < 0 || d >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", sim_dev->name);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    SIM_FAULT(CUresult, "cuDeviceTotalMem");
    NEED_INIT();
    if (d < 0 || d >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = sim_mem_total;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    SIM_FAULT(CUresult, "cuDeviceGetAttribute");
    NEED_INIT();
    if (d < 0 || d >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    const sim_part *p = sim_dev;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = p->major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = p->minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = p->sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = p->max_threads_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = p->max_threads_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = p->max_blocks_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = p->regs_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = p->regs_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = p->smem_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = p->smem_block_optin; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = p->smem_sm; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = p->l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = p->clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = p->mem_clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = p->bus_bits; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = 2; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = d; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- the primary context ---- */

static struct CUctx_st {
    int retained;
} primary[SIM_MAX_DEVICES];
static __thread CUcontext current;

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    SIM_FAULT(CUresult, "cuDevicePrimaryCtxRetain");
    NEED_INIT();
    if (d < 0 || d >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    __atomic_add_fetch(&primary[d].retained, 1, __ATOMIC_SEQ_CST);
    *c = &primary[d];
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    NEED_INIT();
    if (d < 0 || d >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (__atomic_sub_fetch(&primary[d].retained, 1, __ATOMIC_SEQ_CST) < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* The last context released: what is still allocated leaked. */
    int held = 0;
    for (int i = 0; i < sim_ndev; i++)
        held += __atomic_load_n(&primary[i].retained, __ATOMIC_SEQ_CST);
    if (!held)
        sim_san_leaks("cuDevicePrimaryCtxRelease");
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    SIM_FAULT(CUresult, "cuCtxSetCurrent");
    NEED_INIT();
    if (c && (c < primary || c >= primary + sim_ndev))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

/* Kiln's loader checks for this symbol: the library is the simulator. */
SIM_EXPORT const char *kiln_simgpu_part(void)
{
    return sim_dev ? sim_dev->name : "simulated device (not started)";
}
