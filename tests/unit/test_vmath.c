/* The transcendentals of the generated CPU kernels as the kernels run
 * them: loops of expf, logf, powf, tanhf, erff, expm1f, log1pf, the
 * sigmoid and the normal density (and exp, log, tanh, erf, expm1, log1p
 * in f64) compiled after the kernels' prelude by the kernels' compiler
 * with the kernels' flags, so that they vectorise into glibc's libmvec
 * (base/scalar.h vecmath). Each result's error in ulp of the f32 (f64)
 * result, against the f64 (long double) reference, over:
 *  - every 4099th float of the 2^32 (both signs, subnormals, large
 *    magnitudes, inf, NaN), 2^20 doubles spread evenly over the bits;
 *  - the named edges (0, -0, the smallest subnormal and normal, the
 *    largest float, inf, NaN) and every float within 512 ulp of each
 *    function's switch points (where libmvec changes form, saturates,
 *    overflows or goes subnormal).
 * IEEE mode (no flush-to-zero): the CPU backend's FTZ/DAZ reads a
 * subnormal operand as 0 and flushes a subnormal result, which only
 * subnormals see. The bound is glibc's documented one for libmvec, 4 ulp;
 * unit.vmath.avx2 and unit.vmath.sse run the same with KILN_MARCH set, so
 * the AVX2 (_ZGVdN8v_) and SSE (_ZGVbN4v_) variants other CPUs call are
 * checked here too. The checker's object must link libmvec: a loop of
 * scalar calls (a prelude without the SIMD declarations) fails. */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codegen/kir.h"
#include "runtime/exec/backend.h"

/* The functions in the order of the checker's switch. */
enum { F_EXP, F_LOG, F_TANH, F_ERF, F_EXPM1, F_LOG1P, F_SIGMOID, F_NPDF, F_POW, NF };
static const char *const names[NF] = {"exp", "log", "tanh", "erf", "expm1", "log1p", "sigmoid", "npdf", "pow"};

/* The kernels' spellings (codegen/print_expr.c: sigmoid and the density
 * are expf forms), one omp simd loop each, as a kernel's leaf loop. */
static const char checker_text[] =
    "void run_f(int f, const float *restrict x, const float *restrict z, float *restrict y, long n)\n"
    "{\n"
    "    switch (f) {\n"
    "    case 0:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = expf(x[i]);\n        break;\n"
    "    case 1:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = logf(x[i]);\n        break;\n"
    "    case 2:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = tanhf(x[i]);\n        break;\n"
    "    case 3:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = erff(x[i]);\n        break;\n"
    "    case 4:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = expm1f(x[i]);\n        break;\n"
    "    case 5:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = log1pf(x[i]);\n        break;\n"
    "    case 6:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = kl_sigmoid(x[i]);\n        break;\n"
    "    case 7:\n#pragma omp simd\n"
    "        for (long i = 0; i < n; i++) y[i] = (0.3989422804014327f * expf(-0.5f * ((x[i]) * (x[i]))));\n        break;\n"
    "    case 8:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = powf(x[i], z[i]);\n        break;\n"
    "    }\n"
    "}\n"
    "void run_d(int f, const double *restrict x, double *restrict y, long n)\n"
    "{\n"
    "    switch (f) {\n"
    "    case 0:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = exp(x[i]);\n        break;\n"
    "    case 1:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = log(x[i]);\n        break;\n"
    "    case 2:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = tanh(x[i]);\n        break;\n"
    "    case 3:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = erf(x[i]);\n        break;\n"
    "    case 4:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = expm1(x[i]);\n        break;\n"
    "    case 5:\n#pragma omp simd\n        for (long i = 0; i < n; i++) y[i] = log1p(x[i]);\n        break;\n"
    "    }\n"
    "}\n";

typedef void (*run_f_fn)(int f, const float *x, const float *z, float *y, long n);
typedef void (*run_d_fn)(int f, const double *x, double *y, long n);

static void *checker;

static int setup(void **state)
{
    (void)state;
    kl_buf src = {0};
    kl_buf_puts(&src, kir_c_prelude());
    kl_buf_puts(&src, checker_text);
    checker = kl_cpu_jit(src.s, NULL, true, NULL);
    kl_buf_free(&src);
    return checker ? 0 : -1;
}

static double ref_f(int f, double x, double z)
{
    switch (f) {
    case F_EXP: return exp(x);
    case F_LOG: return log(x);
    case F_TANH: return tanh(x);
    case F_ERF: return erf(x);
    case F_EXPM1: return expm1(x);
    case F_LOG1P: return log1p(x);
    case F_SIGMOID: return 1 / (1 + exp(-x));
    case F_NPDF: return 0.3989422804014327 * exp(-0.5 * x * x);
    case F_POW: return pow(x, z);
    }
    return NAN;
}

static long double ref_d(int f, long double x)
{
    switch (f) {
    case F_EXP: return expl(x);
    case F_LOG: return logl(x);
    case F_TANH: return tanhl(x);
    case F_ERF: return erfl(x);
    case F_EXPM1: return expm1l(x);
    case F_LOG1P: return log1pl(x);
    }
    return NAN;
}

/* The error of got in ulp of the result's precision (mant bits, min_exp
 * the exponent of the smallest subnormal): 0 when got is the reference
 * rounded; 1e9 for a wrong NaN, inf or sign of infinity. */
static double ulp_err(long double got, long double ref, int mant, int min_exp, long double top)
{
    if (isnan(ref))
        return isnan(got) ? 0 : 1e9;
    if (isnan(got))
        return 1e9;
    if (fabsl(ref) > top)
        ref = ref > 0 ? INFINITY : -INFINITY; /* beyond the largest finite: rounds to inf */
    if (isinf(ref) || isinf(got))
        return got == ref ? 0 : 1e9;
    int e;
    frexpl(ref, &e);
    int ue = e - mant > min_exp ? e - mant : min_exp;
    return (double)(fabsl(got - ref) / ldexpl(1.0L, ue));
}

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

#define CHUNK 65536
static float xs[CHUNK], zs[CHUNK], ys[CHUNK];
static double xd[CHUNK], yd[CHUNK];

/* The worst error over the bound's scale (above 1 fails), and where. */
typedef struct worst { double err, ratio; float x, z; } worst;

static bool signalling(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7fc00000u) == 0x7f800000u && (u & 0x3fffffu);
}

/* libmvec's documented bound, 4 ulp; the density's exp(-x^2 / 2) also
 * carries the rounding of its argument, relative 2^-23 of x^2 / 2 (x^2
 * ulp of the result), as any float evaluation of that form does. */
static double bound(int f, float x)
{
    return f == F_NPDF ? 4.0 + (double)x * x : 4.0;
}

static void check_chunk_f(run_f_fn run, int f, long n, worst *w)
{
    run(f, xs, zs, ys, n);
    for (long i = 0; i < n; i++) {
        /* A signalling NaN operand gives NaN, as IEEE 754 has it (also
         * pow(sNaN, 0), which C's Annex F makes 1 for a quiet NaN; glibc's
         * scalar powf agrees); the f64 reference sees it quieted. */
        if ((signalling(xs[i]) || (f == F_POW && signalling(zs[i]))) && isnan(ys[i]))
            continue;
        /* the f32 result's top: FLT_MAX plus half an ulp rounds to inf */
        double e = ulp_err(ys[i], ref_f(f, xs[i], zs[i]), 24, -149, (long double)FLT_MAX + 0x1p103L);
        double r = e / bound(f, xs[i]);
        if (r > w->ratio)
            w->ratio = r, w->x = xs[i], w->z = zs[i];
        if (e > w->err)
            w->err = e;
    }
}

/* The points where the functions change form, saturate, overflow or go
 * subnormal (libmvec's and the float line's), each checked with its 512
 * neighbours on either side. */
static const float edges[] = {
    0.0f, 1.0f, 0.5f, 0.25f, 0.125f, 0x1p-12f, 0x1p-23f, 0x1p-126f, 0x1p-149f, 0.5493061f /* atanh(0.5) */,
    0.6931472f, 0.3465736f, 0.84375f, 0.921875f, 1.25f, 2.0f, 3.0f, 3.9192059f, 4.0f, 6.0f, 8.0f, 9.0f, 9.01f,
    10.0f, 13.0f, 15.0f, 16.0f, 22.0f, 87.33654f, 88.0f, 88.72284f, 89.0f, 103.27893f, 103.97208f, 104.0f,
    0x1p24f, 0x1p64f, 0x1p126f, FLT_MAX, -0.29289323f /* log1p's switch */, 0.41421357f, 0.70710677f, 1.4142135f,
    13.44f, 14.0f, 16.5f,
};

static void check_f(int f)
{
    run_f_fn run = (run_f_fn)dlsym(checker, "run_f");
    assert_non_null(run);
    worst w = {0, 0, 0, 0};
    long n = 0;
    uint32_t zbits = 0;
    for (uint64_t b = 0; b < (1ull << 32); b += 4099) {
        xs[n] = bits_f((uint32_t)b);
        /* pow's exponents: every pattern, again strided, then scaled to
         * where results stay in range half of the time */
        zbits = zbits * 1664525u + 1013904223u;
        zs[n] = (zbits & 1) ? bits_f(zbits) : (float)((int32_t)zbits % 64) / 4.0f;
        if (++n == CHUNK) {
            check_chunk_f(run, f, n, &w);
            n = 0;
        }
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN};
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (int sign = 0; sign < 2; sign++) {
            uint32_t u;
            float c = sign ? -edges[e] : edges[e];
            memcpy(&u, &c, 4);
            for (int d = -512; d <= 512; d++) {
                if (n == CHUNK) {
                    check_chunk_f(run, f, n, &w);
                    n = 0;
                }
                uint32_t v = u + (uint32_t)d;
                if ((v ^ u) >> 31) /* across zero: other sign's neighbours */
                    continue;
                xs[n] = bits_f(v);
                zs[n] = (float)(d % 16) / 2.0f;
                n++;
            }
        }
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        for (size_t j = 0; j < sizeof special / sizeof special[0]; j++) {
            if (n == CHUNK) {
                check_chunk_f(run, f, n, &w);
                n = 0;
            }
            xs[n] = special[i];
            zs[n++] = special[j];
        }
    check_chunk_f(run, f, n, &w);
    print_message("%-8s f32: at most %.2f ulp; %.2f of its bound at x = %a\n", names[f], w.err, w.ratio, (double)w.x);
    if (w.ratio > 1.0)
        fail_msg("%s: %.3g times its bound (%.3g ulp) at x = %a, z = %a", names[f], w.ratio, bound(f, w.x),
                 (double)w.x, (double)w.z);
}

static void check_d(int f)
{
    run_d_fn run = (run_d_fn)dlsym(checker, "run_d");
    assert_non_null(run);
    struct { double err; } w = {0};
    double wx = 0;
    long n = 0;
    const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, DBL_MAX, -DBL_MAX, DBL_MIN, 0x1p-1074, 1.0,
                              0.5, 0.84375, 709.78, 710.0, -708.4, -745.1, 19.0, 22.0, 6.0, -0.29289321881345254};
    /* 2^20 doubles' bits spread evenly over the 2^64 */
    const uint64_t step = UINT64_MAX >> 20;
    for (uint64_t k = 0; k < (1u << 20); k++) {
        uint64_t b = k * step + (k * 2654435761u & 0xfffff);
        memcpy(&xd[n], &b, 8);
        if (++n == CHUNK) {
            run(f, xd, yd, n);
            for (long i = 0; i < n; i++) {
                double e = ulp_err(yd[i], ref_d(f, xd[i]), 53, -1074, (long double)DBL_MAX + 0x1p970L);
                if (e > w.err) {
                    w.err = e;
                    wx = xd[i];
                }
            }
            n = 0;
        }
    }
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        for (int s = -1; s <= 1; s += 2)
            xd[n++] = s * special[i];
    run(f, xd, yd, n);
    for (long i = 0; i < n; i++) {
        double e = ulp_err(yd[i], ref_d(f, xd[i]), 53, -1074, (long double)DBL_MAX + 0x1p970L);
        if (e > w.err) {
            w.err = e;
            wx = xd[i];
        }
    }
    print_message("%-8s f64: at most %.2f ulp (at x = %a)\n", names[f], w.err, wx);
    if (w.err > 4.0)
        fail_msg("%s (f64): %.3g ulp at x = %a (more than libmvec's 4)", names[f], w.err, wx);
}

#define F32_TEST(F) static void test_f32_##F(void **state) { (void)state; check_f(F); }
#define F64_TEST(F) static void test_f64_##F(void **state) { (void)state; check_d(F); }
F32_TEST(F_EXP) F32_TEST(F_LOG) F32_TEST(F_TANH) F32_TEST(F_ERF) F32_TEST(F_EXPM1) F32_TEST(F_LOG1P)
F32_TEST(F_SIGMOID) F32_TEST(F_NPDF) F32_TEST(F_POW)
F64_TEST(F_EXP) F64_TEST(F_LOG) F64_TEST(F_TANH) F64_TEST(F_ERF) F64_TEST(F_EXPM1) F64_TEST(F_LOG1P)

/* The loops went to libmvec: its tanhf's vector variant is in the
 * checker's dependencies (a scalar loop links only libm). */
static void test_vectorised(void **state)
{
    (void)state;
#if defined(__x86_64__) && defined(__GLIBC__)
    if (!dlsym(checker, "_ZGVbN4v_tanhf"))
        fail_msg("the kernels' loops of tanhf do not link libmvec: they stay scalar calls");
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectorised),
        cmocka_unit_test(test_f32_F_EXP), cmocka_unit_test(test_f32_F_LOG), cmocka_unit_test(test_f32_F_TANH),
        cmocka_unit_test(test_f32_F_ERF), cmocka_unit_test(test_f32_F_EXPM1), cmocka_unit_test(test_f32_F_LOG1P),
        cmocka_unit_test(test_f32_F_SIGMOID), cmocka_unit_test(test_f32_F_NPDF), cmocka_unit_test(test_f32_F_POW),
        cmocka_unit_test(test_f64_F_EXP), cmocka_unit_test(test_f64_F_LOG), cmocka_unit_test(test_f64_F_TANH),
        cmocka_unit_test(test_f64_F_ERF), cmocka_unit_test(test_f64_F_EXPM1), cmocka_unit_test(test_f64_F_LOG1P),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
