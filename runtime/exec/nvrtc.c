/* NVRTC: generated CUDA C to CUBIN (or PTX), many programs in parallel,
 * through an on-disk cache. See nvrtc.h.
 *
 * The cache key is a hash of the program, the options (architecture and
 * include folder among them), the output kind and NVRTC's version; an
 * entry is the key's whole text (KEY.key: a hit is compared with it, so a
 * program never gets another's image whose key hashes alike), the image
 * and NVRTC's log (ptxas -v lines), each written under a temporary name
 * and renamed into place, so concurrent processes never read half a file.
 * A missing entry is compiled under the key's lock (KEY.lock), once when
 * several processes need it at once. A warm start compiles nothing. */
#include <dlfcn.h>
#include <errno.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "runtime/files/cache_dir.h"
#include "nvrtc.h"
#include "base/thread.h"
#include "runtime/cpu/simgpu.h"
#include "runtime/files/outfile.h"

#ifndef KILN_CUDA_INCLUDE
#define KILN_CUDA_INCLUDE "/usr/local/cuda/include"
#endif
#ifndef KILN_CUDA_LIBDIR
#define KILN_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* ---- opening libraries ---- */

void *kl_cuda_dlopen(const char *const *names, char *why, size_t n)
{
    if (kl_simgpu_wanted()) {
        char w[512];
        void *h = kl_simgpu_dlopen(names, w, sizeof w);
        if (!h && why)
            snprintf(why, n, "%s", w);
        return h;
    }
    const char *env[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH")};
    char first_err[512] = "";
    for (const char *const *nm = names; *nm; nm++) {
        void *h = dlopen(*nm, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "%s", dlerror());
        const char *dirs[] = {env[0], env[1], KILN_CUDA_LIBDIR, "/usr/local/cuda/lib64"};
        for (size_t d = 0; d < KL_ARRAY_LEN(dirs); d++) {
            if (!dirs[d] || !*dirs[d])
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s%s/%s", dirs[d], d < 2 ? "/lib64" : "", *nm);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
        }
    }
    if (why)
        snprintf(why, n, "%s", first_err[0] ? first_err : "no library name given");
    return NULL;
}

static bool has_file(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

const char *kl_cuda_include_dir(void)
{
    static char found[1024];
    if (found[0])
        return found;
    const char *env = getenv("KILN_CUDA_INCLUDE"), *home = getenv("CUDA_HOME"), *path = getenv("CUDA_PATH");
    char a[1024] = "", b[1024] = "";
    if (home && *home)
        snprintf(a, sizeof a, "%s/include", home);
    if (path && *path)
        snprintf(b, sizeof b, "%s/include", path);
    const char *dirs[] = {env, a, b, KILN_CUDA_INCLUDE, "/usr/local/cuda/include"};
    for (size_t i = 0; i < KL_ARRAY_LEN(dirs); i++) {
        if (dirs[i] && *dirs[i] && has_file(dirs[i], "cuda_bf16.h")) {
            snprintf(found, sizeof found, "%s", dirs[i]);
            return found;
        }
    }
    return NULL;
}

/* ---- NVRTC's entry points ---- */

#define NVRTC_FUNCS(X)                                                                            \
    X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram)          \
    X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetPTXSize) X(nvrtcGetPTX)            \
    X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetErrorString)

static struct {
#define X(f) __typeof__(&f) f;
    NVRTC_FUNCS(X)
#undef X
    int major, minor;
    bool simulated; /* the simulated device's NVRTC (tests/simgpu): its images are its own */
    int archs[64], narchs; /* the sm_XY NVRTC compiles CUBINs for (0: not listed) */
    char why[512];
    int rc;
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_open(void)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    void *h = kl_cuda_dlopen(names, nv.why, sizeof nv.why);
    if (!h) {
        nv.rc = -1;
        return;
    }
#define X(f)                                                                     \
    if (!(nv.f = (__typeof__(&f))dlsym(h, #f))) {                                \
        snprintf(nv.why, sizeof nv.why, "NVRTC lacks %s", #f);                   \
        nv.rc = -1;                                                              \
        return;                                                                  \
    }
    NVRTC_FUNCS(X)
#undef X
    nv.simulated = dlsym(h, "kiln_simgpu_part") != NULL;
    nvrtcResult vr = nv.nvrtcVersion(&nv.major, &nv.minor);
    if (vr != NVRTC_SUCCESS) {
        snprintf(nv.why, sizeof nv.why, "nvrtcVersion failed: %s", nv.nvrtcGetErrorString(vr));
        nv.rc = -1;
        return;
    }
    /* The targets, where NVRTC lists them (11.2 and later). */
    nvrtcResult (*num)(int *) = (nvrtcResult(*)(int *))dlsym(h, "nvrtcGetNumSupportedArchs");
    nvrtcResult (*list)(int *) = (nvrtcResult(*)(int *))dlsym(h, "nvrtcGetSupportedArchs");
    int n = 0;
    if (num && list && num(&n) == NVRTC_SUCCESS && n > 0 && n <= (int)KL_ARRAY_LEN(nv.archs) &&
        list(nv.archs) == NVRTC_SUCCESS)
        nv.narchs = n;
}

int kl_nvrtc_target(int arch, bool *ptx)
{
    *ptx = false;
    if (!nv.narchs)
        return arch;
    int best = 0, oldest = nv.archs[0];
    for (int i = 0; i < nv.narchs; i++) {
        if (nv.archs[i] == arch)
            return arch;
        best = nv.archs[i] < arch && nv.archs[i] > best ? nv.archs[i] : best;
        oldest = nv.archs[i] < oldest ? nv.archs[i] : oldest;
    }
    if (arch < oldest || !best)
        return arch; /* NVRTC's error says it cannot */
    *ptx = true;
    return best;
}

int kl_nvrtc_load(char *why, size_t n)
{
    pthread_once(&nv_once, nv_open);
    if (nv.rc && why)
        snprintf(why, n, "cannot open NVRTC: %s", nv.why);
    return nv.rc;
}

void kl_nvrtc_version(int *major, int *minor)
{
    *major = nv.major;
    *minor = nv.minor;
}

/* Every NVRTC call is checked: a failure names the call, file and line,
 * and goes to the function's `failed` label (which releases what it
 * holds). */
#define NVRTC_CHECK(call)                                                                              \
    do {                                                                                               \
        nvrtcResult rc_ = (call);                                                                      \
        if (rc_ != NVRTC_SUCCESS) {                                                                    \
            kl_error("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, nv.nvrtcGetErrorString(rc_)); \
            goto failed;                                                                               \
        }                                                                                              \
    } while (0)

/* ---- the cache ---- */

/* A cache file, opened through kl_cache_open: a regular file of the
 * user's own that others cannot write, no link followed (cache_dir.h). */
static int read_all(const char *path, void **data, size_t *size)
{
    int fd = kl_cache_open(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    KL_VEC(char) v = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        for (size_t i = 0; i < got; i++)
            kl_vec_push(v, chunk[i]);
    bool err = ferror(f);
    fclose(f);
    if (err) {
        kl_vec_free(v);
        return -1;
    }
    kl_vec_push(v, 0); /* PTX and logs are text */
    *data = v.v;
    *size = (size_t)v.n - 1;
    return 0;
}

/* Through outfile.h: concurrent compilers of one kernel each rename a
 * whole file, and a link planted in a shared cache folder is never
 * followed. The cache is an optimisation: a failed write is reported and
 * only costs a compile next time. */
static void write_atomic(const char *path, const void *data, size_t size)
{
    kl_outfile o;
    kl_cache_clear_odd(path); /* a planted link goes; its target is kept */
    if (kl_outfile_begin(&o, path))
        return;
    kl_outfile_write(&o, data, size);
    kl_outfile_commit(&o, 0644); /* a file others may write is not read back */
}

/* ---- compiling ---- */

typedef struct compile_ctx {
    kl_nvrtc_job *jobs;
    int n;
    const kl_nvrtc_opts *o;
    const char *opts[8];
    int nopts;
    uint64_t key_base;
    char *dir;
    int next;
    pthread_mutex_t lock;
} compile_ctx;

static void print_numbered(FILE *f, const char *src)
{
    int line = 1;
    fprintf(f, "%5d  ", line);
    for (const char *s = src; *s; s++) {
        fputc(*s, f);
        if (*s == '\n' && s[1])
            fprintf(f, "%5d  ", ++line);
    }
}

/* NVRTC's image and log of j (no cache). */
static int compile_program(compile_ctx *cx, kl_nvrtc_job *j)
{
    const kl_nvrtc_opts *o = cx->o;
    nvrtcProgram prog = NULL;
    int result = -1;
    NVRTC_CHECK(nv.nvrtcCreateProgram(&prog, j->src, j->name, 0, NULL, NULL));
    nvrtcResult rc = nv.nvrtcCompileProgram(prog, cx->nopts, cx->opts);
    size_t ls = 0;
    if (nv.nvrtcGetProgramLogSize(prog, &ls) == NVRTC_SUCCESS && ls > 0) {
        j->log = kl_xmalloc(ls + 1);
        if (nv.nvrtcGetProgramLog(prog, j->log) != NVRTC_SUCCESS)
            j->log[0] = 0;
        j->log[ls] = 0;
    } else {
        j->log = kl_xstrdup("");
    }
    if (rc != NVRTC_SUCCESS) {
        pthread_mutex_lock(&cx->lock);
        kl_error("NVRTC could not compile kernel %s for %s (%s):\n%s\nthe program:", j->name, o->arch,
                 nv.nvrtcGetErrorString(rc), j->log);
        print_numbered(kl_diag_stream(), j->src);
        pthread_mutex_unlock(&cx->lock);
        goto failed;
    }
    size_t size = 0;
    if (o->ptx) {
        NVRTC_CHECK(nv.nvrtcGetPTXSize(prog, &size));
        j->image = kl_xmalloc(size + 1);
        NVRTC_CHECK(nv.nvrtcGetPTX(prog, j->image));
        ((char *)j->image)[size] = 0;
    } else {
        NVRTC_CHECK(nv.nvrtcGetCUBINSize(prog, &size));
        j->image = kl_xmalloc(size + 1);
        NVRTC_CHECK(nv.nvrtcGetCUBIN(prog, j->image));
    }
    j->size = size;
    nvrtcProgram done = prog;
    prog = NULL; /* not destroyed twice, even when this fails */
    NVRTC_CHECK(nv.nvrtcDestroyProgram(&done));
    result = 0;
failed:
    /* The job's image and log are the caller's (kl_nvrtc_jobs_free). */
    if (prog)
        nv.nvrtcDestroyProgram(&prog);
    return result;
}

/* The key's text: everything the key hashes (the options, NVRTC's
 * version, the output kind, the program), which a cache entry carries
 * (KEY.key) so that a hit is this program's and never another's whose
 * key hashes alike. */
static char *key_text(const compile_ctx *cx, const char *src)
{
    kl_buf b = {0};
    for (int i = 0; i < cx->nopts; i++)
        kl_buf_printf(&b, "%s\n", cx->opts[i]);
    kl_buf_printf(&b, "NVRTC %d.%d %s%s\n", nv.major, nv.minor, cx->o->ptx ? "ptx" : "cubin", nv.simulated ? " simulated" : "");
    kl_buf_puts(&b, src);
    return kl_buf_take(&b);
}

/* The cache's entry for the key, if it has one and it is the key's. */
static bool read_entry(kl_nvrtc_job *j, const char *img_path, const char *log_path, const char *key_path, const char *key)
{
    void *text = NULL;
    size_t n = 0, ls;
    bool ours = read_all(key_path, &text, &n) == 0 && n == strlen(key) && !memcmp(text, key, n);
    free(text);
    if (!ours || read_all(img_path, &j->image, &j->size))
        return false;
    if (read_all(log_path, (void **)&j->log, &ls))
        j->log = kl_xstrdup("");
    j->cached = true;
    return true;
}

/* From the cache, else compiled and stored. A missing key is compiled
 * under its lock (cache_dir.h), so that tests or ranks needing one kernel
 * at once compile it once: the others wait and read what the first
 * wrote. */
static int compile_one(compile_ctx *cx, kl_nvrtc_job *j)
{
    if (!cx->dir)
        return compile_program(cx, j);
    const kl_nvrtc_opts *o = cx->o;
    uint64_t h = kl_hash_bytes(cx->key_base, j->src, strlen(j->src));
    char *base = kl_xasprintf("%s/%016llx", cx->dir, (unsigned long long)h);
    char *img_path = kl_xasprintf("%s.%s", base, o->ptx ? "ptx" : "cubin");
    char *log_path = kl_xasprintf("%s.log", base), *key_path = kl_xasprintf("%s.key", base);
    char *lock_path = kl_xasprintf("%s.lock", base), *key = key_text(cx, j->src);
    int rc = 0, lk = -1;
    bool hit = read_entry(j, img_path, log_path, key_path, key);
    if (!hit && (lk = kl_cache_lock(lock_path)) >= 0)
        hit = read_entry(j, img_path, log_path, key_path, key); /* another may have compiled it meanwhile */
    if (!hit) {
        rc = compile_program(cx, j);
        if (rc == 0) {
            /* The key and the log first: an image implies both. */
            write_atomic(key_path, key, strlen(key));
            write_atomic(log_path, j->log, strlen(j->log));
            write_atomic(img_path, j->image, j->size);
        }
    }
    kl_cache_unlock(lk);
    free(key);
    free(lock_path);
    free(key_path);
    free(log_path);
    free(img_path);
    free(base);
    return rc;
}

static void *worker(void *arg)
{
    compile_ctx *cx = arg;
    for (;;) {
        pthread_mutex_lock(&cx->lock);
        int i = cx->next++;
        pthread_mutex_unlock(&cx->lock);
        if (i >= cx->n)
            return NULL;
        cx->jobs[i].rc = compile_one(cx, &cx->jobs[i]);
    }
}

int kl_nvrtc_compile(kl_nvrtc_job *jobs, int n, const kl_nvrtc_opts *o)
{
    char why[600];
    if (kl_nvrtc_load(why, sizeof why)) {
        kl_error("%s", why);
        for (int i = 0; i < n; i++)
            jobs[i].rc = -1;
        return n;
    }
    /* "sm_90", "compute_90" or "90": the digits after the last '_'. */
    const char *digits = strrchr(o->arch, '_') ? strrchr(o->arch, '_') + 1 : o->arch;
    /* A GPU newer than NVRTC's CUBIN targets: PTX for the newest target
     * below it, which the driver JIT-compiles (and caches) when loading. */
    kl_nvrtc_opts jit = *o;
    char jit_arch[32];
    bool to_ptx = false;
    int target = o->ptx ? 0 : kl_nvrtc_target(atoi(digits), &to_ptx);
    if (to_ptx) {
        snprintf(jit_arch, sizeof jit_arch, "compute_%d", target);
        if (!o->quiet)
            kl_fprintf_escaped(
                stderr, "kiln: %s is newer than NVRTC %d.%d's CUBIN targets: PTX for %s, JIT-compiled by the driver\n",
                o->arch, nv.major, nv.minor, jit_arch);
        jit.arch = jit_arch;
        jit.ptx = true;
        o = &jit;
        digits = jit_arch + strlen("compute_");
    }
    compile_ctx cx = {.jobs = jobs, .n = n, .o = o};
    pthread_mutex_init(&cx.lock, NULL);
    char arch[64], inc[1100];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s%s", o->ptx ? "compute_" : "sm_", digits);
    cx.opts[cx.nopts++] = arch;
    cx.opts[cx.nopts++] = "-std=c++17";
    cx.opts[cx.nopts++] = "-DKL_CUDA=1";
    if (!o->ptx)
        cx.opts[cx.nopts++] = "--ptxas-options=-v";
    const char *incdir = kl_cuda_include_dir();
    if (incdir) {
        snprintf(inc, sizeof inc, "-I%s", incdir);
        cx.opts[cx.nopts++] = inc;
    }
    uint64_t key = KL_HASH_INIT;
    for (int i = 0; i < cx.nopts; i++)
        key = kl_hash_bytes(key, cx.opts[i], strlen(cx.opts[i]) + 1);
    int ver[2] = {nv.major, nv.minor};
    key = kl_hash_bytes(key, ver, sizeof ver);
    key = kl_hash_bytes(key, o->ptx ? "ptx" : "cubin", o->ptx ? 3 : 5);
    if (nv.simulated)
        key = kl_hash_bytes(key, "simulated", 9);
    cx.key_base = key;
    char not_private[1024];
    if (!o->no_cache && o->cache_dir && kl_cache_seal(o->cache_dir, o->cache_dir, not_private, sizeof not_private))
        kl_fprintf_escaped(kl_diag_stream(), "kiln: note: not using the kernel cache folder (not private): %s\n",
                           not_private);
    else if (!o->no_cache)
        cx.dir = o->cache_dir ? kl_xstrdup(o->cache_dir) : kl_cache_dir("cuda");
    int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    if (threads > n)
        threads = n;
    if (threads > 64)
        threads = 64;
    if (!o->quiet && n > 0)
        kl_fprintf_escaped(stderr, "kiln: NVRTC %d.%d: %d kernels for %s (%d threads, cache %s)\n", nv.major, nv.minor,
                           n, o->arch, threads, cx.dir ? cx.dir : "off");
    pthread_t tid[64];
    int started = 0;
    for (int t = 0; t < threads; t++)
        if (kl_thread_create(&tid[t], worker, &cx) == 0)
            started++;
    if (!started)
        worker(&cx);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&cx.lock);
    free(cx.dir);
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed += jobs[i].rc != 0;
    return failed;
}

void kl_nvrtc_jobs_free(kl_nvrtc_job *jobs, int n)
{
    if (!jobs)
        return;
    for (int i = 0; i < n; i++) {
        free(jobs[i].owned);
        free(jobs[i].image);
        free(jobs[i].log);
    }
    free(jobs);
}

/* ptxas -v prints, per function:
 *   ptxas info    : Compiling entry function 'NAME' for 'sm_90'
 *   ptxas info    : Function properties for NAME
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 8 registers, used 0 barriers, ... */
int kl_ptxas_info_of(const char *log, const char *fn, kl_ptxas_info *out)
{
    char want[256];
    snprintf(want, sizeof want, "Function properties for %s\n", fn);
    const char *p = strstr(log, want);
    if (!p)
        return -1;
    p += strlen(want);
    const char *stack = strstr(p, "bytes stack frame");
    const char *used = strstr(p, "Used ");
    if (!stack || !used)
        return -1;
    /* Back up to the number before "bytes stack frame". */
    const char *q = stack;
    while (q > p && (q[-1] == ' '))
        q--;
    while (q > p && q[-1] >= '0' && q[-1] <= '9')
        q--;
    memset(out, 0, sizeof *out);
    if (sscanf(q, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &out->stack_bytes,
               &out->spill_stores, &out->spill_loads) != 3)
        return -1;
    if (sscanf(used, "Used %d registers", &out->registers) != 1)
        return -1;
    /* "Used 30 registers, 384 bytes smem, 380 bytes cmem[0]" (no smem
     * entry when the function has none). */
    const char *eol = strchr(used, '\n');
    const char *smem = strstr(used, " bytes smem");
    if (smem && (!eol || smem < eol)) {
        const char *n = smem;
        while (n > used && n[-1] >= '0' && n[-1] <= '9')
            n--;
        out->smem_bytes = atoi(n);
    }
    return 0;
}
