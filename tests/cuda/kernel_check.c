/* Every generated CUDA kernel of a model against the CPU backend, on the
 * inputs the CPU backend's kernel sees in a real training step.
 *
 * For each configuration (train and eval, fused and unfused, fp32, bf16
 * and fp16) the plan runs one step on the CPU backend at a small batch.
 * Before each kernel the harness saves its buffers, runs the CPU kernel,
 * then restores them, runs the CUDA version and compares every buffer with
 * the CPU's result: the largest difference relative to the largest
 * magnitude, within a bound per dtype. The CUDA version runs
 *
 *   --emulate      (the default) compiled for the host with emu.h, in two
 *                  launch configurations: a small made-up device's launch
 *                  sizes with threads in increasing order, and 3 blocks of
 *                  64 (flat) or 96 (block) threads in decreasing order;
 *   --device cuda  on the GPU through the CUDA backend (NVRTC, the real
 *                  launch sizes), GEMMs through cuBLASLt as well.
 *
 *   kernel_check [--emulate | --device cuda] [--batch N] [--seed N] [--threads N]
 *                [--precisions fp32,bf16,fp16] [--config TEXT] MODEL.kl...
 *
 * --config keeps the configurations whose name ("train fused fp32", ...)
 * contains TEXT.
 *
 * Exits 77 (a skip) when no C++ compiler (--emulate) or no GPU
 * (--device cuda) is there. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lt_emu.h"
#include "plans.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/exec/cuda_launch.h"
#include "runtime/data/data.h"
#include "runtime/exec/session.h"
#include "runtime/cpu/spawn.h"
#include "runtime/files/cache_dir.h"

#ifndef KILN_EMU_DIR
#define KILN_EMU_DIR "tests/cuda"
#endif
/* Where emu.h finds base/scalar.h. */
#ifndef KILN_EMU_INCLUDE
#define KILN_EMU_INCLUDE "."
#endif
#ifndef KILN_CXX
#define KILN_CXX "c++"
#endif

typedef int (*emu_run_fn)(void (*)(void *const *, const kl_kargs *), unsigned, unsigned, void *const *, const kl_kargs *,
                          int, char *, size_t);

typedef struct emu_lib {
    void *h;
    emu_run_fn run;
} emu_lib;

static const char *cxx(void)
{
    const char *e = getenv("KILN_CXX");
    return e && *e ? e : KILN_CXX;
}

/* ---- compiling the kernels for the host ---- */

typedef struct compile_job {
    kl_argv cmd;                /* no arguments: cached, nothing to do */
    char *src, *tmp, *so, *log; /* compiled to tmp, then renamed to so */
    char why[512];
    int rc;
} compile_job;

typedef struct compile_pool {
    compile_job *jobs;
    int n, next;
    pthread_mutex_t lock;
} compile_pool;

static void *compile_worker(void *arg)
{
    compile_pool *cp = arg;
    for (;;) {
        pthread_mutex_lock(&cp->lock);
        int i = cp->next++;
        pthread_mutex_unlock(&cp->lock);
        if (i >= cp->n)
            return NULL;
        compile_job *j = &cp->jobs[i];
        j->rc = kl_spawn(j->cmd.v, j->log, j->why, sizeof j->why);
        if (j->rc == 0 && rename(j->tmp, j->so)) {
            snprintf(j->why, sizeof j->why, "cannot rename %s to %s", j->tmp, j->so);
            j->rc = -1;
        }
        if (j->rc == 0) {
            remove(j->src);
            remove(j->log);
        }
    }
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Every program starts with #include "emu.h", whose own includes (cmath,
 * ucontext, ...) are most of a small kernel's compile time: the header is
 * compiled once into DIR/pch-KEY/emu.h.gch (KEY: the compiler, flags and
 * the headers' text), and that folder goes first on the include path,
 * where GCC takes the .gch in place of the header. Only a speed-up: a
 * compiler that cannot make or use it (clang reads no .gch this way)
 * compiles the header as before. Returns the folder, or NULL. */
static char *emu_pch(const char *dir, const char *flags, uint64_t key)
{
    char *pdir = kl_xasprintf("%s/pch-%016llx", dir, (unsigned long long)key);
    char *gch = kl_xasprintf("%s/emu.h.gch", pdir);
    struct stat st;
    if (stat(gch, &st) == 0) {
        free(gch);
        return pdir;
    }
    compile_job j = {0};
    j.tmp = kl_xasprintf("%s.%d", pdir, (int)getpid());
    j.so = gch;
    j.log = kl_xasprintf("%s.%d.log", pdir, (int)getpid());
    kl_argv_add_words(&j.cmd, cxx());
    kl_argv_add_words(&j.cmd, flags);
    kl_argv_add(&j.cmd, "-x");
    kl_argv_add(&j.cmd, "c++-header");
    kl_argv_add(&j.cmd, "-I" KILN_EMU_DIR);
    kl_argv_add(&j.cmd, "-I" KILN_EMU_INCLUDE);
    kl_argv_add(&j.cmd, "-o");
    kl_argv_add(&j.cmd, j.tmp);
    kl_argv_add(&j.cmd, KILN_EMU_DIR "/emu.h");
    kl_argv_end(&j.cmd);
    /* Made under a temporary name, then renamed into a folder of its own
     * (a concurrent run may win the rename: its file is the same). */
    bool ok = kl_spawn(j.cmd.v, j.log, j.why, sizeof j.why) == 0 && (mkdir(pdir, 0700) == 0 || errno == EEXIST) &&
              (rename(j.tmp, gch) == 0 || stat(gch, &st) == 0);
    remove(j.tmp);
    remove(j.log);
    kl_argv_free(&j.cmd);
    free(j.tmp);
    free(j.log);
    free(gch);
    if (!ok) {
        free(pdir);
        return NULL;
    }
    return pdir;
}

/* Compiles the programs (one shared object each, in parallel, cached by
 * content) and opens them. */
static int build_libs(char **programs, int n, int threads, emu_lib *libs)
{
    char *dir = kl_cache_dir("emu");
    /* The same floating-point evaluation as the CPU backend's kernels. */
    const char *flags = "-std=c++17 -O1 -fPIC -shared -w " KL_CC_FP_FLAGS;
    /* The emulation header is part of every program: its text is part of
     * the cache key. */
    uint64_t hh = KL_HASH_INIT;
    static const char *const headers[] = {KILN_EMU_DIR "/emu.h", KILN_EMU_INCLUDE "/base/scalar.h"};
    for (int i = 0; i < (int)KL_ARRAY_LEN(headers); i++) {
        kl_source hdr;
        if (kl_source_read(&hdr, headers[i]) == 0) {
            hh = kl_hash_bytes(hh, hdr.text, hdr.len);
            kl_source_free(&hdr);
        }
    }
    compile_job *jobs = kl_xcalloc((size_t)n + 1, sizeof *jobs);
    bool *missing = kl_xcalloc((size_t)n + 1, sizeof *missing);
    uint64_t *keys = kl_xcalloc((size_t)n + 1, sizeof *keys);
    int todo = 0;
    for (int i = 0; i < n; i++) {
        uint64_t h = kl_hash_bytes(KL_HASH_INIT, programs[i], strlen(programs[i]));
        h = kl_hash_bytes(h, cxx(), strlen(cxx()));
        h = kl_hash_bytes(h, flags, strlen(flags));
        h = kl_hash_bytes(h, KILN_EMU_DIR, strlen(KILN_EMU_DIR));
        h = kl_hash_bytes(h, &hh, sizeof hh);
        jobs[i].so = kl_xasprintf("%s/%016llx.so", dir, (unsigned long long)h);
        struct stat st;
        missing[i] = stat(jobs[i].so, &st) != 0;
        keys[i] = h;
        todo += missing[i];
    }
    uint64_t pk = kl_hash_bytes(hh, cxx(), strlen(cxx()));
    pk = kl_hash_bytes(pk, flags, strlen(flags));
    pk = kl_hash_bytes(pk, KILN_EMU_DIR, strlen(KILN_EMU_DIR));
    char *pch = todo > 1 ? emu_pch(dir, flags, pk) : NULL;
    todo = 0;
    for (int i = 0; i < n; i++) {
        if (!missing[i])
            continue;
        uint64_t h = keys[i];
        jobs[i].src = kl_xasprintf("%s/%016llx.%d.cpp", dir, (unsigned long long)h, (int)getpid());
        jobs[i].tmp = kl_xasprintf("%s/%016llx.%d.so", dir, (unsigned long long)h, (int)getpid());
        jobs[i].log = kl_xasprintf("%s/%016llx.%d.log", dir, (unsigned long long)h, (int)getpid());
        if (write_text(jobs[i].src, programs[i])) {
            fprintf(stderr, "cannot write %s\n", jobs[i].src);
            return -1;
        }
        kl_argv_add_words(&jobs[i].cmd, cxx());
        kl_argv_add_words(&jobs[i].cmd, flags);
        if (pch) {
            kl_argv_add(&jobs[i].cmd, "-I");
            kl_argv_add(&jobs[i].cmd, pch);
        }
        kl_argv_add(&jobs[i].cmd, "-I" KILN_EMU_DIR);
        kl_argv_add(&jobs[i].cmd, "-I" KILN_EMU_INCLUDE);
        kl_argv_add(&jobs[i].cmd, "-o");
        kl_argv_add(&jobs[i].cmd, jobs[i].tmp);
        kl_argv_add(&jobs[i].cmd, jobs[i].src);
        kl_argv_end(&jobs[i].cmd);
        todo++;
    }
    if (todo) {
        compile_pool cp = {jobs, n, 0, PTHREAD_MUTEX_INITIALIZER};
        /* Skip the cached ones. */
        compile_job *pending = kl_xcalloc((size_t)todo + 1, sizeof *pending);
        int k = 0;
        for (int i = 0; i < n; i++)
            if (jobs[i].cmd.n)
                pending[k++] = jobs[i];
        cp.jobs = pending;
        cp.n = todo;
        pthread_t tid[16];
        int nt = threads < 1 ? 1 : threads > 16 ? 16 : threads;
        for (int t = 0; t < nt; t++)
            pthread_create(&tid[t], NULL, compile_worker, &cp);
        for (int t = 0; t < nt; t++)
            pthread_join(tid[t], NULL);
        for (int i = 0, j = 0; i < n; i++)
            if (jobs[i].cmd.n) {
                jobs[i].rc = pending[j].rc;
                memcpy(jobs[i].why, pending[j++].why, sizeof jobs[i].why);
            }
        free(pending);
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (jobs[i].rc) {
            char *line = kl_argv_str(&jobs[i].cmd);
            fprintf(stderr, "FAIL: the emulation build failed (%s): %s\n", jobs[i].why, line);
            free(line);
            kl_source lg;
            if (kl_source_read_quiet(&lg, jobs[i].log) == 0) {
                fputs(lg.text, stderr);
                kl_source_free(&lg);
            }
            rc = -1;
            continue;
        }
        libs[i].h = dlopen(jobs[i].so, RTLD_NOW | RTLD_LOCAL);
        libs[i].run = libs[i].h ? (emu_run_fn)dlsym(libs[i].h, "kl_emu_run") : NULL;
        if (!libs[i].run) {
            fprintf(stderr, "FAIL: cannot load %s: %s\n", jobs[i].so, dlerror());
            rc = -1;
        }
    }
    for (int i = 0; i < n; i++) {
        kl_argv_free(&jobs[i].cmd);
        free(jobs[i].src);
        free(jobs[i].tmp);
        free(jobs[i].so);
        free(jobs[i].log);
    }
    free(jobs);
    free(missing);
    free(keys);
    free(pch);
    free(dir);
    return rc;
}

/* ---- inputs ---- */

/* The step's inputs, and hyperparameters that make every update move. */
static void random_inputs(kl_exec *e, uint64_t seed)
{
    kl_exec_random_inputs(e, seed);
    kl_persist *hp = kl_session_find(e->s, "optimizer.hyper");
    if (hp) {
        float hyper[4] = {0.01f, 0.1f, 0.001f, 1.0f};
        size_t bytes = (size_t)ir_type_bytes(&hp->type);
        e->s->be->ops->copy_in(e->s->be, hp->ptr, hyper, bytes < sizeof hyper ? bytes : sizeof hyper);
    }
}

/* ---- comparing ---- */

static double bound_of(ir_dtype dt)
{
    switch (dt) {
    case IR_F64: return 1e-9;
    case IR_F32: return 1e-4;
    case IR_BF16: return 1.6e-2;
    case IR_F16: return 2e-3;
    default: return 0;
    }
}

typedef struct stats {
    int kernels, gemms, launches, runs, failures;
    int lt_epilogues, lt_fallbacks; /* GEMM steps checked with their cuBLASLt epilogue; not taken on the GPU */
    double worst[IR_NDTYPES];
    KL_VEC(char *) seen; /* kernel names compared */
} stats;

/* The unit roundoff of a float dtype (0 for integers). */
static double roundoff_of(ir_dtype dt)
{
    switch (dt) {
    case IR_F64: return 0x1p-53;
    case IR_F32: return 0x1p-24;
    case IR_BF16: return 0x1p-8;
    case IR_F16: return 0x1p-11;
    default: return 0;
    }
}

/* The largest finite magnitude of a float buffer (0 for integers). */
static double max_magnitude(ir_dtype dt, const void *p, int64_t n)
{
    double m = 0;
    if (roundoff_of(dt) == 0)
        return 0;
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(kl_load_as(dt, p, i));
        if (isfinite(a) && a > m)
            m = a;
    }
    return m;
}

/* How far one result buffer is from the CPU's: the largest difference,
 * relative to the larger of the reference's largest magnitude and the
 * rounding floor (floor / bound of the dtype); NaN where exactly one side
 * is NaN or an infinity differs. The floor is the rounding error a sum of
 * `terms` values up to `in_max` in magnitude has in another order,
 * 4 sqrt(terms) u in_max (random rounding errors add like a random walk;
 * the key-bias gradient's differences are about u in_max, at 512 terms
 * 90 times below it): a result that is zero in exact arithmetic (the
 * gradient of an attention's key bias: softmax ignores a shift shared by a
 * row's keys) is a sum of rounding noise that two summation orders give
 * differently, and relative to its own magnitude that difference is of
 * order 1. */
static double rel_error(ir_dtype dt, const void *got, const void *want, int64_t n, double floor)
{
    double maxabs = 0, maxdiff = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = kl_load_as(dt, got, i), b = kl_load_as(dt, want, i);
        if (isnan(a) || isnan(b)) {
            if (isnan(a) != isnan(b))
                return NAN;
            continue;
        }
        if (isinf(a) || isinf(b)) {
            if (a != b)
                return NAN;
            continue;
        }
        maxabs = fmax(maxabs, fabs(b));
        maxdiff = fmax(maxdiff, fabs(a - b));
    }
    double scale = fmax(maxabs, bound_of(dt) > 0 ? floor / bound_of(dt) : 0);
    return maxdiff == 0 ? 0 : maxdiff / fmax(scale, 1e-30);
}

static void *find_fn(emu_lib *libs, int nlibs, const char *fn, emu_run_fn *run)
{
    char sym[96];
    snprintf(sym, sizeof sym, "kl_emu_%s", fn);
    for (int i = 0; i < nlibs; i++) {
        void *f = libs[i].h ? dlsym(libs[i].h, sym) : NULL;
        if (f) {
            *run = libs[i].run;
            return f;
        }
    }
    return NULL;
}

/* How the CUDA version of a step runs, on the step's host buffers. */
typedef struct runner {
    int configs;        /* launch configurations per kernel */
    bool gemms;         /* GEMM steps are checked too */
    emu_lib *libs;      /* --emulate */
    int nlibs;
    kl_backend *gpu;    /* --device cuda */
} runner;

/* Copies of a step's host buffers (on the device, or guarded on the host
 * for the emulation): buffers that overlap (a result written in place
 * over its operand) share one copy, as on the host. */
typedef struct dev_range {
    char *lo, *hi;
    void *dev;
} dev_range;

static int by_lo(const void *a, const void *b)
{
    const dev_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges the buffers' ranges; returns how many. */
static int merge_ranges(void *const *host, const size_t *bytes, int n, dev_range *rs)
{
    int nr = 0;
    for (int a = 0; a < n; a++)
        rs[nr++] = (dev_range){(char *)host[a], (char *)host[a] + (bytes[a] ? bytes[a] : 1), NULL};
    qsort(rs, (size_t)nr, sizeof *rs, by_lo);
    int m = 0;
    for (int i = 0; i < nr; i++) {
        if (m && rs[i].lo < rs[m - 1].hi) {
            if (rs[i].hi > rs[m - 1].hi)
                rs[m - 1].hi = rs[i].hi;
        } else {
            rs[m++] = rs[i];
        }
    }
    return m;
}

/* Where host pointer h lives in the copies. */
static void *shadow_of(const dev_range *rs, int m, const void *h)
{
    for (int i = 0; i < m; i++)
        if ((const char *)h >= rs[i].lo && (const char *)h < rs[i].hi)
            return (char *)rs[i].dev + ((const char *)h - rs[i].lo);
    kl_panic("a buffer outside every range");
}

/* Guard zones around each emulated buffer copy: a write outside a buffer
 * (which the host's sanitizers cannot see in the uninstrumented emulated
 * code) changes them. */
#define GUARD 1024
#define GUARD_BYTE 0xa5

/* The emulated launches of kernel k on the host buffers, in launch
 * configuration cfg. */
static int run_launches(runner *r, const kl_kernel_src *k, void *const *bufs, const kl_kargs *ka, int cfg, char *err,
                        size_t errlen, stats *st)
{
    /* A kernel with a workspace (split reductions) takes it after its
     * buffers; filled with NaN, so a partial value read before it is
     * written shows. */
    void *args[IR_KERNEL_MAX_BUFS + 1];
    double *ws = NULL;
    memcpy(args, bufs, sizeof(void *) * (size_t)k->cuda.nbufs);
    if (k->cuda.workspace > 0) {
        size_t n = (size_t)k->cuda.workspace / sizeof(double);
        ws = kl_xmalloc(n * sizeof(double) + 1);
        for (size_t i = 0; i < n; i++)
            ws[i] = NAN;
        args[k->cuda.nbufs] = ws;
    }
    int rc = 0;
    for (int l = 0; l < k->cuda.nlaunches && !rc; l++) {
        const kir_cuda_launch *L = &k->cuda.launches[l];
        emu_run_fn run = NULL;
        void *fn = find_fn(r->libs, r->nlibs, L->fn, &run);
        if (!fn) {
            snprintf(err, errlen, "no emulated function %s", L->fn);
            rc = -1;
            break;
        }
        unsigned block, grid;
        if (cfg == 0) {
            /* A small device: 4 SMs, 2 blocks each, at most 256 threads. */
            block = kl_cuda_block_size(L, 4, 128, 256);
            grid = kl_cuda_grid_size(L, block, 4, 2);
        } else {
            /* Odd sizes, except a hand-written kernel's own block. */
            block = L->threads > 0 ? (unsigned)L->threads : L->map == KIR_CUDA_BLOCK ? 96 : 64;
            grid = 3;
        }
        char e2[400];
        if (run((void (*)(void *const *, const kl_kargs *))fn, grid, block, args, ka, cfg == 1, e2, sizeof e2)) {
            snprintf(err, errlen, "launch %s with %u x %u threads: %s", L->fn, grid, block, e2);
            rc = -1;
            break;
        }
        st->launches++;
    }
    free(ws);
    return rc;
}

/* The emulated launches on guarded copies of the buffers: results copied
 * back, and an error when a guard zone changed. */
static int run_emulated(runner *r, const kl_kernel_src *k, void *const *bufs, const size_t *bytes, int n, const kl_kargs *ka,
                        int cfg, char *err, size_t errlen, stats *st)
{
    dev_range rs[64];
    void *shadow[64];
    int m = merge_ranges(bufs, bytes, n, rs);
    for (int i = 0; i < m; i++) {
        size_t len = (size_t)(rs[i].hi - rs[i].lo);
        char *g = NULL;
        if (posix_memalign((void **)&g, 256, len + 2 * GUARD))
            kl_panic("out of memory");
        memset(g, GUARD_BYTE, GUARD);
        memcpy(g + GUARD, rs[i].lo, len);
        memset(g + GUARD + len, GUARD_BYTE, GUARD);
        rs[i].dev = g + GUARD;
    }
    for (int a = 0; a < n; a++)
        shadow[a] = shadow_of(rs, m, bufs[a]);
    int rc = run_launches(r, k, shadow, ka, cfg, err, errlen, st);
    for (int i = 0; i < m; i++) {
        size_t len = (size_t)(rs[i].hi - rs[i].lo);
        char *g = (char *)rs[i].dev - GUARD;
        for (size_t j = 0; j < GUARD && !rc; j++) {
            if ((unsigned char)g[j] != GUARD_BYTE || (unsigned char)g[GUARD + len + j] != GUARD_BYTE) {
                int arg = -1;
                for (int a = 0; a < n && arg < 0; a++)
                    if ((char *)bufs[a] >= rs[i].lo && (char *)bufs[a] < rs[i].hi)
                        arg = a;
                snprintf(err, errlen, "a write outside buffer %d (%zu bytes), %zu bytes %s it", arg, len,
                         (unsigned char)g[j] != GUARD_BYTE ? GUARD - j : j + 1,
                         (unsigned char)g[j] != GUARD_BYTE ? "before" : "after");
                rc = -1;
            }
        }
        memcpy(rs[i].lo, rs[i].dev, len);
        free(g);
    }
    return rc;
}

static int to_device(kl_backend *gpu, void *const *host, const size_t *bytes, int n, void **dev, dev_range *rs)
{
    int m = merge_ranges(host, bytes, n, rs);
    for (int i = 0; i < m; i++) {
        size_t len = (size_t)(rs[i].hi - rs[i].lo);
        rs[i].dev = gpu->ops->alloc(gpu, len);
        gpu->ops->copy_in(gpu, rs[i].dev, rs[i].lo, len);
    }
    for (int a = 0; a < n; a++)
        dev[a] = shadow_of(rs, m, host[a]);
    return m;
}

static void from_device(kl_backend *gpu, dev_range *rs, int m)
{
    gpu->ops->sync(gpu);
    for (int i = 0; i < m; i++) {
        gpu->ops->copy_out(gpu, rs[i].lo, rs[i].dev, (size_t)(rs[i].hi - rs[i].lo));
        gpu->ops->free(gpu, rs[i].dev);
    }
}

/* Runs step i's CUDA version on its host buffers (in place). */
static int run_cuda_version(runner *r, kl_exec *e, int i, int cfg, const kl_kargs *ka, char *err, size_t errlen, stats *st)
{
    kl_plan *p = e->plan;
    kl_step *sp = &p->steps.v[i];
    if (!r->gpu) {
        const kl_kernel_src *k = &p->kernels.v[sp->kernel];
        size_t bytes[64];
        for (int a = 0; a < sp->nargs; a++)
            bytes[a] = (size_t)p->buffers.v[sp->args[a]].bytes;
        return run_emulated(r, k, e->args[i], bytes, sp->nargs, ka, cfg, err, errlen, st);
    }
    kl_backend *gpu = r->gpu;
    void *host[64], *dev[64];
    size_t bytes[64];
    dev_range rs[64];
    int n;
    if (sp->kind == KL_STEP_GEMM) {
        int ids[3] = {sp->gemm.a, sp->gemm.b, sp->gemm.c};
        for (int a = 0; a < 3; a++) {
            host[a] = e->ptrs[ids[a]];
            bytes[a] = (size_t)p->buffers.v[ids[a]].bytes;
        }
        n = 3;
        int m = to_device(gpu, host, bytes, n, dev, rs);
        gpu->ops->gemm(gpu, &sp->gemm, dev[0], dev[1], dev[2]);
        from_device(gpu, rs, m);
        st->launches++;
        return 0;
    }
    n = sp->nargs;
    for (int a = 0; a < n; a++) {
        host[a] = e->args[i][a];
        bytes[a] = (size_t)p->buffers.v[sp->args[a]].bytes;
    }
    int m = to_device(gpu, host, bytes, n, dev, rs);
    gpu->ops->launch(gpu, p, sp->kernel, dev, ka);
    from_device(gpu, rs, m);
    st->launches += p->kernels.v[sp->kernel].cuda.nlaunches;
    (void)cfg;
    (void)err;
    (void)errlen;
    return 0;
}

/* GEMM step i with its cuBLASLt epilogue (kl_gemm.epi), against the CPU
 * backend's GEMM and the epilogue kernel of step i + 1, which the epilogue
 * replaces: D, and aux and the bias gradient where the epilogue writes
 * them. --emulate applies the epilogue with the host stand-in
 * (lt_emu.h) to the CPU's product; --device cuda runs the CUDA
 * backend's gemm_epilogue (cuBLASLt). Afterwards every buffer holds the
 * CPU's result, as after the two steps. */
static void check_lt_step(kl_exec *e, int i, const char *where, runner *r, stats *st)
{
    kl_backend *be = e->s->be;
    kl_plan *p = e->plan;
    const kl_gemm *g = &p->steps.v[i].gemm;
    const kl_step *ks = &p->steps.v[i + 1];
    kl_lt_call lc = kl_lt_describe(g);
    kl_kargs ka = {1, 3};
    int ids[8];
    int n = plan_step_buffers(&p->steps.v[i], ids);
    void *host[8];
    size_t bytes[8];
    for (int a = 0; a < n; a++) {
        host[a] = e->ptrs[ids[a]];
        bytes[a] = (size_t)p->buffers.v[ids[a]].bytes;
    }
    dev_range rs[8];
    int m = merge_ranges(host, bytes, n, rs);
    void *pre[8], *ref[8];
    for (int k = 0; k < m; k++) {
        size_t len = (size_t)(rs[k].hi - rs[k].lo);
        pre[k] = kl_xmalloc(len + 1);
        memcpy(pre[k], rs[k].lo, len);
    }
    /* The rounding floor's input scale: what the step reads (A, B, a
     * bias, aux), not C or the results (whatever a last run left). */
    double in_max = 0;
    int reads[4] = {g->a, g->b, lc.bias_read ? g->epi.bias : -1, lc.aux_read ? g->epi.aux : -1};
    for (int a = 0; a < 4; a++)
        if (reads[a] >= 0)
            in_max = fmax(in_max, max_magnitude(p->buffers.v[reads[a]].dtype, e->ptrs[reads[a]], p->buffers.v[reads[a]].numel));
    be->ops->gemm(be, g, e->ptrs[g->a], e->ptrs[g->b], e->ptrs[g->c]);
    be->ops->launch(be, p, ks->kernel, e->args[i + 1], &ka);
    for (int k = 0; k < m; k++) {
        size_t len = (size_t)(rs[k].hi - rs[k].lo);
        ref[k] = kl_xmalloc(len + 1);
        memcpy(ref[k], rs[k].lo, len);
        memcpy(rs[k].lo, pre[k], len);
    }
    kl_epi_ptrs x = {e->ptrs[g->epi.d], g->epi.bias >= 0 ? e->ptrs[g->epi.bias] : NULL,
                     g->epi.aux >= 0 ? e->ptrs[g->epi.aux] : NULL};
    const char *name = plan_lt_epi_name(g->epi.kind);
    st->runs++;
    if (!r->gpu) {
        void *acc = kl_xmalloc((size_t)p->buffers.v[g->c].bytes + 1);
        be->ops->gemm(be, g, e->ptrs[g->a], e->ptrs[g->b], acc);
        lt_emu_apply(&lc, g->out_dtype, acc, x.d, x.bias, x.aux);
        free(acc);
    } else {
        void *dev[8];
        dev_range drs[8];
        int dm = to_device(r->gpu, host, bytes, n, dev, drs);
        kl_epi_ptrs dx = {dev[3], NULL, NULL};
        for (int a = 4; a < n; a++) {
            if (ids[a] == g->epi.bias)
                dx.bias = dev[a];
            if (ids[a] == g->epi.aux)
                dx.aux = dev[a];
        }
        if (!r->gpu->ops->gemm_epilogue(r->gpu, g, dev[0], dev[1], dev[2], &dx)) {
            /* Not taken (no algorithm): the GEMM and the kernel, as the
             * session does. */
            st->lt_fallbacks++;
            printf("note: %s: cuBLASLt took no %s epilogue for the %lld x %lld x %lld GEMM\n", where, name,
                   (long long)g->m, (long long)g->n, (long long)g->k);
            r->gpu->ops->gemm(r->gpu, g, dev[0], dev[1], dev[2]);
            void *kargs[IR_KERNEL_MAX_BUFS];
            for (int a = 0; a < ks->nargs; a++) {
                kargs[a] = NULL;
                for (int k = 0; k < dm; k++)
                    if ((char *)e->args[i + 1][a] >= drs[k].lo && (char *)e->args[i + 1][a] < drs[k].hi)
                        kargs[a] = (char *)drs[k].dev + ((char *)e->args[i + 1][a] - drs[k].lo);
                if (!kargs[a])
                    kl_panic("an epilogue kernel argument outside the GEMM step's buffers");
            }
            r->gpu->ops->launch(r->gpu, p, ks->kernel, kargs, &ka);
        }
        from_device(r->gpu, drs, dm);
    }
    /* The results the epilogue writes, against the CPU's. */
    int outs[3] = {g->epi.d, lc.aux_written ? g->epi.aux : -1, lc.bias_written ? g->epi.bias : -1};
    for (int o = 0; o < 3; o++) {
        if (outs[o] < 0)
            continue;
        const kl_buffer *bf = &p->buffers.v[outs[o]];
        const void *got = e->ptrs[outs[o]], *want = NULL;
        for (int k = 0; k < m && !want; k++)
            if ((const char *)got >= rs[k].lo && (const char *)got < rs[k].hi)
                want = (const char *)ref[k] + ((const char *)got - rs[k].lo);
        int64_t terms = o == 2 ? g->m : 1; /* the bias gradient sums m rows */
        double rel = rel_error(bf->dtype, got, want, bf->numel, 4 * sqrt((double)(terms * g->k)) * roundoff_of(bf->dtype) * in_max);
        if (rel > st->worst[bf->dtype])
            st->worst[bf->dtype] = rel;
        if (!(rel <= bound_of(bf->dtype))) {
            printf("FAIL: gemm + cuBLASLt epilogue %s (%s): %s (%s, %lld elements) differs from the CPU's GEMM and kernel by %.3g relative (bound %.1g)\n",
                   name, where, o == 0 ? "D" : o == 1 ? "aux" : "the bias gradient", ir_dtype_name(bf->dtype),
                   (long long)bf->numel, rel, bound_of(bf->dtype));
            st->failures++;
        }
    }
    for (int k = 0; k < m; k++) {
        memcpy(rs[k].lo, ref[k], (size_t)(rs[k].hi - rs[k].lo));
        free(pre[k]);
        free(ref[k]);
    }
    st->gemms++;
    st->lt_epilogues++;
}

/* One training (or evaluation) step of e with every kernel (and, on the
 * GPU, every GEMM) checked. */
static void check_plan(kl_exec *e, const char *where, runner *r, stats *st)
{
    kl_backend *be = e->s->be;
    kl_plan *p = e->plan;
    kl_kargs ka = {1, 3};
    if (r->gpu && r->gpu->ops->prepare(r->gpu, p)) {
        printf("FAIL: %s: the CUDA backend cannot prepare the plan\n", where);
        st->failures++;
        return;
    }
    for (int i = 0; i < p->steps.n; i++) {
        kl_step *sp = &p->steps.v[i];
        bool gemm = sp->kind == KL_STEP_GEMM;
        if (gemm && sp->gemm.epi.kind != KL_LT_NONE && i + 1 < p->steps.n && p->steps.v[i + 1].lt_covered) {
            check_lt_step(e, i, where, r, st);
            i++; /* the kernel step the epilogue replaces */
            continue;
        }
        if (gemm && !r->gemms) {
            be->ops->gemm(be, &sp->gemm, e->ptrs[sp->gemm.a], e->ptrs[sp->gemm.b], e->ptrs[sp->gemm.c]);
            continue;
        }
        /* The step's buffers: its kernel arguments, or A, B and C. */
        int n = gemm ? 3 : sp->nargs;
        int ids[64];
        void *ptr[64];
        for (int a = 0; a < n; a++) {
            ids[a] = gemm ? (a == 0 ? sp->gemm.a : a == 1 ? sp->gemm.b : sp->gemm.c) : sp->args[a];
            ptr[a] = gemm ? e->ptrs[ids[a]] : e->args[i][a];
        }
        const char *name = gemm ? "gemm (cuBLASLt)" : p->kernels.v[sp->kernel].name;
        const char *what = gemm ? "matmul" : p->kernels.v[sp->kernel].what;
        void **pre = kl_xcalloc((size_t)n, sizeof(void *)), **ref = kl_xcalloc((size_t)n, sizeof(void *));
        size_t *bytes = kl_xcalloc((size_t)n, sizeof(size_t));
        /* The rounding floor's inputs (rel_error): the largest magnitude
         * the step reads and its largest buffer's element count. */
        double in_max = 0;
        int64_t largest = 1;
        for (int a = 0; a < n; a++) {
            const kl_buffer *bf = &p->buffers.v[ids[a]];
            bytes[a] = (size_t)bf->bytes;
            pre[a] = kl_xmalloc(bytes[a] + 1);
            memcpy(pre[a], ptr[a], bytes[a]);
            in_max = fmax(in_max, max_magnitude(bf->dtype, pre[a], bf->numel));
            if (bf->numel > largest)
                largest = bf->numel;
        }
        if (gemm)
            be->ops->gemm(be, &sp->gemm, ptr[0], ptr[1], ptr[2]);
        else
            be->ops->launch(be, p, sp->kernel, e->args[i], &ka);
        for (int a = 0; a < n; a++) {
            ref[a] = kl_xmalloc(bytes[a] + 1);
            memcpy(ref[a], ptr[a], bytes[a]);
        }
        bool new_kernel = true;
        for (int s = 0; s < st->seen.n && new_kernel; s++)
            new_kernel = strcmp(st->seen.v[s], name) != 0;
        if (new_kernel && !gemm)
            kl_vec_push(st->seen, kl_xstrdup(name));
        st->kernels += !gemm;
        st->gemms += gemm;
        for (int cfg = 0; cfg < r->configs; cfg++) {
            for (int a = 0; a < n; a++)
                memcpy(ptr[a], pre[a], bytes[a]);
            char err[600];
            st->runs++;
            if (run_cuda_version(r, e, i, cfg, &ka, err, sizeof err, st)) {
                printf("FAIL: %s (%s, %s): %s\n", name, what, where, err);
                st->failures++;
                continue;
            }
            for (int a = 0; a < n; a++) {
                const kl_buffer *bf = &p->buffers.v[ids[a]];
                int64_t terms = bf->numel > 0 && largest > bf->numel ? largest / bf->numel : 1;
                double rel = rel_error(bf->dtype, ptr[a], ref[a], bf->numel, 4 * sqrt((double)terms) * roundoff_of(bf->dtype) * in_max);
                if (rel > st->worst[bf->dtype])
                    st->worst[bf->dtype] = rel;
                if (!(rel <= bound_of(bf->dtype))) {
                    printf("FAIL: %s (%s, %s), configuration %d: buffer %d (%s, %lld elements) differs from the CPU by %.3g relative (bound %.1g)\n",
                           name, what, where, cfg, a, ir_dtype_name(bf->dtype), (long long)bf->numel, rel, bound_of(bf->dtype));
                    st->failures++;
                }
            }
        }
        for (int a = 0; a < n; a++) {
            memcpy(ptr[a], ref[a], bytes[a]);
            free(pre[a]);
            free(ref[a]);
        }
        free(pre);
        free(ref);
        free(bytes);
    }
}

int main(int argc, char **argv)
{
    const char *batch = "4", *precisions = NULL, *only = NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t seed = 17;
    bool gpu = false;
    KL_VEC(const char *) models = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc)
            precisions = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "cuda"))
            gpu = true, i++;
        else if (!strcmp(argv[i], "--emulate"))
            gpu = false;
        else
            kl_vec_push(models, argv[i]);
    }
    runner r = {.configs = gpu ? 1 : 2, .gemms = gpu};
    if (gpu) {
        char why[600];
        kl_cuda_options o = {.quiet = true};
        r.gpu = kl_cuda_backend_new(&o, why, sizeof why);
        if (!r.gpu) {
            printf("SKIP: %s\n", why);
            kl_vec_free(models);
            return 77;
        }
        printf("%s\n", r.gpu->desc);
    } else {
        kl_argv probe = {0};
        char why[512];
        kl_argv_add_words(&probe, cxx());
        kl_argv_add(&probe, "--version");
        int have_cxx = kl_spawn(kl_argv_end(&probe), NULL, why, sizeof why) == 0;
        kl_argv_free(&probe);
        if (!have_cxx) {
            printf("SKIP: no C++ compiler (%s) for the emulation\n", cxx());
            kl_vec_free(models);
            return 77;
        }
    }
    kl_cpu_options co = {.threads = 1, .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    int failures = 0;
    /* Every model's configurations built first, so that the emulation
     * compiles every distinct kernel of all the models once, in a few
     * programs (chunks compiled in parallel): one C++ compile per chunk,
     * not per model, and a kernel two models share (an optimizer update,
     * a loss) once. */
    typedef struct model_plans {
        plan_config cfg[16];
        int nc;
        kl_session *sess[16];
        kl_exec *ex[16];
    } model_plans;
    model_plans *mp = kl_xcalloc((size_t)models.n + 1, sizeof *mp);
    KL_VEC(char *) names = {0};
    int nchunks = threads * 2 < 2 ? 2 : threads * 2;
    kl_buf chunk[64] = {{0}};
    if (nchunks > 64)
        nchunks = 64;
    int count = 0;
    for (int m = 0; m < models.n; m++) {
        plan_config all[16];
        model_plans *q = &mp[m];
        int na = plan_configs(all, precisions);
        for (int c = 0; c < na; c++) {
            char cs[64];
            if (!only || strstr(plan_config_str(&all[c], cs, sizeof cs), only))
                q->cfg[q->nc++] = all[c];
        }
        if (q->nc == 0) {
            printf("FAIL: no configuration matches --config \"%s\"\n", only);
            failures++;
        }
        for (int c = 0; c < q->nc; c++) {
            char cs[64];
            kl_compiled *cc = plan_config_compile(models.v[m], batch, &q->cfg[c]);
            if (!cc) {
                printf("FAIL: %s (%s) does not build\n", models.v[m], plan_config_str(&q->cfg[c], cs, sizeof cs));
                failures++;
                continue;
            }
            q->sess[c] = kl_session_new(be, 3);
            q->ex[c] = kl_compiled_exec(q->sess[c], cc, NULL);
            if (!q->ex[c]) {
                printf("FAIL: %s (%s): no exec\n", models.v[m], plan_config_str(&q->cfg[c], cs, sizeof cs));
                failures++;
                continue;
            }
            const kl_plan *p = q->ex[c]->plan;
            for (int k = 0; k < p->kernels.n; k++) {
                bool seen = false;
                for (int j = 0; j < names.n && !seen; j++)
                    seen = !strcmp(names.v[j], p->kernels.v[k].name);
                if (seen)
                    continue;
                kl_vec_push(names, kl_xstrdup(p->kernels.v[k].name));
                kl_buf_puts(&chunk[count++ % nchunks], p->kernels.v[k].cuda.src);
            }
        }
    }
    int nl = gpu ? 0 : count < nchunks ? count : nchunks;
    char **programs = kl_xcalloc((size_t)nl + 1, sizeof(char *));
    for (int i = 0; i < nl; i++) {
        char *body = kir_cuda_program(chunk[i].s, KIR_CUDA_BF16 | KIR_CUDA_F16);
        programs[i] = kl_xasprintf("#include \"emu.h\"\n%s", body);
        free(body);
    }
    for (int i = 0; i < 64; i++)
        kl_buf_free(&chunk[i]);
    emu_lib *libs = kl_xcalloc((size_t)nl + 1, sizeof *libs);
    r.libs = libs;
    r.nlibs = nl;
    double t0 = kl_now();
    bool built = !nl || build_libs(programs, nl, threads, libs) == 0;
    if (!built)
        failures++;
    else if (nl)
        printf("emulation: %d distinct kernels of %d model(s) in %d programs, compiled for the host in %.1f s\n", count,
               models.n, nl, kl_now() - t0);
    for (int m = 0; m < models.n && built; m++) {
        model_plans *q = &mp[m];
        double t1 = kl_now();
        stats st = {0};
        for (int c = 0; c < q->nc; c++) {
            if (!q->ex[c])
                continue;
            char cs[64], where[256];
            snprintf(where, sizeof where, "%s, %s", models.v[m], plan_config_str(&q->cfg[c], cs, sizeof cs));
            random_inputs(q->ex[c], seed + (uint64_t)c);
            check_plan(q->ex[c], where, &r, &st);
        }
        printf("%s: %d distinct kernels (%d kernel steps%s in %d configurations, batch %s), %s: %d runs, %d launches; "
               "worst relative error f64 %.2g, f32 %.2g, bf16 %.2g, f16 %.2g; %d failures (run %.1f s)\n",
               models.v[m], st.seen.n, st.kernels, gpu ? " and their GEMMs" : "", q->nc, batch,
               gpu ? "on the GPU" : "emulated twice each", st.runs, st.launches, st.worst[IR_F64], st.worst[IR_F32],
               st.worst[IR_BF16], st.worst[IR_F16], st.failures, kl_now() - t1);
        if (st.lt_epilogues)
            printf("%s: %d GEMM steps with their cuBLASLt epilogue (%s) against the CPU's GEMM and epilogue kernel; "
                   "%d not taken by cuBLASLt (the kernel ran)\n",
                   models.v[m], st.lt_epilogues, gpu ? "cuBLASLt on the GPU" : "the host stand-in, tests/cuda/lt_emu.h",
                   st.lt_fallbacks);
        failures += st.failures;
        for (int i = 0; i < st.seen.n; i++)
            free(st.seen.v[i]);
        kl_vec_free(st.seen);
    }
    for (int i = 0; i < nl; i++) {
        free(programs[i]);
        if (libs[i].h) {
            void (*release)(void) = (void (*)(void))dlsym(libs[i].h, "kl_emu_release");
            if (release)
                release();
            dlclose(libs[i].h);
        }
    }
    free(programs);
    free(libs);
    for (int i = 0; i < names.n; i++)
        free(names.v[i]);
    kl_vec_free(names);
    for (int m = 0; m < models.n; m++)
        for (int c = 0; c < mp[m].nc; c++) {
            kl_exec_free(mp[m].ex[c]);
            if (mp[m].sess[c])
                kl_session_free(mp[m].sess[c]);
        }
    free(mp);
    be->ops->destroy(be);
    if (r.gpu)
        r.gpu->ops->destroy(r.gpu);
    kl_vec_free(models);
    printf("%s\n", failures ? "FAILED" : gpu ? "every CUDA kernel and GEMM matches the CPU backend on the GPU"
                                              : "every CUDA kernel matches the CPU backend in emulation");
    return failures ? 1 : 0;
}
