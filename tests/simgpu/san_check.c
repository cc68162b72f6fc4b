/* The simulated device's sanitizer, each detector on its own (simgpu.san.*):
 * the case makes its mistake on purpose in a child process, which must
 * end with the sanitizer's exit status and a report naming the call; the
 * *_ordered and host_synced cases do the same work correctly and must
 * end cleanly, and `off` checks that KILN_SIMGPU_SANITIZE=0 turns the
 * reports back into the API's refusals.
 *   san_check LIBRARY CASE   (KILN_SIMULATED_GPU set by the test) */
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_image.h"

#define SAN_EXIT 86 /* tests/simgpu/sim.h's SIM_SAN_EXIT */

#define FUNCS(X)                                                                                                       \
    X(cuInit) X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)  \
    X(cuMemsetD32Async) X(cuStreamCreate) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate)                \
    X(cuEventRecord) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuDevicePrimaryCtxRetain)          \
    X(cuDevicePrimaryCtxRelease) X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatrixLayoutCreate)          \
    X(cublasLtMatmul)

#define STR_(x) #x
#define STR(x) STR_(x)
#define X(f) static __typeof__(&f) p_##f;
FUNCS(X)
#undef X

#define THREADS 32

/* One block of THREADS threads, each storing at x[its index]. */
static const char kernel_src[] =
    "extern \"C\" __global__ void poke(float *__restrict__ x, const kl_kargs *__restrict__ ka)\n"
    "{\n"
    "    x[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;\n"
    "}\n"
    "#ifdef KL_EMULATION\n"
    "extern \"C\" void kl_emu_poke(void *const *kb, const kl_kargs *ka) { poke((float *)kb[0], ka); }\n"
    "#endif\n";

static CUfunction load_poke(void)
{
    size_t n = strlen(kernel_src);
    char *image = calloc(1, sizeof(sim_image_hdr) + n);
    sim_image_hdr h = {SIM_IMAGE_MAGIC, 0, n, 0};
    memcpy(image, &h, sizeof h);
    memcpy(image + sizeof h, kernel_src, n);
    CUmodule m;
    CUfunction f;
    if (p_cuModuleLoadData(&m, image) || p_cuModuleGetFunction(&f, m, "poke")) {
        fprintf(stderr, "san_check: cannot load the kernel\n");
        exit(1);
    }
    free(image);
    return f;
}

static void launch_poke(CUfunction f, CUdeviceptr x, CUdeviceptr ka, CUstream s)
{
    void *params[] = {&x, &ka};
    if (p_cuLaunchKernel(f, 1, 1, 1, THREADS, 1, 1, 0, s, params, NULL)) {
        fprintf(stderr, "san_check: cuLaunchKernel refused\n");
        exit(1);
    }
}

/* The case's mistake (or its correct twin); returns 0 to exit cleanly. */
static int run_case(const char *c)
{
    CUstream s1, s2;
    p_cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING);
    p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    CUdeviceptr a, b;
    p_cuMemAlloc(&a, 1024);
    p_cuMemAlloc(&b, 1024);
    p_cuMemsetD32Async(a, 0, 256, s1);
    p_cuMemsetD32Async(b, 0, 256, s1);
    p_cuStreamSynchronize(s1);
    unsigned *host;
    p_cuMemHostAlloc((void **)&host, 4096, 0);
    if (!strcmp(c, "oob_copy")) /* one element too many */
        p_cuMemcpyDtoDAsync(b, a, 1028, s1);
    else if (!strcmp(c, "oob_memset"))
        p_cuMemsetD32Async(a + 4, 0, 256, s1);
    else if (!strcmp(c, "oob_kernel")) { /* THREADS floats into a buffer of THREADS - 1 */
        CUdeviceptr x;
        p_cuMemAlloc(&x, (THREADS - 1) * sizeof(float));
        launch_poke(load_poke(), x, b, s1);
    } else if (!strcmp(c, "oob_gemm")) { /* D = A B, 4 x 4 in f32, A's leading dimension 5 in 64 bytes */
        cublasLtHandle_t lt;
        cublasLtMatmulDesc_t d;
        cublasLtMatrixLayout_t la, l4;
        p_cublasLtCreate(&lt);
        p_cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        p_cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 4, 5);
        p_cublasLtMatrixLayoutCreate(&l4, CUDA_R_32F, 4, 4, 4);
        CUdeviceptr x;
        p_cuMemAlloc(&x, 64);
        float one = 1, zero = 0;
        p_cublasLtMatmul(lt, d, &one, (void *)x, la, (void *)b, l4, &zero, (void *)b, l4, (void *)b, l4, NULL, NULL, 0,
                         (cudaStream_t)s1);
    } else if (!strcmp(c, "uaf_copy")) {
        p_cuMemFree(a);
        p_cuMemcpyDtoHAsync(host, a, 4, s1);
    } else if (!strcmp(c, "uaf_kernel")) {
        CUfunction f = load_poke();
        p_cuMemFree(a);
        launch_poke(f, a, b, s1);
    } else if (!strcmp(c, "uninit")) { /* 16 bytes nothing wrote */
        CUdeviceptr x;
        p_cuMemAlloc(&x, 64);
        p_cuMemsetD32Async(x, 0, 12, s1);
        p_cuMemcpyDtoHAsync(host, x, 64, s1);
    } else if (!strcmp(c, "hazard") || !strcmp(c, "hazard_ordered")) {
        /* b = a on s2 after a memset of a on s1: needs s1's event. */
        p_cuMemsetD32Async(a, 9, 256, s1);
        if (!strcmp(c, "hazard_ordered")) {
            CUevent e;
            p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
            p_cuEventRecord(e, s1);
            p_cuStreamWaitEvent(s2, e, 0);
        }
        p_cuMemcpyDtoDAsync(b, a, 1024, s2);
    } else if (!strcmp(c, "hazard_kernel")) { /* a kernel on s2 writes what s1 copies from */
        CUfunction f = load_poke();
        p_cuMemcpyDtoDAsync(b, a, 1024, s1);
        launch_poke(f, a, b, s2);
    } else if (!strcmp(c, "host_read") || !strcmp(c, "host_synced")) {
        p_cuMemsetD32Async(a, 5, 256, s1);
        p_cuMemcpyDtoHAsync(host, a, 16, s1);
        if (!strcmp(c, "host_synced"))
            p_cuStreamSynchronize(s1);
        if (host[1] != 5) /* the host's read */
            return 1;
    } else if (!strcmp(c, "leak")) {
        CUcontext ctx;
        p_cuDevicePrimaryCtxRetain(&ctx, 0);
        p_cuMemFree(b);
        p_cuMemFreeHost(host);
        p_cuDevicePrimaryCtxRelease(0); /* a still held */
    } else if (!strcmp(c, "off")) {
        /* The sanitizer off: the API's refusals, as without it. */
        if (p_cuMemcpyDtoDAsync(b, a, 1028, s1) != CUDA_ERROR_INVALID_VALUE)
            return 1;
        p_cuMemFree(a);
        if (p_cuMemsetD32Async(a, 0, 1, s1) != CUDA_ERROR_INVALID_VALUE)
            return 1;
    } else {
        fprintf(stderr, "san_check: no case %s\n", c);
        return 2;
    }
    p_cuStreamSynchronize(s1);
    p_cuStreamSynchronize(s2);
    return 0;
}

/* What each case's report must say (NULL: no report, exit 0). */
static const struct {
    const char *name, *report, *also; /* also: a second part (which access comes second may vary) */
} cases[] = {
    {"oob_copy", "out of bounds: cuMemcpyDtoDAsync, destination [+0, 1028 bytes) of buffer #2 (1024 bytes", NULL},
    {"oob_memset", "out of bounds: cuMemsetD32Async, destination [+4, 1024 bytes) of buffer #1 (1024 bytes", NULL},
    {"oob_kernel", "out of bounds: kernel poke (on stream 1) wrote byte +124 of buffer #4 (124 bytes", NULL},
    {"oob_gemm", "out of bounds: cublasLtMatmul, operand A [+0, 76 bytes) of buffer #4 (64 bytes", "12 bytes past its end"},
    {"uaf_copy", "use after free: cuMemcpyDtoHAsync, source [+0, 4 bytes) of buffer #1", NULL},
    {"uaf_kernel", "use after free: kernel poke, argument 0 points at byte +0 of buffer #1", NULL},
    {"uninit", "uninitialised memory: cuMemcpyDtoHAsync copies to the host 4 words nothing wrote, the first at byte +48 "
               "of buffer #4 (64 bytes)", NULL},
    {"hazard", "cross-stream hazard: ", "cuMemsetD32Async (destination) on stream 1"},
    {"hazard_ordered", NULL, NULL},
    {"hazard_kernel", "cross-stream hazard: ", "kernel poke (argument 0) on stream 2"},
    {"host_read", "host access without synchronisation: byte +4 of the destination of a cuMemcpyDtoHAsync (16 bytes", "queued on stream 1"},
    {"host_synced", NULL, NULL},
    {"leak", "leak: 1 allocation(s) (1024 bytes) still held at cuDevicePrimaryCtxRelease", NULL},
    {"off", NULL, NULL},
};

int main(int argc, char **argv)
{
    void *h = argc > 2 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        printf("FAIL: usage san_check LIBRARY CASE, or cannot open %s: %s\n", argc > 1 ? argv[1] : "(none)", dlerror());
        return 1;
    }
#define X(f)                                                                                                           \
    if (!(p_##f = (__typeof__(&f))dlsym(h, STR(f)))) {                                                                 \
        printf("FAIL: no %s\n", STR(f));                                                                               \
        return 1;                                                                                                      \
    }
    FUNCS(X)
#undef X
    const char *want = NULL, *also = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!strcmp(cases[i].name, argv[2]))
            want = cases[i].report, also = cases[i].also, known = 1;
    if (!known) {
        printf("FAIL: no case %s\n", argv[2]);
        return 1;
    }
    if (!strcmp(argv[2], "off"))
        setenv("KILN_SIMGPU_SANITIZE", "0", 1);
    int fd[2];
    if (pipe(fd))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        if (p_cuInit(0))
            _exit(1);
        int rc = run_case(argv[2]);
        fflush(stderr);
        _exit(rc);
    }
    close(fd[1]);
    char out[8192];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof out - 1 && (r = read(fd[0], out + got, sizeof out - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = 0;
    int st;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    printf("case %s: exit status %d, stderr:\n%s", argv[2], code, out);
    int ok = want ? code == SAN_EXIT && strstr(out, want) && (!also || strstr(out, also)) : code == 0 && !strstr(out, "sanitizer");
    printf("%s: %s\n", ok ? "ok" : "FAIL", want ? want : "no report, exit status 0");
    return ok ? 0 : 1;
}
