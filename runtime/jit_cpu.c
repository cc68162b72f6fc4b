/* Run-time compilation of generated C kernels, with an on-disk cache.
 *
 * The cache key is a hash of the source, the compiler and its flags; a
 * compiled object is written under a temporary name and renamed into
 * place, so concurrent processes never see half a file. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "outfile.h"

const char *kl_cc(void)
{
    const char *cc = getenv("KILN_CC");
    return cc && *cc ? cc : "cc";
}

const char *kl_cc_flags(void)
{
    return "-O3 -march=native -fopenmp -std=gnu11 -fno-math-errno";
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

void *kl_cpu_jit(const char *source, const char *cache_dir, bool quiet)
{
    char *dir = cache_dir ? kl_xstrdup(cache_dir) : kl_cache_dir("cpu");
    uint64_t h = kl_hash_bytes(KL_HASH_INIT, source, strlen(source));
    h = kl_hash_bytes(h, kl_cc(), strlen(kl_cc()));
    h = kl_hash_bytes(h, kl_cc_flags(), strlen(kl_cc_flags()));
    char *so = kl_xasprintf("%s/%016llx.so", dir, (unsigned long long)h);
    void *handle = NULL;
    struct stat st;
    if (stat(so, &st) == 0)
        handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        char *c = kl_xasprintf("%s/%016llx.%d.c", dir, (unsigned long long)h, (int)getpid());
        char *log = kl_xasprintf("%s/%016llx.%d.log", dir, (unsigned long long)h, (int)getpid());
        if (!quiet)
            fprintf(stderr, "kiln: compiling kernels (%s %s)\n", kl_cc(), kl_cc_flags());
        int rc = -1;
        /* The compiler writes a unique temporary that then replaces the
         * cache entry whole (outfile.h). */
        kl_outfile o = {0};
        if (write_file(c, source) == 0 && kl_outfile_begin_external(&o, so) == 0) {
            const char *tmp = o.tmp;
            char *cmd = kl_xasprintf("'%s' %s -fPIC -shared -w -o '%s' '%s' -lm > '%s' 2>&1", kl_cc(),
                                     kl_cc_flags(), tmp, c, log);
            int st2 = system(cmd);
            free(cmd);
            if (st2 == 0)
                rc = kl_outfile_commit(&o, 0777);
            else
                kl_outfile_abort(&o);
        }
        if (rc == 0) {
            handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
            remove(c);
            remove(log);
            if (!handle)
                kl_error("cannot load compiled kernels %s: %s", so, dlerror());
        } else {
            kl_source lg;
            kl_error("compiling kernels failed (%s); the source is %s", kl_cc(), c);
            if (kl_source_read_quiet(&lg, log) == 0) {
                fputs(lg.text, stderr);
                kl_source_free(&lg);
            }
        }
        free(c);
        free(log);
    }
    free(so);
    free(dir);
    return handle;
}
