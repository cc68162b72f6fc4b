/* The kernel-cache fixture of the unit tests that compile through
 * kl_cpu_jit (test_jit.c, test_cache.c): fresh cache folders under /tmp,
 * removed with everything in them, a file copy, and the small source
 * both compile. Needs _XOPEN_SOURCE 700 (nftw) before the system headers;
 * include after cmocka.h and runtime/exec/backend.h. */
#ifndef KILN_TESTS_CACHE_FIXTURE_H
#define KILN_TESTS_CACHE_FIXTURE_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* What both tests compile: t_answer() returns 42. */
static const char answer_src[] = "int t_answer(void) { return 42; }\n";

/* A fresh folder /tmp/kiln-test-TAG-XXXXXX (caller frees, or removes it
 * with cache_dir_remove). */
static inline char *cache_dir_new(const char *tag)
{
    char *tmpl = kl_xasprintf("/tmp/kiln-test-%s-XXXXXX", tag);
    assert_non_null(mkdtemp(tmpl));
    return tmpl;
}

static inline int cache_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* dir and everything under it removed (links not followed); dir freed. */
static inline void cache_dir_remove(char *dir)
{
    nftw(dir, cache_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* from's bytes written to to (created, or truncated keeping its mode). */
static inline void cache_copy_file(const char *from, const char *to)
{
    kl_source s;
    assert_int_equal(kl_source_read(&s, from), 0);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(s.text, 1, s.len, f), s.len);
    assert_int_equal(fclose(f), 0);
    kl_source_free(&s);
}

#endif
