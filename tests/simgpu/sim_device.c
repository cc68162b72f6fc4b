/* The simulated device: the parts' attribute tables (H200, A100), cuInit
 * and the device queries, the primary context, error names, and memory
 * (device allocations checked against the part's size, pinned host
 * memory). Device memory is host memory from malloc, so the emulated
 * kernels use device pointers directly; every allocation is kept in a
 * table, so a copy or memset outside one is refused as a GPU would fault. */
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
};

const sim_part *sim_dev;
int sim_ndev;
static size_t mem_total; /* the part's, or KILN_SIMULATED_GPU_MEMORY */

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
    mem_total = sim_dev->mem_bytes;
    const char *m = getenv("KILN_SIMULATED_GPU_MEMORY");
    if (m && *m) {
        mem_total = parse_size(m);
        if (!mem_total) {
            sim_say("KILN_SIMULATED_GPU_MEMORY must be a size such as 24G or 512M, not '%.40s'", m);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
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
    NEED_INIT();
    *n = sim_ndev;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    NEED_INIT();
    if (ordinal < 0 || ordinal >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
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
    NEED_INIT();
    if (d < 0 || d >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = mem_total;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
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
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    NEED_INIT();
    if (c && (c < primary || c >= primary + sim_ndev))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

typedef struct sim_alloc {
    char *p;
    size_t n;
    bool pinned; /* host memory from cuMemHostAlloc */
} sim_alloc;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_alloc *allocs;
static int nallocs, cap_allocs;
static size_t mem_used;

static int find_alloc(const void *p, size_t n, bool pinned)
{
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].pinned == pinned && (const char *)p >= allocs[i].p &&
            (const char *)p + n <= allocs[i].p + allocs[i].n)
            return i;
    return -1;
}

bool sim_mem_valid(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&mem_lock);
    bool ok = find_alloc((const void *)(uintptr_t)p, n, false) >= 0;
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

bool sim_host_pinned(const void *p, size_t n)
{
    pthread_mutex_lock(&mem_lock);
    bool ok = find_alloc(p, n, true) >= 0;
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

static CUresult add_alloc(void **out, size_t n, bool pinned)
{
    /* Device memory comes in 2 MiB pages' granularity on a GPU; the
     * simulator counts 512-byte units (cuMemAlloc aligns to 256). */
    size_t charged = (n + 511) / 512 * 512;
    pthread_mutex_lock(&mem_lock);
    if (!pinned && mem_used + charged > mem_total) {
        pthread_mutex_unlock(&mem_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = NULL;
    if (posix_memalign(&p, 256, charged)) {
        pthread_mutex_unlock(&mem_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (nallocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, sizeof *allocs * (size_t)cap_allocs);
    }
    allocs[nallocs++] = (sim_alloc){p, n, pinned};
    if (!pinned) {
        mem_used += charged;
        /* A GPU's new memory holds whatever was there: here all-ones
         * bytes, a NaN in every float type (and -1 in integers), so a
         * read of memory nothing wrote shows in the results. */
        memset(p, 0xff, charged);
    }
    pthread_mutex_unlock(&mem_lock);
    *out = p;
    return CUDA_SUCCESS;
}

/* Freed device memory is poisoned (all-ones bytes, as new memory) and
 * held back from reuse while the most recent QUARANTINE_BYTES of frees
 * fit: a later copy, memset or GEMM operand there is refused as outside
 * every allocation, and a kernel reading it reads NaNs. */
#define QUARANTINE_BYTES ((size_t)256 << 20)
static struct {
    void *p;
    size_t n;
} quarantine[4096];
static int q_head, q_count;
static size_t q_bytes;

static void quarantine_add(void *p, size_t n)
{
    memset(p, 0xff, n);
    while (q_count && (q_bytes + n > QUARANTINE_BYTES || q_count == (int)(sizeof quarantine / sizeof *quarantine))) {
        free(quarantine[q_head].p);
        q_bytes -= quarantine[q_head].n;
        q_head = (q_head + 1) % (int)(sizeof quarantine / sizeof *quarantine);
        q_count--;
    }
    if (n > QUARANTINE_BYTES) {
        free(p);
        return;
    }
    int at = (q_head + q_count) % (int)(sizeof quarantine / sizeof *quarantine);
    quarantine[at].p = p, quarantine[at].n = n;
    q_bytes += n;
    q_count++;
}

static CUresult remove_alloc(void *p, bool pinned)
{
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].p == p && allocs[i].pinned == pinned) {
            size_t charged = (allocs[i].n + 511) / 512 * 512;
            if (!pinned)
                mem_used -= charged;
            allocs[i] = allocs[--nallocs];
            if (pinned)
                free(p);
            else
                quarantine_add(p, charged);
            pthread_mutex_unlock(&mem_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mem_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes)
{
    NEED_INIT();
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_sticky();
    if (r)
        return r;
    void *p;
    if ((r = add_alloc(&p, bytes, false)))
        return r;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemFree(CUdeviceptr p)
{
    NEED_INIT();
    if (!p)
        return CUDA_SUCCESS;
    /* The queued work that may still use it runs first. */
    sim_device_idle();
    return remove_alloc((void *)(uintptr_t)p, false);
}

SIM_EXPORT CUresult cuMemGetInfo(size_t *free_b, size_t *total)
{
    NEED_INIT();
    pthread_mutex_lock(&mem_lock);
    *free_b = mem_total - mem_used;
    *total = mem_total;
    pthread_mutex_unlock(&mem_lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags)
{
    NEED_INIT();
    if (!p || !bytes || flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return add_alloc(p, bytes, true);
}

SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    NEED_INIT();
    return remove_alloc(p, true);
}

/* Kiln's loader checks for this symbol: the library is the simulator. */
SIM_EXPORT const char *kiln_simgpu_part(void)
{
    return sim_dev ? sim_dev->name : "simulated device (not started)";
}
