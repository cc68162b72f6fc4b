/* The simulated device's driver API on its own (simgpu.api): work is
 * asynchronous (with KILN_SIMGPU_DELAY_MS, a host read before
 * cuStreamSynchronize and a second stream without cuStreamWaitEvent see
 * stale memory, every time), the waits make both right, graphs replay
 * their recorded work, launches and copies outside the limits are
 * refused, and cuMemGetInfo counts allocations against the part. It
 * makes those mistakes on purpose, so it runs with the sanitizer off
 * (KILN_SIMGPU_SANITIZE=0; simgpu.san.* expect its reports).
 *   api_check LIBRARY   (KILN_SIMULATED_GPU and KILN_SIMGPU_DELAY_MS set by the test) */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUNCS(X)                                                                                                       \
    X(cuInit) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemHostAlloc) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)   \
    X(cuMemsetD32Async) X(cuStreamCreate) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate)                \
    X(cuEventRecord) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)              \
    X(cuEventDestroy) X(cuGraphDestroy) X(cuGraphExecDestroy)

#define STR_(x) #x
#define STR(x) STR_(x)
#define X(f) static __typeof__(&f) p_##f;
FUNCS(X)
#undef X

static int fails;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    fails += !ok;
}

int main(int argc, char **argv)
{
    void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        printf("FAIL: cannot open %s: %s\n", argc > 1 ? argv[1] : "(no library given)", dlerror());
        return 1;
    }
#define X(f)                                                                                                           \
    if (!(p_##f = (__typeof__(&f))dlsym(h, STR(f)))) {                                                                 \
        printf("FAIL: no %s\n", STR(f));                                                                               \
        return 1;                                                                                                      \
    }
    FUNCS(X)
#undef X
    check(p_cuInit(0) == CUDA_SUCCESS, "cuInit");
    size_t free0, total;
    p_cuMemGetInfo(&free0, &total);
    CUdeviceptr a, b;
    check(p_cuMemAlloc(&a, 1 << 20) == CUDA_SUCCESS && p_cuMemAlloc(&b, 1 << 20) == CUDA_SUCCESS, "two 1 MiB allocations");
    size_t free1;
    p_cuMemGetInfo(&free1, &total);
    check(free0 - free1 == 2u << 20, "cuMemGetInfo counts them");
    unsigned *host;
    p_cuMemHostAlloc((void **)&host, 4096, 0);
    CUstream s1, s2;
    p_cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING);
    p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    /* New device memory: a signalling-NaN pattern (0x7fa0 in each 16-bit half). */
    host[0] = 0;
    p_cuMemcpyDtoHAsync(host, b + 4096, 8, s1);
    p_cuStreamSynchronize(s1);
    check(host[0] == 0x7fa07fa0u && host[1] == 0x7fa07fa0u, "new device memory reads as the signalling-NaN pattern");
    host[0] = 0;
    p_cuMemsetD32Async(a, 7, 1024, s1);
    p_cuMemcpyDtoHAsync(host, a, 4, s1);
    check(host[0] == 0, "a host read before cuStreamSynchronize sees the old value");
    p_cuStreamSynchronize(s1);
    check(host[0] == 7, "after cuStreamSynchronize, the copied value");
    /* b = a on s2 after a memset of a on s1: without a wait, stale. */
    p_cuMemsetD32Async(b, 0, 1024, s2);
    p_cuStreamSynchronize(s2);
    /* s1's memset waits behind another item: it runs one delay after
     * s2's copy. */
    p_cuMemsetD32Async(a + 8192, 0, 1024, s1);
    p_cuMemsetD32Async(a, 9, 1024, s1);
    p_cuMemcpyDtoDAsync(b, a, 4096, s2);
    p_cuStreamSynchronize(s1);
    p_cuStreamSynchronize(s2);
    p_cuMemcpyDtoHAsync(host, b, 4, s2);
    p_cuStreamSynchronize(s2);
    check(host[0] == 7, "a second stream without cuStreamWaitEvent reads the value before the first's memset");
    CUevent e;
    p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    p_cuMemsetD32Async(a, 11, 1024, s1);
    p_cuEventRecord(e, s1);
    p_cuStreamWaitEvent(s2, e, 0);
    p_cuMemcpyDtoDAsync(b, a, 4096, s2);
    p_cuMemcpyDtoHAsync(host, b, 4, s2);
    p_cuStreamSynchronize(s2);
    check(host[0] == 11, "with cuStreamWaitEvent, the first stream's value");
    /* A graph replays its recorded memset with the recorded value. */
    CUgraph g;
    CUgraphExec ex;
    p_cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    p_cuMemsetD32Async(a, 13, 1024, s1);
    check(p_cuStreamSynchronize(s1) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "no synchronisation while capturing");
    CUresult r = p_cuStreamEndCapture(s1, &g);
    check(r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture is invalidated by it");
    p_cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    p_cuMemsetD32Async(a, 13, 1024, s1);
    p_cuStreamEndCapture(s1, &g);
    p_cuMemcpyDtoHAsync(host, a, 4, s1);
    p_cuStreamSynchronize(s1);
    check(host[0] == 11, "captured work does not run when recorded");
    p_cuGraphInstantiate(&ex, g, 0);
    p_cuGraphLaunch(ex, s1);
    p_cuMemcpyDtoHAsync(host, a, 4, s1);
    p_cuStreamSynchronize(s1);
    check(host[0] == 13, "cuGraphLaunch replays it");
    p_cuGraphExecDestroy(ex);
    p_cuGraphDestroy(g);
    p_cuEventDestroy(e);
    /* Copies outside an allocation are refused. */
    check(p_cuMemcpyDtoDAsync(b, a, (1 << 20) + 4, s1) == CUDA_ERROR_INVALID_VALUE,
          "a copy one element past the allocation is refused");
    check(p_cuMemsetD32Async(a + 4, 0, 1 << 18, s1) == CUDA_ERROR_INVALID_VALUE, "a memset past the end is refused");
    /* cuMemFree waits for the queued work that reads the memory (as
     * cudaFree synchronises): the delayed copy sees the value, not the
     * poison of freed memory. */
    host[0] = 0;
    p_cuMemsetD32Async(b, 21, 1024, s2);
    p_cuMemcpyDtoHAsync(host, b, 4, s2);
    p_cuMemFree(b);
    check(host[0] == 21, "cuMemFree waits for queued work on every stream");
    check(p_cuMemsetD32Async(b, 0, 1, s2) == CUDA_ERROR_INVALID_VALUE, "a memset of freed memory is refused");
    check(p_cuMemcpyDtoHAsync(host, b, 4, s2) == CUDA_ERROR_INVALID_VALUE, "a copy from freed memory is refused");
    p_cuMemFree(a);
    size_t free2;
    p_cuMemGetInfo(&free2, &total);
    check(free2 == free0, "freed memory is free again");
    return fails ? 1 : 0;
}
