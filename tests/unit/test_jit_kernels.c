/* The kernel cache's per-kernel index (runtime/exec/jit_cpu.c,
 * kl_cpu_jit_kernels):
 *  - a plan sharing kernels with one compiled before loads them from that
 *    plan's object and compiles only its others (the new object lacks the
 *    shared ones);
 *  - a second process of the same plan compiles nothing;
 *  - an index entry naming an object that lacks the kernel, a malformed
 *    entry, an entry for another name, and a link at an entry's name are
 *    ignored (the kernel is compiled) and no link target is written;
 *  - kernels of more than one chunk's bytes are compiled as several
 *    objects (on a machine of more than one core) and all load;
 *  - the prelude is precompiled once (KEY.pch.h.gch beside KEY.pch.h);
 *    a precompiled header planted at its name (another prelude's, which
 *    GCC would take) is not used but made again, a link there is not
 *    written through, and KILN_CC_PCH=0 makes none. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/cpu/cc.h"
#include "runtime/cpu/spawn.h"
#include "runtime/exec/backend.h"
#include "cache_fixture.h"

static const char prelude[] = "#include <stdint.h>\n";

/* A kernel t_NAME returning value, padded with a comment of pad bytes. */
static kl_jit_kernel kernel(const char *name, int value, size_t pad)
{
    kl_buf b = {0};
    if (pad) {
        kl_buf_puts(&b, "/* ");
        for (size_t i = 0; i < pad; i++)
            kl_buf_putc(&b, 'x');
        kl_buf_puts(&b, " */\n");
    }
    kl_buf_printf(&b, "int %s(void) { return %d; }\n", name, value);
    kl_jit_kernel k = {kl_xstrdup(name), kl_buf_take(&b), NULL};
    return k;
}

static void kernels_free(kl_jit_kernel *ks, int n)
{
    for (int i = 0; i < n; i++) {
        free((char *)ks[i].name);
        free((char *)ks[i].src);
    }
}

static void handles_close(kl_jit_handles *h)
{
    for (int i = 0; i < h->n; i++)
        dlclose(h->v[i]);
    kl_vec_free(*h);
}

/* The count of files in dir whose names end in suffix. */
static int count(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        n += l > s && e->d_name[0] != '.' && !strcmp(e->d_name + l - s, suffix);
    }
    closedir(d);
    return n;
}

static void expect_values(kl_jit_kernel *ks, int n, const int *want)
{
    for (int i = 0; i < n; i++) {
        assert_non_null(ks[i].fn);
        assert_int_equal(((int (*)(void))ks[i].fn)(), want[i]);
    }
}

static void shared_between_plans(void **state)
{
    (void)state;
    char *dir = cache_dir_new("kernels");
    kl_jit_kernel p1[] = {kernel("t_a", 1, 0), kernel("t_b", 2, 0)};
    kl_jit_handles h1 = {0};
    assert_int_equal(kl_cpu_jit_kernels(p1, 2, prelude, dir, true, NULL, &h1), 0);
    expect_values(p1, 2, (int[]){1, 2});
    assert_int_equal(count(dir, ".so"), 1);
    assert_int_equal(count(dir, ".k"), 2);

    /* t_b from the first object, t_c compiled into a second without t_b. */
    kl_jit_kernel p2[] = {kernel("t_b", 2, 0), kernel("t_c", 3, 0)};
    kl_jit_handles h2 = {0};
    assert_int_equal(kl_cpu_jit_kernels(p2, 2, prelude, dir, true, NULL, &h2), 0);
    expect_values(p2, 2, (int[]){2, 3});
    assert_int_equal(count(dir, ".so"), 2);
    assert_int_equal(h2.n, 2);
    void *newer = dlsym(h2.v[0], "t_c") ? h2.v[0] : h2.v[1];
    assert_non_null(dlsym(newer, "t_c"));
    assert_null(dlsym(newer, "t_b"));

    /* The same plan again (another process, or a rerun): nothing compiled. */
    kl_jit_kernel p3[] = {kernel("t_c", 3, 0), kernel("t_a", 1, 0)};
    kl_jit_handles h3 = {0};
    assert_int_equal(kl_cpu_jit_kernels(p3, 2, prelude, dir, true, NULL, &h3), 0);
    expect_values(p3, 2, (int[]){3, 1});
    assert_int_equal(count(dir, ".so"), 2);
    handles_close(&h1);
    handles_close(&h2);
    handles_close(&h3);
    kernels_free(p1, 2);
    kernels_free(p2, 2);
    kernels_free(p3, 2);
    cache_dir_remove(dir);
}

/* The path of the one file in dir whose name ends in suffix. */
static char *only(const char *dir, const char *suffix)
{
    assert_int_equal(count(dir, suffix), 1);
    DIR *d = opendir(dir);
    char *path = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name), sl = strlen(suffix);
        if (l > sl && e->d_name[0] != '.' && !strcmp(e->d_name + l - sl, suffix))
            path = kl_xasprintf("%s/%s", dir, e->d_name);
    }
    closedir(d);
    return path;
}

/* The index file of the kernel t_NAME in dir (compiled once to learn it). */
static char *index_of(const char *dir, kl_jit_kernel *k)
{
    kl_jit_handles h = {0};
    assert_int_equal(count(dir, ".k"), 0);
    assert_int_equal(kl_cpu_jit_kernels(k, 1, prelude, dir, true, NULL, &h), 0);
    handles_close(&h);
    return only(dir, ".k");
}

static void write_text(const char *path, const char *text)
{
    remove(path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void bad_entries_ignored(void **state)
{
    (void)state;
    char *dir = cache_dir_new("kindex");
    kl_jit_kernel other[] = {kernel("t_other", 7, 0)};
    kl_jit_handles ho = {0};
    assert_int_equal(kl_cpu_jit_kernels(other, 1, prelude, dir, true, NULL, &ho), 0);
    handles_close(&ho);
    /* The key of t_other's object, from its entry. */
    char *dir2 = cache_dir_new("kindex2");
    kl_jit_kernel d[] = {kernel("t_d", 4, 0)};
    char *entry = index_of(dir2, d);
    cache_dir_remove(dir2);
    kl_source s;
    char *oentry = only(dir, ".k");
    assert_int_equal(kl_source_read(&s, oentry), 0);
    unsigned long long okey;
    assert_int_equal(sscanf(s.text, "kiln-jit-kernel t_other %llx", &okey), 1);
    kl_source_free(&s);
    /* t_d's entry (its name under dir) planted four ways; each time t_d is
     * compiled and returns 4. */
    const char *base = strrchr(entry, '/') + 1;
    char *planted = kl_xasprintf("%s/%s", dir, base);
    char *target = kl_xasprintf("%s/target.txt", dir);
    char *texts[3] = {
        kl_xasprintf("kiln-jit-kernel t_d %016llx\n", okey),  /* an object without t_d */
        kl_xstrdup("kiln-jit-kernel t_d zzzz\n"),             /* malformed */
        kl_xasprintf("kiln-jit-kernel t_e %016llx\n", okey), /* another name */
    };
    for (int i = 0; i < 4; i++) {
        if (i < 3) {
            write_text(planted, texts[i]);
        } else {
            remove(planted);
            write_text(target, "keep\n");
            assert_int_equal(symlink(target, planted), 0);
        }
        int before = count(dir, ".so");
        kl_jit_handles h = {0};
        d[0].fn = NULL;
        assert_int_equal(kl_cpu_jit_kernels(d, 1, prelude, dir, true, NULL, &h), 0);
        expect_values(d, 1, (int[]){4});
        assert_int_equal(count(dir, ".so"), i == 0 ? before + 1 : before);
        handles_close(&h);
        if (i == 3) {
            assert_int_equal(kl_source_read(&s, target), 0);
            assert_string_equal(s.text, "keep\n");
            kl_source_free(&s);
        }
        remove(planted);
    }
    for (int i = 0; i < 3; i++)
        free(texts[i]);
    free(planted);
    free(target);
    free(entry);
    free(oentry);
    kernels_free(other, 1);
    kernels_free(d, 1);
    cache_dir_remove(dir);
}

static void chunks(void **state)
{
    (void)state;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    char *dir = cache_dir_new("chunks");
    enum { N = 6 };
    kl_jit_kernel ks[N];
    int want[N];
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "t_k%d", i);
        ks[i] = kernel(name, 10 + i, 40000);
        want[i] = 10 + i;
    }
    kl_jit_handles h = {0};
    assert_int_equal(kl_cpu_jit_kernels(ks, N, prelude, dir, true, NULL, &h), 0);
    expect_values(ks, N, want);
    /* 240 kB of source: four chunks of about 64 kB, at most one per core. */
    int objects = count(dir, ".so");
    assert_int_equal(objects, online >= 4 ? 4 : online < 1 ? 1 : (int)online);
    assert_int_equal(count(dir, ".k"), N);
    handles_close(&h);
    kl_jit_handles again = {0};
    for (int i = 0; i < N; i++)
        ks[i].fn = NULL;
    assert_int_equal(kl_cpu_jit_kernels(ks, N, prelude, dir, true, NULL, &again), 0);
    expect_values(ks, N, want);
    assert_int_equal(count(dir, ".so"), objects);
    handles_close(&again);
    kernels_free(ks, N);
    cache_dir_remove(dir);
}

/* A kernel of prelude pre (KL_SEVEN defined there) compiled in dir: 7. */
static void expect_seven(const char *dir, const char *pre)
{
    kl_jit_kernel k[] = {{kl_xstrdup("t_seven"), kl_xstrdup("int t_seven(void) { return KL_SEVEN; }\n"), NULL}};
    kl_jit_handles h = {0};
    assert_int_equal(kl_cpu_jit_kernels(k, 1, pre, dir, true, NULL, &h), 0);
    expect_values(k, 1, (int[]){7});
    handles_close(&h);
    kernels_free(k, 1);
}

static void empty_objects(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if ((l > 3 && !strcmp(e->d_name + l - 3, ".so")) || (l > 2 && !strcmp(e->d_name + l - 2, ".k"))) {
            char *p = kl_xasprintf("%s/%s", dir, e->d_name);
            remove(p);
            free(p);
        }
    }
    closedir(d);
}

static void prelude_precompiled(void **state)
{
    (void)state;
    static const char pre[] = "#include <stdint.h>\n#define KL_SEVEN 7\n";
    char *dir = cache_dir_new("pch");
    expect_seven(dir, pre);
    char *gch = only(dir, ".pch.h.gch"), *hdr = only(dir, ".pch.h");
    free(only(dir, ".pch.sum"));
    /* Another prelude's precompiled header, made with the chunks' flags
     * (so GCC would read it in place of the header: KL_SEVEN 8). */
    char *other = kl_xasprintf("%s/other.h", dir), *planted = kl_xasprintf("%s/other.h.gch", dir);
    write_text(other, "#include <stdint.h>\n#define KL_SEVEN 8\n");
    kl_argv cmd = {0};
    kl_argv_add_cc(&cmd);
    kl_argv_add_words(&cmd, "-fPIC -w -x c-header -o");
    kl_argv_add(&cmd, planted);
    kl_argv_add(&cmd, other);
    char why[256];
    char *log = kl_xasprintf("%s/other.log", dir);
    assert_int_equal(kl_spawn(kl_argv_end(&cmd), log, why, sizeof why), 0);
    kl_argv_free(&cmd);
    assert_int_equal(rename(planted, gch), 0);
    empty_objects(dir);
    expect_seven(dir, pre);
    /* A link at the precompiled header's name: removed, its target kept. */
    char *target = kl_xasprintf("%s/target.txt", dir);
    write_text(target, "keep\n");
    remove(gch);
    assert_int_equal(symlink(target, gch), 0);
    empty_objects(dir);
    expect_seven(dir, pre);
    kl_source s;
    assert_int_equal(kl_source_read(&s, target), 0);
    assert_string_equal(s.text, "keep\n");
    kl_source_free(&s);
    /* Turned off: no precompiled header made. */
    char *dir2 = cache_dir_new("nopch");
    setenv("KILN_CC_PCH", "0", 1);
    expect_seven(dir2, pre);
    unsetenv("KILN_CC_PCH");
    assert_int_equal(count(dir2, ".gch"), 0);
    /* Another value is refused (exit 1), not taken for on or off. */
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        setenv("KILN_CC_PCH", "off", 1);
        kl_jit_kernel k[] = {{"t_eight", "int t_eight(void) { return 8; }\n", NULL}};
        kl_jit_handles h = {0};
        kl_cpu_jit_kernels(k, 1, pre, dir2, true, NULL, &h);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    cache_dir_remove(dir2);
    free(target);
    free(log);
    free(other);
    free(planted);
    free(gch);
    free(hdr);
    cache_dir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shared_between_plans),
        cmocka_unit_test(bad_entries_ignored),
        cmocka_unit_test(chunks),
        cmocka_unit_test(prelude_precompiled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
