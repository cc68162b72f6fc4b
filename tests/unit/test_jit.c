/* Run-time compilation of kernels (runtime/exec/jit_cpu.c), against values
 * computed here one rounding at a time:
 *  - the generated C rounds every operation as written on any x86-64 CPU:
 *    a*b+c is not contracted into a fused multiply-add, and a double ->
 *    float -> double round trip is kept in every element (GCC 12 at -O3
 *    with AVX-512 dropped it in the last 4 of 20 elements);
 *  - a file under a cache key that the cache did not write for that key
 *    (another object, garbage) is compiled again and replaced, not opened;
 *  - the compiler is $CC when KILN_CC is unset, and a missing one is named
 *    in the error with the reason the kernels were needed. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/exec/backend.h"
#include "cache_fixture.h"

/* The one compiled object in dir (caller frees). */
static char *only_object(const char *dir)
{
    char *found = NULL;
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 3 && !strcmp(e->d_name + len - 3, ".so")) {
            free(found);
            found = kl_xasprintf("%s/%s", dir, e->d_name);
            n++;
        }
    }
    if (d)
        closedir(d);
    assert_int_equal(n, 1);
    return found;
}

static const char cast_src[] =
    "#include <stdint.h>\n"
    "void t_cast(const double *restrict b0, double *restrict b1)\n"
    "{\n"
    "    #pragma omp simd\n"
    "    for (int64_t i0 = 0; i0 < 20LL; i0++)\n"
    "        b1[i0] = (double)(((double)(float)((b0[i0])) * 2.0));\n"
    "}\n"
    "double t_fma(double a, double b, double c) { return a * b + c; }\n";

/* The generated C's rounding, element by element. */
static void rounds_as_written(void **state)
{
    (void)state;
    char *dir = cache_dir_new("jit");
    void *h = kl_cpu_jit(cast_src, dir, true, NULL);
    assert_non_null(h);
    void (*cast)(const double *, double *) = (void (*)(const double *, double *))dlsym(h, "t_cast");
    double (*fma3)(double, double, double) = (double (*)(double, double, double))dlsym(h, "t_fma");
    assert_non_null(cast);
    assert_non_null(fma3);
    double in[20], out[20];
    for (int i = 0; i < 20; i++)
        in[i] = 0.1 * (i + 1) + 1e-12 * i; /* none of them a float */
    cast(in, out);
    for (int i = 0; i < 20; i++) {
        volatile float f = (float)in[i];
        double want = (double)f * 2.0;
        if (out[i] != want)
            fail_msg("element %d of (double)(float)x * 2: %.17g, expected %.17g", i, out[i], want);
    }
    /* (1 + 2^-30)(1 - 2^-30) = 1 - 2^-60 rounds to 1: a*b + c is 0; a
     * fused multiply-add gives -2^-60. */
    volatile double a = 1.0 + 0x1p-30, b = 1.0 - 0x1p-30, c = -1.0;
    double got = fma3(a, b, c);
    if (got != 0.0)
        fail_msg("a*b+c was contracted: %.17g, expected 0", got);
    dlclose(h);
    cache_dir_remove(dir);
}

static const char other_src[] = "int t_other(void) { return 7; }\n";

static void expect_answer(const char *dir)
{
    void *h = kl_cpu_jit(answer_src, dir, true, NULL);
    assert_non_null(h);
    int (*answer)(void) = (int (*)(void))dlsym(h, "t_answer");
    if (!answer)
        fail_msg("the cached object lacks t_answer (a foreign file was opened)");
    assert_int_equal(answer(), 42);
    dlclose(h);
}

/* A foreign object or garbage under the key: compiled again, replaced. */
static void foreign_cache_file(void **state)
{
    (void)state;
    char *dir = cache_dir_new("jit"), *other_dir = cache_dir_new("jit");
    expect_answer(dir);
    char *so = only_object(dir);

    void *h = kl_cpu_jit(other_src, other_dir, true, NULL);
    assert_non_null(h);
    dlclose(h);
    char *other = only_object(other_dir);
    cache_copy_file(other, so);
    expect_answer(dir);

    FILE *f = fopen(so, "wb");
    assert_non_null(f);
    fputs("not an object", f);
    fclose(f);
    expect_answer(dir);
    char *again = only_object(dir);
    assert_string_equal(again, so); /* replaced in place, nothing left over */
    free(again);
    free(other);
    free(so);
    cache_dir_remove(other_dir);
    cache_dir_remove(dir);
}

/* $CC is the compiler; a missing one is named, with the reason. */
static void compiler_from_cc(void **state)
{
    (void)state;
    char *dir = cache_dir_new("jit");
    const char *kc = getenv("KILN_CC"), *cc = getenv("CC");
    char *save_kc = kc ? kl_xstrdup(kc) : NULL, *save_cc = cc ? kl_xstrdup(cc) : NULL;
    unsetenv("KILN_CC");
    setenv("CC", "/nonexistent/kiln-test-cc", 1);
    FILE *diag = tmpfile();
    assert_non_null(diag);
    kl_diag_set_stream(diag);
    void *h = kl_cpu_jit(answer_src, dir, true, "--batch 64");
    kl_diag_set_stream(NULL);
    assert_null(h);
    rewind(diag);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, diag);
    text[n] = 0;
    fclose(diag);
    if (!strstr(text, "compiling kernels for --batch 64 failed: /nonexistent/kiln-test-cc: not found"))
        fail_msg("unexpected message: %s", text);
    if (!strstr(text, "C compiler"))
        fail_msg("no hint about the C compiler: %s", text);
    if (save_kc)
        setenv("KILN_CC", save_kc, 1);
    if (save_cc)
        setenv("CC", save_cc, 1);
    else
        unsetenv("CC");
    free(save_kc);
    free(save_cc);
    cache_dir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rounds_as_written),
        cmocka_unit_test(foreign_cache_file),
        cmocka_unit_test(compiler_from_cc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
