/* The simulated device's NVRTC: the real NVRTC (opened from the toolkit)
 * compiles every program as it would for a GPU, and the image handed out
 * wraps its CUBIN or PTX with the program's source and NVRTC's log
 * (sim_image.h), which the simulated driver needs to run the module. */
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "sim_image.h"

#ifndef KILN_SIMGPU_CUDA_LIBDIR
#define KILN_SIMGPU_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

#define REAL_FUNCS(X)                                                                                                  \
    X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize)     \
    X(nvrtcGetProgramLog) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)                      \
    X(nvrtcGetErrorString) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)

static struct {
#define X(f) __typeof__(&f) f;
    REAL_FUNCS(X)
#undef X
    int rc; /* 0 once opened */
} real = {.rc = -1};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void open_real(void)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", KILN_SIMGPU_CUDA_LIBDIR, names[i]);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        sim_say("no NVRTC in %s: %s", KILN_SIMGPU_CUDA_LIBDIR, dlerror());
        return;
    }
#define X(f)                                                                                                           \
    if (!(real.f = (__typeof__(&f))dlsym(h, #f))) {                                                                    \
        sim_say("NVRTC lacks %s", #f);                                                                                 \
        return;                                                                                                        \
    }
    REAL_FUNCS(X)
#undef X
    real.rc = 0;
}

#define NEED_REAL()                                                                                                    \
    do {                                                                                                               \
        pthread_once(&once, open_real);                                                                                \
        if (real.rc)                                                                                                   \
            return NVRTC_ERROR_INTERNAL_ERROR;                                                                         \
    } while (0)

/* A program: the real one and its source. */
typedef struct sim_prog {
    nvrtcProgram p;
    char *src;
} sim_prog;

SIM_EXPORT nvrtcResult nvrtcVersion(int *major, int *minor)
{
    SIM_FAULT(nvrtcResult, "nvrtcVersion");
    NEED_REAL();
    return real.nvrtcVersion(major, minor);
}

SIM_EXPORT const char *nvrtcGetErrorString(nvrtcResult r)
{
    pthread_once(&once, open_real);
    return real.rc ? "NVRTC is missing (simulated device)" : real.nvrtcGetErrorString(r);
}

/* KILN_SIMGPU_NVRTC_ARCHS=75,80,86: the CUBIN targets NVRTC lists, in
 * place of the real one's: an NVRTC older than the part, whose kernels
 * Kiln then compiles to PTX for the newest target below the part's
 * (runtime/exec/nvrtc.c), as for a GPU newer than the toolkit. */
static int fake_archs[64], nfake_archs = -1; /* -1: not read yet; 0: the real list */
static pthread_once_t archs_once = PTHREAD_ONCE_INIT;

static void read_archs(void)
{
    nfake_archs = 0;
    const char *v = getenv("KILN_SIMGPU_NVRTC_ARCHS");
    if (!v || !*v)
        return;
    int n = 0;
    for (const char *s = v; *s && n >= 0;) {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s || a < 10 || a > 999 || (*end && *end != ',') || n == 64)
            n = -1;
        else
            fake_archs[n++] = (int)a, s = *end ? end + 1 : end;
    }
    if (n <= 0) {
        sim_say("KILN_SIMGPU_NVRTC_ARCHS must be architectures such as 75,80,86, not '%.40s'", v);
        nfake_archs = -1;
        return;
    }
    nfake_archs = n;
}

SIM_EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    NEED_REAL();
    pthread_once(&archs_once, read_archs);
    if (nfake_archs < 0)
        return NVRTC_ERROR_INVALID_INPUT;
    if (nfake_archs > 0) {
        *n = nfake_archs;
        return NVRTC_SUCCESS;
    }
    return real.nvrtcGetNumSupportedArchs(n);
}

SIM_EXPORT nvrtcResult nvrtcGetSupportedArchs(int *a)
{
    NEED_REAL();
    pthread_once(&archs_once, read_archs);
    if (nfake_archs < 0)
        return NVRTC_ERROR_INVALID_INPUT;
    if (nfake_archs > 0) {
        memcpy(a, fake_archs, sizeof(int) * (size_t)nfake_archs);
        return NVRTC_SUCCESS;
    }
    return real.nvrtcGetSupportedArchs(a);
}

SIM_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *out, const char *src, const char *name, int nh,
                                          const char *const *headers, const char *const *include_names)
{
    SIM_FAULT(nvrtcResult, "nvrtcCreateProgram");
    NEED_REAL();
    if (!out || !src)
        return NVRTC_ERROR_INVALID_INPUT;
    sim_prog *sp = calloc(1, sizeof *sp);
    nvrtcResult r = real.nvrtcCreateProgram(&sp->p, src, name, nh, headers, include_names);
    if (r != NVRTC_SUCCESS) {
        free(sp);
        return r;
    }
    sp->src = strdup(src);
    *out = (nvrtcProgram)sp;
    return NVRTC_SUCCESS;
}

#define SP(p) ((sim_prog *)(p))

SIM_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p)
{
    NEED_REAL();
    if (!p || !*p)
        return NVRTC_ERROR_INVALID_PROGRAM;
    sim_prog *sp = SP(*p);
    nvrtcResult r = real.nvrtcDestroyProgram(&sp->p);
    free(sp->src);
    free(sp);
    *p = NULL;
    return r;
}

SIM_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    SIM_FAULT(nvrtcResult, "nvrtcCompileProgram");
    NEED_REAL();
    return p ? real.nvrtcCompileProgram(SP(p)->p, n, opts) : NVRTC_ERROR_INVALID_PROGRAM;
}

SIM_EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    NEED_REAL();
    return p ? real.nvrtcGetProgramLogSize(SP(p)->p, n) : NVRTC_ERROR_INVALID_PROGRAM;
}

SIM_EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    NEED_REAL();
    return p ? real.nvrtcGetProgramLog(SP(p)->p, log) : NVRTC_ERROR_INVALID_PROGRAM;
}

/* The wrapped image: the header, the real image (size bytes), the
 * source, the log. out NULL: only its size. */
static nvrtcResult wrap(sim_prog *sp, bool ptx, char *out, size_t *size)
{
    size_t n = 0, ls = 0;
    nvrtcResult r = ptx ? real.nvrtcGetPTXSize(sp->p, &n) : real.nvrtcGetCUBINSize(sp->p, &n);
    if (r != NVRTC_SUCCESS)
        return r;
    if ((r = real.nvrtcGetProgramLogSize(sp->p, &ls)) != NVRTC_SUCCESS)
        return r;
    size_t srcn = strlen(sp->src);
    sim_image_hdr h = {SIM_IMAGE_MAGIC, n, srcn, ls};
    /* PTX is text: the whole still ends with a NUL. */
    *size = sizeof h + n + srcn + ls + (ptx ? 1 : 0);
    if (!out)
        return NVRTC_SUCCESS;
    memcpy(out, &h, sizeof h);
    if ((r = ptx ? real.nvrtcGetPTX(sp->p, out + sizeof h) : real.nvrtcGetCUBIN(sp->p, out + sizeof h)))
        return r;
    memcpy(out + sizeof h + n, sp->src, srcn);
    char *log = malloc(ls + 1);
    if ((r = real.nvrtcGetProgramLog(sp->p, log)) == NVRTC_SUCCESS)
        memcpy(out + sizeof h + n + srcn, log, ls);
    free(log);
    if (ptx)
        out[*size - 1] = 0;
    return r;
}

SIM_EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    SIM_FAULT(nvrtcResult, "nvrtcGetCUBINSize");
    NEED_REAL();
    return p ? wrap(SP(p), false, NULL, n) : NVRTC_ERROR_INVALID_PROGRAM;
}

SIM_EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *out)
{
    SIM_FAULT(nvrtcResult, "nvrtcGetCUBIN");
    NEED_REAL();
    size_t n;
    return p ? wrap(SP(p), false, out, &n) : NVRTC_ERROR_INVALID_PROGRAM;
}

SIM_EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    SIM_FAULT(nvrtcResult, "nvrtcGetPTXSize");
    NEED_REAL();
    return p ? wrap(SP(p), true, NULL, n) : NVRTC_ERROR_INVALID_PROGRAM;
}

SIM_EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *out)
{
    SIM_FAULT(nvrtcResult, "nvrtcGetPTX");
    NEED_REAL();
    size_t n;
    return p ? wrap(SP(p), true, out, &n) : NVRTC_ERROR_INVALID_PROGRAM;
}
