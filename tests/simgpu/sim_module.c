/* The simulated device's modules and kernels.
 *
 * cuModuleLoadData takes the image of the simulator's NVRTC (sim_image.h):
 * the program's CUDA C is compiled for the host with tests/cuda/emu.h (one
 * shared object per program, cached by content, built on a background
 * thread and waited for at the module's first launch), its __global__
 * functions are read from the source, and their registers and static
 * shared memory from ptxas's log. The occupancy calls answer from those
 * and the part's table; cuLaunchKernel refuses what a GPU refuses (block
 * and grid dimensions, threads the registers cannot hold, shared memory)
 * and queues the launch, which the stream's worker runs through the
 * emulation. A kernel without barriers or shuffles runs its threads as
 * plain calls (no coroutines), which is what keeps a full-size grid fast. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"
#include "sim_image.h"

#ifndef KILN_SIMGPU_EMU_DIR
#define KILN_SIMGPU_EMU_DIR "tests/cuda"
#endif
#ifndef KILN_SIMGPU_INCLUDE
#define KILN_SIMGPU_INCLUDE "."
#endif
#ifndef KILN_SIMGPU_CXX
#define KILN_SIMGPU_CXX "c++"
#endif
/* The CPU backend's floating-point evaluation (runtime/cpu/cc.h). */
#define FP_FLAGS "-ffp-contract=off -fno-tree-slp-vectorize -fno-math-errno"

extern char **environ;

typedef int (*emu_run_fn)(void (*)(void *const *, const void *), unsigned, unsigned, void *const *, const void *, int,
                          char *, size_t);

struct CUfunc_st {
    char name[128];
    int nparams; /* pointers, the last one the kernel arguments */
    int launch_bounds;
    int regs, smem;
    struct CUmod_st *mod;
    void *host; /* kl_emu_NAME, once built */
};

struct CUmod_st {
    char *src;
    struct CUfunc_st *fns;
    int nfns;
    bool flat; /* no barrier or shuffle anywhere: threads as plain calls */
    pthread_t builder;
    bool built, joined;
    int build_rc;
    char why[4096];
    char so[1024];
    void *dl;
    emu_run_fn run, run_flat;
    pthread_mutex_t run_lock; /* emu.h's state is the object's: one launch at a time */
};

/* ---- reading the program ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void skip_space(const char **s)
{
    while (**s == ' ' || **s == '\n' || **s == '\t')
        (*s)++;
}

/* Every `extern "C" __global__ void [__launch_bounds__(...)] NAME(...)`. */
static void read_functions(struct CUmod_st *m)
{
    const char *key = "__global__ void";
    int cap = 8;
    m->fns = calloc((size_t)cap, sizeof *m->fns);
    for (const char *s = strstr(m->src, key); s; s = strstr(s, key)) {
        s += strlen(key);
        skip_space(&s);
        int bounds = 0;
        if (!strncmp(s, "__launch_bounds__(", 18)) {
            bounds = atoi(s + 18);
            s = strchr(s, ')');
            if (!s)
                break;
            s++;
            skip_space(&s);
        }
        const char *name = s;
        while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')
            s++;
        size_t len = (size_t)(s - name);
        if (*s != '(' || !len || len >= sizeof m->fns->name)
            continue;
        int depth = 0, commas = 0;
        bool any = false;
        for (s++; *s && (depth || *s != ')'); s++) {
            depth += *s == '(';
            depth -= *s == ')';
            commas += !depth && *s == ',';
            any |= *s != ' ';
        }
        if (m->nfns == cap)
            m->fns = realloc(m->fns, sizeof *m->fns * (size_t)(cap *= 2));
        struct CUfunc_st *f = &m->fns[m->nfns++];
        memset(f, 0, sizeof *f);
        memcpy(f->name, name, len);
        f->nparams = any ? commas + 1 : 0;
        f->launch_bounds = bounds;
        f->regs = 32; /* when the log says nothing (PTX) */
        f->mod = m;
    }
}

/* ptxas -v: "Function properties for NAME" ... "Used N registers, M bytes smem". */
static void read_log(struct CUmod_st *m, const char *log)
{
    for (int i = 0; i < m->nfns; i++) {
        char want[200];
        snprintf(want, sizeof want, "Function properties for %s\n", m->fns[i].name);
        const char *p = strstr(log, want);
        const char *used = p ? strstr(p, "Used ") : NULL;
        if (!used)
            continue;
        m->fns[i].regs = atoi(used + 5);
        const char *eol = strchr(used, '\n'), *smem = strstr(used, " bytes smem");
        if (smem && (!eol || smem < eol)) {
            const char *n = smem;
            while (n > used && n[-1] >= '0' && n[-1] <= '9')
                n--;
            m->fns[i].smem = atoi(n);
        }
    }
}

/* ---- building it for the host ---- */

static int mkdirs(char *p)
{
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/')
            continue;
        char c = *s;
        *s = 0;
        int rc = mkdir(p, 0700) && errno != EEXIST ? -1 : 0;
        *s = c;
        if (rc)
            return -1;
        if (!c)
            return 0;
    }
}

static void cache_dir(char *out, size_t n)
{
    const char *k = getenv("KILN_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (k && *k)
        snprintf(out, n, "%s/simgpu", k);
    else if (x && *x)
        snprintf(out, n, "%s/kiln/simgpu", x);
    else
        snprintf(out, n, "%s/.cache/kiln/simgpu", h && *h ? h : "/tmp");
}

static uint64_t file_hash(uint64_t h, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return h;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        h = fnv(h, buf, got);
    fclose(f);
    return h;
}

/* Runs argv with its output in log; 0 on exit status 0. */
static int run(char *const *argv, const char *log, char *why, size_t n)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) {
        snprintf(why, n, "%s: %s", argv[0], strerror(rc));
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    snprintf(why, n, "%s: exit status %d", argv[0], WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return -1;
}

/* At most KILN_SIMGPU_JOBS (2) host compiles at once: the machine the
 * tests share is small. */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_cv = PTHREAD_COND_INITIALIZER;
static int jobs_running;

static int job_limit(void)
{
    const char *j = getenv("KILN_SIMGPU_JOBS");
    int n = j ? atoi(j) : 2;
    return n < 1 ? 1 : n;
}

/* emu.h precompiled once (as tests/cuda/kernel_check.c's emu_pch: the
 * header's own includes are most of a small module's compile time) into
 * DIR/pch-KEY/emu.h.gch, KEY the compiler, flags and headers, that folder
 * first on the include path, where GCC takes the .gch in place of the
 * header. Only a speed-up: where it cannot be made, or the compiler reads
 * no .gch this way, the modules compile the header. Made once a process
 * (the first module to need a compile), under a temporary name renamed
 * into its folder (a concurrent process may win: its file is the same). */
static pthread_mutex_t pch_lock = PTHREAD_MUTEX_INITIALIZER;
static int pch_state; /* 0 not tried, 1 made, -1 none */
static char pch_dir[1000];

static const char *host_pch(char *dir, const char *cxx, const char *flags, uint64_t key)
{
    pthread_mutex_lock(&pch_lock);
    if (!pch_state) {
        pch_state = -1;
        char gch[1100], tmp[1100], log[1100], why[600], fl[512];
        snprintf(pch_dir, sizeof pch_dir, "%s/pch-%016llx", dir, (unsigned long long)key);
        snprintf(gch, sizeof gch, "%s/emu.h.gch", pch_dir);
        snprintf(tmp, sizeof tmp, "%s.%d.gch", pch_dir, (int)getpid());
        snprintf(log, sizeof log, "%s.%d.log", pch_dir, (int)getpid());
        struct stat st;
        if (stat(gch, &st) == 0) {
            pch_state = 1;
        } else if (mkdirs(dir) == 0) {
            char *argv[32];
            int a = 0;
            argv[a++] = (char *)cxx;
            snprintf(fl, sizeof fl, "%s %s", flags, FP_FLAGS);
            for (char *w = strtok(fl, " "); w && a < 24; w = strtok(NULL, " "))
                argv[a++] = w;
            argv[a++] = "-x";
            argv[a++] = "c++-header";
            argv[a++] = "-I" KILN_SIMGPU_EMU_DIR;
            argv[a++] = "-I" KILN_SIMGPU_INCLUDE;
            argv[a++] = "-o";
            argv[a++] = tmp;
            argv[a++] = KILN_SIMGPU_EMU_DIR "/emu.h";
            argv[a] = NULL;
            if (run(argv, log, why, sizeof why) == 0 && (mkdir(pch_dir, 0700) == 0 || errno == EEXIST) &&
                (rename(tmp, gch) == 0 || stat(gch, &st) == 0))
                pch_state = 1;
            remove(tmp);
            remove(log);
        }
    }
    pthread_mutex_unlock(&pch_lock);
    return pch_state > 0 ? pch_dir : NULL;
}

static void *build(void *arg)
{
    struct CUmod_st *m = arg;
    char dir[900];
    cache_dir(dir, sizeof dir);
    const char *cxx = getenv("KILN_CXX") && *getenv("KILN_CXX") ? getenv("KILN_CXX") : KILN_SIMGPU_CXX;
    const char *flags = "-std=c++17 -O1 -fPIC -shared -w";
    uint64_t h = fnv(14695981039346656037ull, m->src, strlen(m->src));
    h = fnv(h, cxx, strlen(cxx));
    h = fnv(h, flags, strlen(flags));
    h = file_hash(h, KILN_SIMGPU_EMU_DIR "/emu.h");
    h = file_hash(h, KILN_SIMGPU_INCLUDE "/base/scalar.h");
    /* The header's key: the same but the module's text. */
    uint64_t hk = fnv(14695981039346656037ull, cxx, strlen(cxx));
    hk = fnv(hk, flags, strlen(flags));
    hk = fnv(hk, FP_FLAGS, strlen(FP_FLAGS));
    hk = file_hash(hk, KILN_SIMGPU_EMU_DIR "/emu.h");
    hk = file_hash(hk, KILN_SIMGPU_INCLUDE "/base/scalar.h");
    snprintf(m->so, sizeof m->so, "%s/%016llx.so", dir, (unsigned long long)h);
    struct stat st;
    /* A missing key is built under its lock (KEY.lock, flock: released
     * when its holder exits), so that ranks or tests needing one module
     * at once compile it once, and its temporaries have fixed names that
     * the next builder overwrites (a process stopped mid-build leaves
     * none behind under its pid). The lock comes before a job slot: a
     * slot's holder never waits for a lock. */
    int lk = -1;
    if (stat(m->so, &st) != 0 && mkdirs(dir) == 0) {
        char lock[1100];
        snprintf(lock, sizeof lock, "%s/%016llx.lock", dir, (unsigned long long)h);
        lk = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        while (lk >= 0 && flock(lk, LOCK_EX) != 0 && errno == EINTR)
            ;
    }
    if (stat(m->so, &st) != 0) {
        const char *pch = host_pch(dir, cxx, flags, hk);
        pthread_mutex_lock(&jobs_lock);
        while (jobs_running >= job_limit())
            pthread_cond_wait(&jobs_cv, &jobs_lock);
        jobs_running++;
        pthread_mutex_unlock(&jobs_lock);
        char src[1100], tmp[1100], log[1100];
        snprintf(src, sizeof src, "%s/%016llx.cpp", dir, (unsigned long long)h);
        snprintf(tmp, sizeof tmp, "%s/%016llx.tmp.so", dir, (unsigned long long)h);
        snprintf(log, sizeof log, "%s/%016llx.log", dir, (unsigned long long)h);
        FILE *f = mkdirs(dir) ? NULL : fopen(src, "w");
        if (!f) {
            snprintf(m->why, sizeof m->why, "cannot write %s", src);
            m->build_rc = -1;
        } else {
            fprintf(f, "#include \"emu.h\"\n%s", m->src);
            fclose(f);
            char *argv[32];
            int a = 0;
            argv[a++] = (char *)cxx;
            char fl[512];
            snprintf(fl, sizeof fl, "%s %s", flags, FP_FLAGS);
            for (char *w = strtok(fl, " "); w && a < 24; w = strtok(NULL, " "))
                argv[a++] = w;
            char pch_inc[1100];
            if (pch) {
                snprintf(pch_inc, sizeof pch_inc, "-I%s", pch);
                argv[a++] = pch_inc;
            }
            argv[a++] = "-I" KILN_SIMGPU_EMU_DIR;
            argv[a++] = "-I" KILN_SIMGPU_INCLUDE;
            argv[a++] = "-o";
            argv[a++] = tmp;
            argv[a++] = src;
            argv[a] = NULL;
            m->build_rc = run(argv, log, m->why, sizeof m->why);
            if (!m->build_rc && rename(tmp, m->so)) {
                snprintf(m->why, sizeof m->why, "cannot rename %s", tmp);
                m->build_rc = -1;
            }
            if (m->build_rc) {
                size_t l = strlen(m->why);
                snprintf(m->why + l, sizeof m->why - l, " (the log: %s; the program: %s)", log, src);
            } else {
                remove(src);
                remove(log);
            }
        }
        pthread_mutex_lock(&jobs_lock);
        jobs_running--;
        pthread_cond_broadcast(&jobs_cv);
        pthread_mutex_unlock(&jobs_lock);
    }
    if (lk >= 0)
        close(lk); /* the lock goes with it */
    m->built = true;
    return NULL;
}

/* Waits for the host build and opens it; 0, or the launch's error. */
static CUresult ready(struct CUmod_st *m)
{
    if (!m->joined) {
        pthread_join(m->builder, NULL);
        m->joined = true;
        if (!m->build_rc) {
            m->dl = dlopen(m->so, RTLD_NOW | RTLD_LOCAL);
            m->run = m->dl ? (emu_run_fn)dlsym(m->dl, "kl_emu_run") : NULL;
            m->run_flat = m->dl ? (emu_run_fn)dlsym(m->dl, "kl_emu_run_flat") : NULL;
            if (!m->run || !m->run_flat) {
                snprintf(m->why, sizeof m->why, "cannot open %s: %s", m->so, dlerror());
                m->build_rc = -1;
            }
            for (int i = 0; i < m->nfns && !m->build_rc; i++) {
                char sym[160];
                snprintf(sym, sizeof sym, "kl_emu_%s", m->fns[i].name);
                if (!(m->fns[i].host = dlsym(m->dl, sym))) {
                    snprintf(m->why, sizeof m->why, "%s has no %s", m->so, sym);
                    m->build_rc = -1;
                }
            }
        }
        if (m->build_rc)
            sim_say("the host build of a module failed: %s", m->why);
    }
    return m->build_rc ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
}

/* ---- the API ---- */

SIM_EXPORT CUresult cuModuleLoadData(CUmodule *out, const void *image)
{
    SIM_FAULT(CUresult, "cuModuleLoadData");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    sim_image_hdr h;
    memcpy(&h, image, sizeof h);
    if (memcmp(h.magic, SIM_IMAGE_MAGIC, 8)) {
        sim_say("cuModuleLoadData: not an image of the simulated device's NVRTC (a CUBIN or PTX for a real GPU)");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const char *src = (const char *)image + sizeof h + h.image_bytes;
    struct CUmod_st *m = calloc(1, sizeof *m);
    m->src = malloc(h.src_bytes + 1);
    memcpy(m->src, src, h.src_bytes);
    m->src[h.src_bytes] = 0;
    char *log = malloc(h.log_bytes + 1);
    memcpy(log, src + h.src_bytes, h.log_bytes);
    log[h.log_bytes] = 0;
    read_functions(m);
    read_log(m, log);
    free(log);
    m->flat = !strstr(m->src, "__syncthreads") && !strstr(m->src, "__shfl") && !strstr(m->src, "__syncwarp");
    pthread_mutex_init(&m->run_lock, NULL);
    if (pthread_create(&m->builder, NULL, build, m)) {
        free(m->src);
        free(m->fns);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = m;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleUnload(CUmodule m)
{
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!m->joined)
        pthread_join(m->builder, NULL);
    /* The objects stay open: dlclose of emu.h's thread-local state is
     * not worth the risk, and a process loads each program once. */
    pthread_mutex_destroy(&m->run_lock);
    free(m->src);
    free(m->fns);
    free(m);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    SIM_FAULT(CUresult, "cuModuleGetFunction");
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!f || !name)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < m->nfns; i++)
        if (!strcmp(m->fns[i].name, name)) {
            *f = &m->fns[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

/* Registers are allocated per warp in units of 256. */
static int warp_regs(const struct CUfunc_st *f)
{
    int r = f->regs < 1 ? 1 : f->regs;
    return (r * 32 + 255) / 256 * 256;
}

static int max_threads(const struct CUfunc_st *f)
{
    int warps = sim_dev->regs_block / warp_regs(f);
    int t = warps * 32;
    if (t > sim_dev->max_threads_block)
        t = sim_dev->max_threads_block;
    if (f->launch_bounds > 0 && f->launch_bounds < t)
        t = f->launch_bounds;
    return t;
}

/* Blocks of `block` threads one SM holds at once. */
static int blocks_per_sm(const struct CUfunc_st *f, int block, size_t dyn_smem)
{
    if (block < 1 || block > max_threads(f))
        return 0;
    int warps = (block + 31) / 32;
    int by_threads = sim_dev->max_threads_sm / 32 / warps;
    int by_regs = sim_dev->regs_sm / warp_regs(f) / warps;
    size_t smem = (size_t)f->smem + dyn_smem;
    /* 1 KiB per block is the system's (compute capability 8.0 and later). */
    int by_smem = smem ? (int)((size_t)sim_dev->smem_sm / (smem + 1024)) : sim_dev->max_blocks_sm;
    int b = sim_dev->max_blocks_sm;
    b = by_threads < b ? by_threads : b;
    b = by_regs < b ? by_regs : b;
    return by_smem < b ? by_smem : b;
}

SIM_EXPORT CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    SIM_FAULT(CUresult, "cuFuncGetAttribute");
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = max_threads(f); break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = f->regs; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = f->smem; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = sim_dev->smem_block - f->smem; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = sim_dev->major * 10 + sim_dev->minor; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t dyn_smem)
{
    SIM_FAULT(CUresult, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = blocks_per_sm(f, block, dyn_smem);
    return CUDA_SUCCESS;
}

/* The largest block of the best occupancy, as CUDA's own search. */
SIM_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction f, CUoccupancyB2DSize smem_of,
                                                     size_t dyn_smem, int limit)
{
    SIM_FAULT(CUresult, "cuOccupancyMaxPotentialBlockSize");
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!min_grid || !block)
        return CUDA_ERROR_INVALID_VALUE;
    int top = max_threads(f);
    if (limit > 0 && limit < top)
        top = limit;
    int best = 0, best_b = 0, best_blocks = 0;
    for (int b = top / 32 * 32; b >= 32; b -= 32) {
        int blocks = blocks_per_sm(f, b, smem_of ? smem_of(b) : dyn_smem);
        if (blocks * ((b + 31) / 32) > best) {
            best = blocks * ((b + 31) / 32);
            best_b = b;
            best_blocks = blocks;
        }
    }
    *block = best_b;
    *min_grid = best_blocks * sim_dev->sms;
    return CUDA_SUCCESS;
}

/* ---- launches ---- */

typedef struct launch_arg {
    struct CUfunc_st *f;
    unsigned grid, block;
    void *ptrs[]; /* the function's nparams values */
} launch_arg;

static void run_launch(void *p)
{
    launch_arg *a = p;
    struct CUmod_st *m = a->f->mod;
    char err[512] = "";
    int np = a->f->nparams;
    static int trace = -1;
    if (trace < 0)
        trace = getenv("KILN_SIMGPU_TRACE") && !strcmp(getenv("KILN_SIMGPU_TRACE"), "1");
    struct timespec t0, t1;
    if (trace)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    sim_san_kernel_before(a->f->name, a->ptrs, np);
    pthread_mutex_lock(&m->run_lock);
    emu_run_fn go = m->flat ? m->run_flat : m->run;
    int rc = go((void (*)(void *const *, const void *))a->f->host, a->grid, a->block, a->ptrs,
                np ? a->ptrs[np - 1] : NULL, 0, err, sizeof err);
    pthread_mutex_unlock(&m->run_lock);
    if (!rc)
        sim_san_kernel_after(a->f->name, a->ptrs, np);
    if (trace) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        sim_say("trace: %s, %u blocks of %u threads%s: %.3f ms", a->f->name, a->grid, a->block,
                m->flat ? "" : " (coroutines)", (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    }
    if (rc)
        sim_fail(CUDA_ERROR_LAUNCH_FAILED, "kernel %s (%u blocks of %u threads): %s", a->f->name, a->grid, a->block,
                 err);
}

SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned smem, CUstream s, void **params, void **extra)
{
    SIM_FAULT(CUresult, "cuLaunchKernel");
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = sim_sticky();
    if (r)
        return r;
    /* What a GPU refuses. */
    if (!gx || !gy || !gz || !bx || !by || !bz || gy > 65535 || gz > 65535 || gx > 2147483647u || bx > 1024 ||
        by > 1024 || bz > 64 || (uint64_t)bx * by * bz > (uint64_t)sim_dev->max_threads_block) {
        sim_say("cuLaunchKernel %s: grid %u x %u x %u, block %u x %u x %u is outside the device's limits", f->name, gx,
                gy, gz, bx, by, bz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if ((int)(bx * by * bz) > max_threads(f)) {
        sim_say("cuLaunchKernel %s: %u threads per block, but its %d registers allow %d", f->name, bx * by * bz,
                f->regs, max_threads(f));
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    if ((size_t)smem + (size_t)f->smem > (size_t)sim_dev->smem_block) {
        sim_say("cuLaunchKernel %s: %u + %d bytes of shared memory, more than %d per block", f->name, smem, f->smem,
                sim_dev->smem_block);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (extra || (f->nparams && !params))
        return CUDA_ERROR_INVALID_VALUE;
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || smem) {
        sim_say("cuLaunchKernel %s: the simulator runs one-dimensional launches without dynamic shared memory only",
                f->name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if ((r = ready(f->mod)))
        return r;
    size_t bytes = sizeof(launch_arg) + (size_t)f->nparams * sizeof(void *);
    launch_arg *a = calloc(1, bytes);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->f = f, a->grid = gx, a->block = bx;
    /* The parameters' values are taken now, as cuLaunchKernel does. */
    for (int i = 0; i < f->nparams; i++)
        memcpy(&a->ptrs[i], params[i], sizeof(void *));
    r = sim_enqueue(s, run_launch, a, bytes);
    free(a);
    return r;
}
