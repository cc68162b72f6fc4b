/* The kernel cache is private (runtime/files/cache_dir.c, runtime/exec/jit_cpu.c):
 *  - the folders Kiln makes for it are 0700, and with HOME and
 *    XDG_CACHE_HOME unset it is $TMPDIR/kiln-cache-UID, not a name shared
 *    by every user;
 *  - a world-writable cache folder is not used (a note names it and the
 *    private folder used instead; given as the folder, it is an error);
 *  - an object planted under a key's name (carrying the key's mark, with
 *    a constructor that writes a marker file) is never loaded, nor is an
 *    object others may write;
 *  - a link planted at any cache name is not written through: its target
 *    keeps its bytes;
 *  - under umask 002 Kiln's own objects pass its checks and are reused. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <dlfcn.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/exec/backend.h"
#include "runtime/cpu/spawn.h"
#include "runtime/files/cache_dir.h"
#include "cache_fixture.h"

static unsigned mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return (unsigned)st.st_mode & 07777;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void expect_text(const char *path, const char *want)
{
    kl_source s;
    assert_int_equal(kl_source_read(&s, path), 0);
    if (strcmp(s.text, want))
        fail_msg("%s was written through a link: now '%s'", path, s.text);
    kl_source_free(&s);
}

/* The key of answer_src: the name of its object (computed by compiling). */
static char *answer_key(void)
{
    char *dir = cache_dir_new("cache"), *key = NULL;
    void *h = kl_cpu_jit(answer_src, dir, true, NULL);
    assert_non_null(h);
    dlclose(h);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strlen(e->d_name) == 19 && !strcmp(e->d_name + 16, ".so"))
            key = kl_xasprintf("%.16s", e->d_name);
    closedir(d);
    assert_non_null(key);
    cache_dir_remove(dir);
    return key;
}

/* Compiles an object at out that carries key's mark, answers 666, and
 * whose constructor writes "ran" to $KILN_TEST_MARKER. */
static void compile_planted(const char *dir, const char *key, const char *out)
{
    char *src = kl_xasprintf("%s/planted.c", dir);
    char *text = kl_xasprintf("#include <stdio.h>\n#include <stdlib.h>\n"
                              "__attribute__((used)) static const char m[] = \"kiln-jit-object:%s\";\n"
                              "__attribute__((constructor)) static void planted(void)\n"
                              "{ const char *p = getenv(\"KILN_TEST_MARKER\"); FILE *f = p ? fopen(p, \"w\") : NULL;\n"
                              "  if (f) { fputs(\"ran\", f); fclose(f); } }\n"
                              "int t_answer(void) { return 666; }\n",
                              key);
    write_text(src, text);
    kl_argv cmd = {0};
    kl_argv_add_cc(&cmd);
    kl_argv_add_words(&cmd, "-fPIC -shared -w -o");
    kl_argv_add(&cmd, out);
    kl_argv_add(&cmd, src);
    char why[512] = "";
    if (kl_spawn(kl_argv_end(&cmd), NULL, why, sizeof why))
        fail_msg("compiling the planted object: %s", why);
    kl_argv_free(&cmd);
    free(text);
    free(src);
}

/* kl_cpu_jit(answer_src) from dir (NULL: the default folder) answers 42
 * and the marker file was not written. */
static void expect_answer(const char *dir, const char *marker)
{
    void *h = kl_cpu_jit(answer_src, dir, true, NULL);
    assert_non_null(h);
    if (access(marker, F_OK) == 0)
        fail_msg("a planted object was loaded: its constructor wrote %s", marker);
    int (*answer)(void) = (int (*)(void))dlsym(h, "t_answer");
    assert_non_null(answer);
    assert_int_equal(answer(), 42);
    dlclose(h);
}

static void copy_file(const char *from, const char *to, unsigned mode)
{
    cache_copy_file(from, to);
    assert_int_equal(chmod(to, mode), 0);
}

/* Folders made 0700; no HOME or XDG_CACHE_HOME: $TMPDIR/kiln-cache-UID. */
static void folder_modes(void **state)
{
    (void)state;
    char *t = cache_dir_new("cache"), *env = kl_xasprintf("%s/a/b", t);
    setenv("KILN_CACHE_DIR", env, 1);
    char *dir = kl_cache_dir("cpu");
    assert_non_null(dir);
    char *want = kl_xasprintf("%s/cpu", env);
    assert_string_equal(dir, want);
    char *a = kl_xasprintf("%s/a", t);
    assert_int_equal(mode_of(a) & 0777, 0700);
    assert_int_equal(mode_of(env) & 0777, 0700);
    assert_int_equal(mode_of(dir) & 0777, 0700);
    free(a);
    free(want);
    free(dir);

    unsetenv("KILN_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    setenv("TMPDIR", t, 1);
    dir = kl_cache_dir("cpu");
    assert_non_null(dir);
    want = kl_xasprintf("%s/kiln-cache-%d/cpu", t, (int)geteuid());
    assert_string_equal(dir, want);
    char *base = kl_xasprintf("%s/kiln-cache-%d", t, (int)geteuid());
    assert_int_equal(mode_of(base) & 0777, 0700);
    assert_int_equal(mode_of(dir) & 0777, 0700);
    free(base);
    free(want);
    free(dir);
    free(env);
    cache_dir_remove(t);
}

/* A world-writable cache folder holding a planted object under the key. */
static void world_writable_avoided(void **state)
{
    (void)state;
    char *key = answer_key(), *t = cache_dir_new("cache"), *shared = kl_xasprintf("%s/shared", t);
    char *cpu = kl_xasprintf("%s/cpu", shared), *so = kl_xasprintf("%s/%s.so", cpu, key);
    char *marker = kl_xasprintf("%s/marker", t), *tmpdir = kl_xasprintf("%s/tmp", t);
    assert_int_equal(mkdir(shared, 0777), 0);
    assert_int_equal(mkdir(cpu, 0777), 0);
    assert_int_equal(mkdir(tmpdir, 0700), 0);
    assert_int_equal(chmod(shared, 0777), 0);
    assert_int_equal(chmod(cpu, 0777), 0);
    compile_planted(t, key, so);
    setenv("KILN_TEST_MARKER", marker, 1);
    setenv("KILN_CACHE_DIR", shared, 1);
    setenv("TMPDIR", tmpdir, 1);

    FILE *diag = tmpfile();
    assert_non_null(diag);
    kl_diag_set_stream(diag);
    expect_answer(NULL, marker);
    /* Named as the folder itself: refused with the fix. */
    void *h = kl_cpu_jit(answer_src, cpu, true, NULL);
    kl_diag_set_stream(NULL);
    if (access(marker, F_OK) == 0)
        fail_msg("a planted object was loaded from %s", cpu);
    assert_null(h);
    rewind(diag);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, diag);
    text[n] = 0;
    fclose(diag);
    char *note = kl_xasprintf("%s is writable by others (chmod 700 %s)", shared, shared);
    if (!strstr(text, note) || !strstr(text, tmpdir))
        fail_msg("no note naming %s and the folder used: %s", shared, text);
    char *err = kl_xasprintf("not private: %s is writable by others (chmod 700 %s)", cpu, cpu);
    if (!strstr(text, err))
        fail_msg("no error naming %s: %s", cpu, text);
    unsetenv("KILN_TEST_MARKER");
    unsetenv("KILN_CACHE_DIR");
    free(err);
    free(note);
    free(tmpdir);
    free(marker);
    free(so);
    free(cpu);
    free(shared);
    free(key);
    cache_dir_remove(t);
}

/* In a private folder: a planted object carrying the key's mark, and an
 * object that others may write, are compiled again, not loaded. */
static void planted_object_not_loaded(void **state)
{
    (void)state;
    char *key = answer_key(), *t = cache_dir_new("cache"), *dir = kl_xasprintf("%s/c", t);
    char *so = kl_xasprintf("%s/%s.so", dir, key), *marker = kl_xasprintf("%s/marker", t);
    char *planted = kl_xasprintf("%s/planted.so", t);
    assert_int_equal(mkdir(dir, 0700), 0);
    compile_planted(t, key, planted);
    copy_file(planted, so, 0755);
    setenv("KILN_TEST_MARKER", marker, 1);
    expect_answer(dir, marker);

    assert_int_equal(chmod(so, 0666), 0); /* the right object, writable by others */
    expect_answer(dir, marker);
    if (mode_of(so) & 022)
        fail_msg("%s is still writable by others (%o)", so, mode_of(so));
    unsetenv("KILN_TEST_MARKER");
    free(planted);
    free(marker);
    free(so);
    free(dir);
    free(key);
    cache_dir_remove(t);
}

/* Links planted at every cache name: targets unchanged, the object made. */
static void links_not_written_through(void **state)
{
    (void)state;
    char *key = answer_key(), *t = cache_dir_new("cache"), *dir = kl_xasprintf("%s/c", t);
    assert_int_equal(mkdir(dir, 0700), 0);
    const char *names[] = {"%s/%s.so", "%s/%s.sum", "%s/%s.%d.c", "%s/%s.%d.log"};
    char *links[4], *victims[4];
    for (int i = 0; i < 4; i++) {
        links[i] = i < 2 ? kl_xasprintf(names[i], dir, key) : kl_xasprintf(names[i], dir, key, (int)getpid());
        victims[i] = kl_xasprintf("%s/victim%d", t, i);
        write_text(victims[i], "precious\n");
        assert_int_equal(symlink(victims[i], links[i]), 0);
    }
    char *marker = kl_xasprintf("%s/marker", t);
    expect_answer(dir, marker);
    for (int i = 0; i < 4; i++) {
        expect_text(victims[i], "precious\n");
        free(victims[i]);
        free(links[i]);
    }
    char *so = kl_xasprintf("%s/%s.so", dir, key);
    struct stat st;
    assert_int_equal(lstat(so, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    expect_answer(dir, marker); /* and loaded from the cache the next time */
    free(so);
    free(marker);
    free(dir);
    free(key);
    cache_dir_remove(t);
}

/* Under umask 002 the objects and sidecars Kiln writes still pass its own
 * checks: the second call loads the first call's object (same inode). */
static void reused_under_umask(void **state)
{
    (void)state;
    mode_t old = umask(002);
    char *key = answer_key(), *t = cache_dir_new("cache"), *so = kl_xasprintf("%s/%s.so", t, key);
    char *marker = kl_xasprintf("%s/marker", t);
    expect_answer(t, marker);
    struct stat a, b;
    assert_int_equal(stat(so, &a), 0);
    expect_answer(t, marker);
    assert_int_equal(stat(so, &b), 0);
    if (a.st_ino != b.st_ino)
        fail_msg("%s was compiled again instead of reused (mode %o)", so, mode_of(so));
    umask(old);
    free(marker);
    free(so);
    free(key);
    cache_dir_remove(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(folder_modes),
        cmocka_unit_test(world_writable_avoided),
        cmocka_unit_test(planted_object_not_loaded),
        cmocka_unit_test(links_not_written_through),
        cmocka_unit_test(reused_under_umask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
