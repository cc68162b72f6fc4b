/* Run-time compilation of generated C kernels, with an on-disk cache.
 *
 * The cache key is a hash of the source, the compiler and its flags; a
 * compiled object is written under a temporary name and renamed into
 * place, so concurrent processes never see half a file, and carries its
 * key as a mark, so a foreign or corrupt file under a key is compiled
 * again (and replaced) instead of being opened. The compiler runs from an
 * argument vector (runtime/spawn.c), never through a shell. */
#define _GNU_SOURCE /* memmem */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "outfile.h"
#include "spawn.h"

/* $KILN_MARCH, checked: one word of a -march value (x86-64, x86-64-v3,
 * haswell, ...); "native" when unset or empty. */
static const char *cc_march(void)
{
    const char *m = getenv("KILN_MARCH");
    if (!m || !*m)
        return "native";
    if (strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(m) ||
        strlen(m) > 64) {
        kl_error("KILN_MARCH='%s' is not a -march value (letters, digits, '.', '_', '-'; e.g. x86-64-v3)", m);
        exit(1);
    }
    return m;
}

const char *kl_cc_flags(void)
{
    /* The environment does not change under a run: built once. */
    static char flags[160];
    if (!flags[0])
        snprintf(flags, sizeof flags, "-O3 -march=%s -fopenmp -std=gnu11 %s", cc_march(), KL_CC_FP_FLAGS);
    return flags;
}

/* With -march=native the flags do not say which CPU the object is for: a
 * cache shared by machines (a network home, a copied container) would
 * hand one CPU's AVX-512 object to another without it (SIGILL). The key
 * takes in this CPU's model and feature flags from /proc/cpuinfo. */
static uint64_t hash_native_cpu(uint64_t h)
{
    if (strcmp(cc_march(), "native"))
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

static int mkdir_p(const char *path)
{
    char *p = kl_xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

char *kl_cache_dir(const char *sub)
{
    const char *env = getenv("KILN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *dir;
    if (env && *env)
        dir = kl_xasprintf("%s/%s", env, sub);
    else if (xdg && *xdg)
        dir = kl_xasprintf("%s/kiln/%s", xdg, sub);
    else if (home && *home)
        dir = kl_xasprintf("%s/.cache/kiln/%s", home, sub);
    else
        dir = kl_xasprintf("/tmp/kiln-cache/%s", sub);
    if (mkdir_p(dir)) {
        free(dir);
        dir = kl_xasprintf("/tmp/kiln-cache-%d/%s", (int)getuid(), sub);
        mkdir_p(dir);
    }
    return dir;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

/* The text a compiled object for key h carries in its read-only data. */
static char *object_mark(uint64_t h)
{
    return kl_xasprintf("kiln-jit-object:%016llx", (unsigned long long)h);
}

/* Whether the file at path is an object this cache wrote for its key (a
 * foreign, truncated or overwritten file lacks the mark). */
static bool object_has_mark(const char *path, const char *mark)
{
    kl_source obj;
    if (kl_source_read_quiet(&obj, path))
        return false;
    bool ok = memmem(obj.text, obj.len, mark, strlen(mark)) != NULL;
    kl_source_free(&obj);
    return ok;
}

/* Compiles source (with the mark appended) into a temporary object and
 * renames it to so, replacing whatever was there. */
static int compile_object(const char *source, const char *mark, const char *dir, uint64_t h, const char *so,
                          const char *reason)
{
    char *c = kl_xasprintf("%s/%016llx.%d.c", dir, (unsigned long long)h, (int)getpid());
    char *log = kl_xasprintf("%s/%016llx.%d.log", dir, (unsigned long long)h, (int)getpid());
    char *text = kl_xasprintf("%s\n__attribute__((used)) static const char kl_object_mark[] = \"%s\";\n", source, mark);
    int rc = -1;
    char why[512] = "";
    /* The compiler writes a unique temporary that then replaces the cache
     * entry whole (outfile.h). */
    kl_outfile o = {0};
    if (write_file(c, text)) {
        snprintf(why, sizeof why, "cannot write %s: %s", c, strerror(errno));
    } else if (kl_outfile_begin_external(&o, so)) {
        snprintf(why, sizeof why, "cannot create a temporary beside %s", so);
    } else {
        kl_argv cmd = {0};
        kl_argv_add_cc(&cmd);
        kl_argv_add_words(&cmd, "-fPIC -shared -w -o");
        kl_argv_add(&cmd, o.tmp);
        kl_argv_add(&cmd, c);
        kl_argv_add(&cmd, "-lm");
        rc = kl_spawn(kl_argv_end(&cmd), log, why, sizeof why);
        kl_argv_free(&cmd);
        if (rc == 0 && kl_outfile_commit(&o, 0777)) {
            snprintf(why, sizeof why, "cannot replace %s", so);
            rc = -1;
        } else if (rc) {
            kl_outfile_abort(&o);
        }
    }
    if (rc == 0) {
        remove(c);
        remove(log);
    } else {
        kl_source lg;
        kl_error("compiling kernels%s%s failed: %s; the source is %s", reason ? " for " : "", reason ? reason : "", why,
                 c);
        if (reason)
            fprintf(kl_diag_stream(),
                    "---> the kernels for %s are not in this executable (it holds those of its train block's settings),\n"
                    "     so they are compiled at start by a C compiler ($CC, else cc): install one or set CC,\n"
                    "     or put these settings in the train block and kiln build again\n",
                    reason);
        if (kl_source_read_quiet(&lg, log) == 0) {
            fputs(lg.text, kl_diag_stream());
            kl_source_free(&lg);
        }
        remove(log);
    }
    free(text);
    free(c);
    free(log);
    return rc;
}

void *kl_cpu_jit(const char *source, const char *cache_dir, bool quiet, const char *reason)
{
    char *dir = cache_dir ? kl_xstrdup(cache_dir) : kl_cache_dir("cpu");
    uint64_t h = kl_hash_bytes(KL_HASH_INIT, source, strlen(source));
    h = kl_hash_bytes(h, kl_cc(), strlen(kl_cc()));
    h = kl_hash_bytes(h, kl_cc_flags(), strlen(kl_cc_flags()));
    h = hash_native_cpu(h);
    char *so = kl_xasprintf("%s/%016llx.so", dir, (unsigned long long)h), *mark = object_mark(h);
    void *handle = NULL;
    struct stat st;
    if (stat(so, &st) == 0 && object_has_mark(so, mark))
        handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        if (!quiet)
            fprintf(stderr, "kiln: compiling kernels%s%s (%s %s)\n", reason ? " for " : "", reason ? reason : "", kl_cc(),
                    kl_cc_flags());
        if (compile_object(source, mark, dir, h, so, reason) == 0 && !(handle = dlopen(so, RTLD_NOW | RTLD_LOCAL)))
            kl_error("cannot load compiled kernels %s: %s", so, dlerror());
    }
    free(mark);
    free(so);
    free(dir);
    return handle;
}
