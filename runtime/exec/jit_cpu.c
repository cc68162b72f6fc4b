/* Run-time compilation of generated C kernels, with an on-disk cache.
 *
 * The cache key is a hash of the source, the compiler and its flags; a
 * compiled object is written under a temporary name and renamed into
 * place, so concurrent processes never see half a file, and carries its
 * key as a mark. The cache is private (cache_dir.h): an object is opened
 * only if it is a regular file of the user's own that others cannot
 * write, carries its key's mark, and hashes to what its sidecar (KEY.sum)
 * says; a foreign, planted or corrupt file is compiled again (and
 * replaced) instead. Temporaries are created O_EXCL (mkstemps), so no
 * link planted at a cache name is written through. The compiler runs
 * from an argument vector (runtime/cpu/spawn.c), never through a shell. */
#define _GNU_SOURCE /* memmem, sched_getaffinity */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "base/thread.h"
#include "runtime/files/cache_dir.h"
#include "runtime/files/outfile.h"
#include "runtime/cpu/spawn.h"

/* With -march=native the flags do not say which CPU the object is for: a
 * cache shared by machines (a network home, a copied container) would
 * hand one CPU's AVX-512 object to another without it (SIGILL). The key
 * takes in this CPU's model and feature flags from /proc/cpuinfo. */
static uint64_t hash_native_cpu(uint64_t h)
{
    if (strcmp(kl_cc_march(), "native"))
        return h;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int seen = 0;
    while (f && seen < 2 && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5)) {
            h = kl_hash_bytes(h, line, strlen(line));
            seen++;
        }
    if (f)
        fclose(f);
    return h;
}

/* Writes text to a new file of a unique name in dir ending in suffix,
 * created O_EXCL without following links (mkstemps), so a link planted at
 * a predictable name is never written through. Returns the path (caller
 * frees), or NULL with errno set. */
static char *write_temp(const char *dir, uint64_t h, const char *suffix, const char *text)
{
    char *path = kl_xasprintf("%s/%016llx.XXXXXX%s", dir, (unsigned long long)h, suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0) {
        free(path);
        return NULL;
    }
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int e = done == n ? 0 : errno ? errno : EIO;
    if (close(fd) && !e)
        e = errno;
    if (e) {
        unlink(path);
        free(path);
        errno = e;
        return NULL;
    }
    return path;
}

/* The text a compiled object for key h carries in its read-only data. */
static char *object_mark(uint64_t h)
{
    return kl_xasprintf("kiln-jit-object:%016llx", (unsigned long long)h);
}

/* The bytes of a cache file, opened through kl_cache_open (a regular file
 * of the user's own that others cannot write, no link followed). */
static int read_fd(int fd, kl_buf *out)
{
    char chunk[65536];
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            close(fd);
            return -1;
        }
        kl_buf_putn(out, chunk, (size_t)got);
    }
    close(fd);
    return 0;
}

static int read_cache_file(const char *path, kl_buf *out)
{
    int fd = kl_cache_open(path);
    return fd < 0 ? -1 : read_fd(fd, out);
}

/* The sidecar's line for an object: its key's mark and a hash of its bytes. */
static char *sum_line(const char *mark, const kl_buf *obj)
{
    uint64_t hb = kl_hash_bytes(KL_HASH_INIT, obj->s, obj->len);
    return kl_xasprintf("%s %016llx\n", mark, (unsigned long long)hb);
}

/* Whether the file at path is this cache's for its key: a regular file of
 * the user's own that others cannot write, carrying the key's mark, whose
 * bytes hash to what its sidecar (sum) says. A planted, foreign,
 * truncated or overwritten file fails and is compiled again. */
static bool verified(const char *path, const char *sum, const char *mark)
{
    kl_buf obj = {0}, side = {0};
    bool ok = false;
    if (read_cache_file(path, &obj) == 0 && read_cache_file(sum, &side) == 0 && obj.s &&
        memmem(obj.s, obj.len, mark, strlen(mark))) {
        char *want = sum_line(mark, &obj);
        ok = side.len == strlen(want) && !memcmp(side.s, want, side.len);
        free(want);
    }
    kl_buf_free(&obj);
    kl_buf_free(&side);
    return ok;
}

/* Writes text to the cache file at path whole (a temporary renamed over
 * it, 0644 less the umask; a link at path is removed, never written
 * through): a sidecar, an index entry, the prelude's header. The cache
 * is an optimisation: a failure (0 or -1) only costs a compile next time. */
static int write_cache_text(const char *path, const char *text)
{
    kl_outfile o;
    kl_cache_clear_odd(path);
    if (kl_outfile_begin(&o, path))
        return -1;
    kl_outfile_write(&o, text, strlen(text));
    return kl_outfile_commit(&o, 0644) ? -1 : 0;
}

/* Reads the object just compiled at tmp (this process's own temporary,
 * created O_EXCL in the private folder) before it is renamed into place:
 * gives its sidecar line and, for a shared object, opens it. Ranks or runs
 * that compile one key at once each rename their own object over so, and
 * their objects' bytes differ (the temporary source's name is in them):
 * loading what is at so after the rename could meet another's object with
 * this one's sidecar. */
static void *read_own(const char *tmp, const char *mark, bool shared, char **line)
{
    kl_buf obj = {0};
    void *handle = NULL;
    int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    *line = NULL;
    if (fd >= 0 && read_fd(fd, &obj) == 0 && obj.s && memmem(obj.s, obj.len, mark, strlen(mark))) {
        *line = sum_line(mark, &obj);
        handle = shared ? dlopen(tmp, RTLD_NOW | RTLD_LOCAL) : (void *)1;
    }
    kl_buf_free(&obj);
    return handle;
}

/* Compiles source (with the mark appended) into a temporary object (a
 * shared object, or a relocatable one to link) and renames it to so,
 * replacing whatever was there (a link planted at so is removed, never
 * followed), then writes its sidecar. With pch (the name of the
 * prelude's header in dir, its precompiled form beside it: prelude_pch),
 * the source's first body bytes (the prelude) are compiled as that
 * header's include instead: the same program, the key unchanged. */
static int compile_object(const char *source, const char *mark, const char *dir, uint64_t h, const char *so,
                          const char *sum, const char *reason, bool shared, const char *pch, size_t body,
                          void **handle)
{
    char *line = NULL;
    char *text = pch ? kl_xasprintf("#include \"%s\"\n%s\n__attribute__((used)) static const char kl_object_mark[] = \"%s\";\n",
                                    pch, source + body, mark)
                     : kl_xasprintf("%s\n__attribute__((used)) static const char kl_object_mark[] = \"%s\";\n", source, mark);
    char *c = write_temp(dir, h, ".c", text), *log = c ? write_temp(dir, h, ".log", "") : NULL;
    int rc = -1;
    char why[512] = "";
    /* The compiler writes a unique temporary that then replaces the cache
     * entry whole (outfile.h). */
    kl_outfile o = {0};
    kl_cache_clear_odd(so);
    if (!c || !log) {
        snprintf(why, sizeof why, "cannot write a temporary in %s: %s", dir, strerror(errno));
    } else if (kl_outfile_begin_external(&o, so)) {
        snprintf(why, sizeof why, "cannot create a temporary beside %s", so);
    } else {
        kl_argv cmd = {0};
        kl_argv_add_cc(&cmd);
        kl_argv_add_words(&cmd, shared ? "-fPIC -shared -w -o" : "-c -w -o");
        kl_argv_add(&cmd, o.tmp);
        kl_argv_add(&cmd, c);
        if (shared)
            kl_argv_add(&cmd, "-lm");
        rc = kl_spawn(kl_argv_end(&cmd), log, why, sizeof why);
        kl_argv_free(&cmd);
        if (rc == 0)
            *handle = read_own(o.tmp, mark, shared, &line);
        /* 0755 less the umask: an object others may write is never loaded. */
        if (rc == 0 && kl_outfile_commit(&o, 0755)) {
            snprintf(why, sizeof why, "cannot replace %s", so);
            rc = -1;
            if (*handle && shared)
                dlclose(*handle);
            *handle = NULL;
        } else if (rc) {
            kl_outfile_abort(&o);
        }
    }
    if (rc == 0) {
        if (line)
            write_cache_text(sum, line);
        remove(c);
        remove(log);
    } else {
        kl_source lg;
        kl_error("compiling kernels%s%s failed: %s%s%s", reason ? " for " : "", reason ? reason : "", why,
                 c ? "; the source is " : "", c ? c : "");
        if (reason)
            kl_fprintf_escaped(
                kl_diag_stream(),
                "---> the kernels for %s are not in this executable (it holds those of its train block's settings),\n"
                "     so they are compiled at start by a C compiler ($CC, else cc): install one or set CC,\n"
                "     or put these settings in the train block and kiln build again\n",
                reason);
        if (log && kl_source_read_quiet(&lg, log) == 0) {
            fputs(lg.text, kl_diag_stream());
            kl_source_free(&lg);
        }
        if (log)
            remove(log);
    }
    free(line);
    free(text);
    free(c);
    free(log);
    return rc;
}

/* Whether the object of key h in dir is this cache's (verified), opened:
 * a dlopen handle (shared) or (void *)1 for a relocatable object. */
static void *open_verified(const char *so, const char *sum, const char *mark, bool shared)
{
    if (!verified(so, sum, mark))
        return NULL;
    return shared ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : (void *)1;
}

static uint64_t object_key(const char *source, bool shared)
{
    uint64_t h = kl_hash_bytes(KL_HASH_INIT, source, strlen(source));
    h = kl_hash_bytes(h, kl_cc(), strlen(kl_cc()));
    h = kl_hash_bytes(h, kl_cc_flags(), strlen(kl_cc_flags()));
    h = hash_native_cpu(h);
    const char *ext = shared ? "so" : "o";
    return kl_hash_bytes(h, ext, strlen(ext));
}

/* The cache's compiled form of source in the sealed folder dir: a loaded
 * shared object (shared) or the path of a relocatable object to link (in
 * *path; the caller frees); its key in *key. A missing key is compiled
 * under its lock (cache_dir.h), so processes that need it at once (the
 * ranks of a job) compile it once; the others wait and load what the
 * first wrote. The notice "compiling kernels" is printed unless quiet, by
 * the first compile of those that share announced. */
static void *cached_in(const char *dir, const char *source, bool quiet, int *announced, const char *reason,
                       bool shared, const char *pch, size_t body, char **path, uint64_t *key)
{
    uint64_t h = object_key(source, shared);
    const char *ext = shared ? "so" : "o";
    char *so = kl_xasprintf("%s/%016llx.%s", dir, (unsigned long long)h, ext), *mark = object_mark(h);
    char *sum = kl_xasprintf("%s/%016llx.sum", dir, (unsigned long long)h);
    char *lock = kl_xasprintf("%s/%016llx.lock", dir, (unsigned long long)h);
    void *handle = NULL;
    int lk = -1;
    for (int pass = 0; !handle && pass < 2; pass++) {
        /* pass 0: as found; pass 1: once this process holds the key's
         * lock (another may have compiled it meanwhile). */
        if (pass == 1 && (lk = kl_cache_lock(lock)) < 0)
            break;
        handle = open_verified(so, sum, mark, shared);
    }
    if (!handle) {
        if (!quiet && !__atomic_exchange_n(announced, 1, __ATOMIC_ACQ_REL))
            kl_fprintf_escaped(stderr, "kiln: compiling kernels%s%s (%s %s)\n", reason ? " for " : "",
                               reason ? reason : "", kl_cc(), kl_cc_flags());
        if (compile_object(source, mark, dir, h, so, sum, reason, shared, pch, body, &handle) == 0 && !handle &&
            !(handle = open_verified(so, sum, mark, shared))) {
            const char *de = shared ? dlerror() : NULL;
            kl_error("cannot load compiled kernels %s: %s", so, de ? de : "it is not the cache's object for its key");
        }
    }
    kl_cache_unlock(lk);
    if (handle && path)
        *path = kl_xstrdup(so);
    if (key)
        *key = h;
    free(lock);
    free(sum);
    free(mark);
    free(so);
    return handle;
}

/* The cache's folder: cache_dir (sealed: made 0700 and checked) or the
 * user's default; NULL after saying why. The caller frees. */
static char *cache_folder(const char *cache_dir)
{
    char *dir = cache_dir ? kl_xstrdup(cache_dir) : kl_cache_dir("cpu");
    char why[1024];
    if (dir && cache_dir && kl_cache_seal(dir, dir, why, sizeof why)) {
        kl_error("the kernel cache folder is not private: %s", why);
        free(dir);
        return NULL;
    }
    return dir; /* NULL: kl_cache_dir said why */
}

static void *cached(const char *source, const char *cache_dir, bool quiet, const char *reason, bool shared,
                    char **path)
{
    char *dir = cache_folder(cache_dir);
    int announced = 0;
    void *handle = dir ? cached_in(dir, source, quiet, &announced, reason, shared, NULL, 0, path, NULL) : NULL;
    free(dir);
    return handle;
}

/* ---- kernels shared between plans ----
 *
 * Plans of one model at other batches, ranks or settings have many
 * kernels in common (a kernel's name is a hash of its source), so the
 * cache also keeps an index entry per kernel, KERNELKEY.k, naming the
 * object that holds it: "kiln-jit-kernel NAME OBJECTKEY". A plan loads
 * each kernel from the object its entry names (verified as any object)
 * and compiles only the others, in chunks compiled at once on the
 * machine's cores, each an object of its own key. An entry that is
 * missing, foreign, malformed or names an object that does not verify or
 * lacks the kernel counts as missing: the kernel is compiled again. */

/* Sources are split into chunks of about this many bytes (at least),
 * compiled at once (the prelude alone costs about 0.1 s of compiling per chunk). */
#define CHUNK_BYTES 65536
#define MAX_CHUNKS 16

static uint64_t kernel_key(const char *prelude, const kl_jit_kernel *k)
{
    uint64_t h = object_key(prelude, true);
    h = kl_hash_bytes(h, k->name, strlen(k->name) + 1);
    return kl_hash_bytes(h, k->src, strlen(k->src));
}

static char *index_path(const char *dir, uint64_t kk)
{
    return kl_xasprintf("%s/%016llx.k", dir, (unsigned long long)kk);
}

/* The key of the object that the index says holds kernel name, or 0. */
static uint64_t index_lookup(const char *dir, uint64_t kk, const char *name)
{
    char *p = index_path(dir, kk);
    kl_buf b = {0};
    uint64_t obj = 0;
    if (read_cache_file(p, &b) == 0 && b.s) {
        kl_buf_putc(&b, '\0');
        char got[80];
        unsigned long long key;
        int end = 0;
        if (sscanf(b.s, "kiln-jit-kernel %79s %16llx\n%n", got, &key, &end) == 2 && end == (int)b.len - 1 &&
            !strcmp(got, name))
            obj = key;
    }
    kl_buf_free(&b);
    free(p);
    return obj;
}

static void index_write(const char *dir, uint64_t kk, const char *name, uint64_t obj)
{
    char *p = index_path(dir, kk);
    char *line = kl_xasprintf("kiln-jit-kernel %s %016llx\n", name, (unsigned long long)obj);
    write_cache_text(p, line);
    free(line);
    free(p);
}

typedef struct jit_chunk {
    kl_buf source;
    void *handle; /* a dlopen handle, or (void *)1 for a relocatable object */
    char *path;   /* a relocatable object's */
    uint64_t key;
} jit_chunk;

typedef struct jit_work {
    jit_chunk *chunks;
    int n, first, next; /* next: the count of chunks taken (atomic) */
    const char *dir, *reason;
    const char *pch; /* the precompiled prelude's header name, or NULL */
    size_t body;     /* the prelude's length: where each chunk's kernels start */
    bool quiet, shared;
    int announced;
} jit_work;

static void *chunk_worker(void *arg)
{
    jit_work *w = arg;
    for (int i; (i = __atomic_fetch_add(&w->next, 1, __ATOMIC_ACQ_REL)) < w->n;) {
        jit_chunk *c = &w->chunks[(w->first + i) % w->n];
        c->handle = cached_in(w->dir, c->source.s, w->quiet, &w->announced, w->reason, w->shared, w->pch, w->body,
                              w->shared ? NULL : &c->path, &c->key);
    }
    return NULL;
}

/* The first core this process may run on: ranks bound to cores start on
 * different chunks, so that they compile one each instead of waiting for
 * one process to compile all. */
static int first_core(int *count)
{
    cpu_set_t set;
    *count = 1;
    if (sched_getaffinity(0, sizeof set, &set))
        return 0;
    *count = CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            return c;
    return 0;
}

/* Cuts the kernels of ks marked in todo (all when todo is NULL) into
 * chunks, each the prelude and a contiguous run of about the same bytes,
 * in the plan's order: as many as the source has CHUNK_BYTES (rounded), at most the
 * machine's online cores (not this process's: every rank of a job cuts
 * alike) and MAX_CHUNKS. of[i]: kernel i's chunk. Returns the count. */
static int cut_chunks(const kl_jit_kernel *ks, int n, const bool *todo, const char *prelude, jit_chunk **out,
                      int *of)
{
    size_t bytes = 0;
    int want = 0;
    for (int i = 0; i < n; i++)
        if (!todo || todo[i]) {
            bytes += strlen(ks[i].src);
            want++;
        }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int nchunks = (int)((bytes + CHUNK_BYTES / 2) / CHUNK_BYTES);
    if (nchunks > online)
        nchunks = (int)online;
    if (nchunks > MAX_CHUNKS)
        nchunks = MAX_CHUNKS;
    if (nchunks > want)
        nchunks = want;
    if (nchunks < 1)
        nchunks = 1;
    jit_chunk *chunks = kl_xcalloc((size_t)nchunks, sizeof *chunks);
    size_t done = 0;
    for (int i = 0, c = 0; i < n; i++) {
        if (todo && !todo[i])
            continue;
        if (c + 1 < nchunks && done >= bytes / (size_t)nchunks * (size_t)(c + 1) && chunks[c].source.len)
            c++;
        if (!chunks[c].source.len)
            kl_buf_puts(&chunks[c].source, prelude);
        kl_buf_puts(&chunks[c].source, ks[i].src);
        kl_buf_putc(&chunks[c].source, '\n');
        done += strlen(ks[i].src);
        of[i] = c;
    }
    *out = chunks;
    return nchunks;
}

/* Compiles (or finds) every chunk, at once on this process's cores. */
static void run_chunks(jit_chunk *chunks, int nchunks, const char *dir, bool quiet, const char *reason, bool shared,
                       const char *pch, size_t body)
{
    int cores, first = first_core(&cores);
    jit_work w = {.chunks = chunks, .n = nchunks, .first = first % nchunks, .dir = dir, .reason = reason,
                  .quiet = quiet, .shared = shared, .pch = pch, .body = body};
    int nthreads = cores < nchunks ? cores : nchunks;
    pthread_t th[MAX_CHUNKS];
    int started = 0;
    for (int t = 1; t < nthreads; t++)
        if (kl_thread_create(&th[started], chunk_worker, &w) == 0)
            started++;
    chunk_worker(&w);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
}

static void chunks_free(jit_chunk *chunks, int nchunks)
{
    for (int c = 0; c < nchunks; c++) {
        kl_buf_free(&chunks[c].source);
        free(chunks[c].path);
    }
    free(chunks);
}

/* ---- the prelude, precompiled ----
 *
 * Every chunk starts with the same prelude, whose headers (immintrin.h,
 * omp.h, math.h) and helpers are about a third of a small chunk's
 * compile. GCC compiles it once per key (the prelude, compiler, flags and
 * CPU, as an object's) into KEY.pch.h.gch beside KEY.pch.h in the cache
 * folder; a chunk then includes "KEY.pch.h" and GCC reads the compiled
 * form (a compiler that cannot use it reads the header, the same text).
 * Only a speed-up: the chunks' keys and code are the same either way.
 * The precompiled file is code the compiler takes in, so it is verified
 * as an object is (the user's own, not writable by others, no link,
 * carrying its key's mark, hashing to its sidecar) and the header must be
 * the prelude's text; anything else is made again. KILN_CC_PCH=0 turns
 * it off (1, the default, on; another value is refused). */

/* The header's text: the prelude and its mark (kept in the compiled form). */
static char *pch_text(const char *prelude, const char *mark)
{
    return kl_xasprintf("%s\n__attribute__((unused)) static const char kl_pch_mark[] = \"%s\";\n", prelude, mark);
}

static bool pch_ok(const char *hdr, const char *gch, const char *sum, const char *mark, const char *text)
{
    kl_buf b = {0};
    bool same = read_cache_file(hdr, &b) == 0 && b.len == strlen(text) && b.s && !memcmp(b.s, text, b.len);
    kl_buf_free(&b);
    return same && verified(gch, sum, mark);
}

/* Compiles the header at hdr into gch (a temporary renamed into place,
 * checked for its mark and hashed while it is still this process's own)
 * and writes its sidecar. 0 or -1 (nothing said: the chunks then compile
 * the prelude themselves). */
static int pch_compile(const char *dir, uint64_t h, const char *hdr, const char *gch, const char *sum,
                       const char *mark)
{
    kl_outfile o = {0};
    char *log = write_temp(dir, h, ".log", "");
    char why[512] = "";
    int rc = -1;
    kl_cache_clear_odd(gch);
    if (log && kl_outfile_begin_external(&o, gch) == 0) {
        kl_argv cmd = {0};
        kl_argv_add_cc(&cmd);
        kl_argv_add_words(&cmd, "-fPIC -w -x c-header -o");
        kl_argv_add(&cmd, o.tmp);
        kl_argv_add(&cmd, hdr);
        rc = kl_spawn(kl_argv_end(&cmd), log, why, sizeof why);
        kl_argv_free(&cmd);
        char *line = NULL;
        if (rc == 0 && !read_own(o.tmp, mark, false, &line))
            rc = -1;
        if (rc == 0)
            rc = kl_outfile_commit(&o, 0644) == 0 && write_cache_text(sum, line) == 0 ? 0 : -1;
        else
            kl_outfile_abort(&o);
        free(line);
    }
    if (log) {
        remove(log);
        free(log);
    }
    return rc;
}

/* The name of the prelude's header in dir, its precompiled form made or
 * verified (under the key's lock: the ranks of a job make it once), or
 * NULL (turned off, or it could not be made). The caller frees. */
static char *prelude_pch(const char *dir, const char *prelude)
{
    const char *set = getenv("KILN_CC_PCH");
    if (set && *set && strcmp(set, "0") && strcmp(set, "1")) {
        kl_error("KILN_CC_PCH='%s' is not 0 (no precompiled prelude) or 1 (the default)", set);
        exit(1);
    }
    if (set && !strcmp(set, "0"))
        return NULL;
    uint64_t h = kl_hash_bytes(object_key(prelude, true), "pch", 3);
    char *name = kl_xasprintf("%016llx.pch.h", (unsigned long long)h);
    char *hdr = kl_xasprintf("%s/%s", dir, name), *gch = kl_xasprintf("%s.gch", hdr);
    char *sum = kl_xasprintf("%s/%016llx.pch.sum", dir, (unsigned long long)h);
    char *lock = kl_xasprintf("%s/%016llx.lock", dir, (unsigned long long)h);
    char *mark = kl_xasprintf("kiln-jit-pch:%016llx", (unsigned long long)h);
    char *text = pch_text(prelude, mark);
    bool ok = pch_ok(hdr, gch, sum, mark, text);
    if (!ok) {
        int lk = kl_cache_lock(lock);
        ok = pch_ok(hdr, gch, sum, mark, text) ||
             (write_cache_text(hdr, text) == 0 && pch_compile(dir, h, hdr, gch, sum, mark) == 0);
        kl_cache_unlock(lk);
    }
    free(text);
    free(mark);
    free(lock);
    free(sum);
    free(gch);
    free(hdr);
    if (!ok) {
        free(name);
        return NULL;
    }
    return name;
}

/* Compiles the kernels of ks marked in todo in chunks and records each
 * kernel's object in the index. */
static int compile_chunks(kl_jit_kernel *ks, int n, const bool *todo, const uint64_t *kk, const char *prelude,
                          const char *dir, bool quiet, const char *reason, kl_jit_handles *handles)
{
    jit_chunk *chunks;
    int *of = kl_xcalloc((size_t)n, sizeof *of);
    int nchunks = cut_chunks(ks, n, todo, prelude, &chunks, of);
    char *pch = prelude_pch(dir, prelude);
    run_chunks(chunks, nchunks, dir, quiet, reason, true, pch, strlen(prelude));
    free(pch);
    int rc = 0;
    for (int c = 0; c < nchunks; c++) {
        if (!chunks[c].handle)
            rc = -1;
        else
            kl_vec_push(*handles, chunks[c].handle);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (!todo[i])
            continue;
        ks[i].fn = dlsym(chunks[of[i]].handle, ks[i].name);
        if (!ks[i].fn) {
            kl_error("compiled kernels lack %s", ks[i].name);
            rc = -1;
        } else {
            index_write(dir, kk[i], ks[i].name, chunks[of[i]].key);
        }
    }
    chunks_free(chunks, nchunks);
    free(of);
    return rc;
}

char **kl_cpu_objects(const kl_jit_kernel *ks, int n, const char *prelude, bool quiet)
{
    char *dir = cache_folder(NULL);
    if (!dir)
        return NULL;
    jit_chunk *chunks;
    int *of = kl_xcalloc((size_t)n + 1, sizeof *of);
    int nchunks = cut_chunks(ks, n, NULL, prelude, &chunks, of);
    run_chunks(chunks, nchunks, dir, quiet, NULL, false, NULL, 0);
    char **paths = kl_xcalloc((size_t)nchunks + 1, sizeof *paths);
    bool ok = true;
    for (int c = 0; c < nchunks; c++) {
        ok = ok && chunks[c].handle && chunks[c].path;
        paths[c] = chunks[c].path;
        chunks[c].path = NULL;
    }
    chunks_free(chunks, nchunks);
    free(of);
    free(dir);
    if (!ok) {
        for (int c = 0; c < nchunks; c++)
            free(paths[c]);
        free(paths);
        return NULL;
    }
    return paths;
}

int kl_cpu_jit_kernels(kl_jit_kernel *ks, int n, const char *prelude, const char *cache_dir, bool quiet,
                       const char *reason, kl_jit_handles *handles)
{
    char *dir = cache_folder(cache_dir);
    if (!dir)
        return -1;
    uint64_t *kk = kl_xcalloc((size_t)n + 1, sizeof *kk);
    bool *todo = kl_xcalloc((size_t)n + 1, sizeof *todo);
    /* Objects already opened for this call, by key: each verified once. */
    KL_VEC(uint64_t) keys = {0};
    KL_VEC(void *) opened = {0};
    int missing = 0;
    for (int i = 0; i < n; i++) {
        ks[i].fn = NULL;
        kk[i] = kernel_key(prelude, &ks[i]);
        uint64_t obj = index_lookup(dir, kk[i], ks[i].name);
        void *h = NULL;
        for (int j = 0; obj && j < keys.n && !h; j++)
            if (keys.v[j] == obj)
                h = opened.v[j];
        if (obj && !h) {
            char *so = kl_xasprintf("%s/%016llx.so", dir, (unsigned long long)obj), *mark = object_mark(obj);
            char *sum = kl_xasprintf("%s/%016llx.sum", dir, (unsigned long long)obj);
            if ((h = open_verified(so, sum, mark, true))) {
                kl_vec_push(keys, obj);
                kl_vec_push(opened, h);
                kl_vec_push(*handles, h);
            }
            free(sum);
            free(mark);
            free(so);
        }
        if (h)
            ks[i].fn = dlsym(h, ks[i].name);
        if (!ks[i].fn) {
            todo[i] = true;
            missing++;
        }
    }
    int rc = missing ? compile_chunks(ks, n, todo, kk, prelude, dir, quiet, reason, handles) : 0;
    kl_vec_free(keys);
    kl_vec_free(opened);
    free(todo);
    free(kk);
    free(dir);
    return rc;
}

void *kl_cpu_jit(const char *source, const char *cache_dir, bool quiet, const char *reason)
{
    return cached(source, cache_dir, quiet, reason, true, NULL);
}
