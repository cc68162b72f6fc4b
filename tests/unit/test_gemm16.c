/* f16 GEMMs through Kiln's kernels (runtime/gemm16.c), as the CPU
 * backend runs them: the one KILN_F16_GEMM names (unset: auto, the AMX
 * one on a CPU with AMX-BF16; ctest runs this file again with avx512
 * for the FMA one), against the f64 reference (gemm_check.h):
 *  - every transpose pair; sizes that leave partial strips of rows (8)
 *    and columns (48); K over several blocks of 192 and under one; rows
 *    over one block of 192; columns over one block of 768; offsets,
 *    alpha and beta; f16 and fp32 results; batches with strides, a
 *    shared operand, items summed into an fp32 C;
 *  - which GEMMs it leaves to the widened path (a batch summed into an
 *    f16 C; every size is taken, matrix-vector products too);
 *  - the first columns, and rows, of a GEMM's C equal a narrower
 *    GEMM's (an element's sum depends on K alone);
 *  - the same bits with 1, 2 and 3 threads, C split by columns and by
 *    rows (each element sums in the same order whichever thread runs it);
 *  - on the tile unit, operands with inf and NaN: each C element the
 *    FMA kernel makes inf or NaN has the same bits (not NaN for inf),
 *    the others agree to fp32's rounding;
 *  - KILN_F16_GEMM: auto names the kernel at start-up, amx and avx512
 *    choose (refused where they cannot run), widened the old path, an
 *    unknown value is refused.
 * Exits 77 (skipped) on a CPU without AVX-512, after checking that
 * KILN_F16_GEMM=avx512 and amx are refused there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "gemm_check.h"
#include "runtime/gemm16.h"

/* Every shape does at least gemm16.c's MIN_MACS multiply-adds per item
 * (smaller ones stay widened). */
static const shape shapes[] = {
    {0, 0, 67, 130, 385, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F16},
    {0, 0, 67, 130, 385, 1, 0, 0, 0, 5, 3, 1, false, 0.5, 1, IR_F32},
    {1, 0, 200, 97, 33, 1, 0, 0, 0, 0, 0, 0, false, 1, 0.25, IR_F16},
    {0, 1, 9, 1100, 50, 1, 0, 0, 0, 2, 7, 0, false, 1, 0, IR_F16},
    {1, 1, 300, 50, 200, 1, 0, 0, 0, 0, 0, 0, false, 2, -1, IR_F32},
    {0, 1, 64, 288, 1000, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32},
    {1, 0, 3000, 20, 16, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F16},
    {0, 0, 40, 1300, 70, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32},
    /* small: a matrix-vector product each way, K of 1, under a tile */
    {0, 0, 1, 300, 200, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32},
    {1, 1, 300, 1, 200, 1, 0, 0, 0, 0, 0, 0, false, 1, 0.5, IR_F16},
    {0, 1, 20, 30, 1, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32},
    {1, 0, 5, 10, 7, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F16},
    /* Batched: strided A and C, a shared B, an f16 result. */
    {0, 0, 64, 100, 50, 3, 64 * 50 + 3, 0, 64 * 100 + 1, 2, 0, 0, false, 1, 0.5, IR_F16},
    /* Summed over batch items into one fp32 C (a weight gradient). */
    {0, 1, 64, 96, 64, 4, 64 * 64, 96 * 64, 0, 0, 0, 0, true, 1, 0, IR_F32},
    {1, 0, 40, 100, 80, 3, 40 * 80, 80 * 100, 0, 0, 0, 0, true, 1, 1, IR_F32},
};

static kl_backend *backend(int threads)
{
    kl_cpu_options co = {.threads = threads, .quiet = true};
    return kl_cpu_backend_new(&co);
}

static void test_against_reference(void **state)
{
    (void)state;
    kl_backend *be = backend(2);
    assert_non_null(be);
    const char *env = getenv("KILN_F16_GEMM");
    bool avx512 = env && !strcmp(env, "avx512");
    assert_non_null(strstr(kl_cpu_gemm_choice(be), !avx512 && kl_gemm16_amx_supported() ? "f16 GEMMs: Kiln AMX"
                                                                                          : "f16 GEMMs: Kiln AVX-512"));
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++) {
        kl_gemm g = {.dtype = IR_F16, .out_dtype = shapes[i].out, .m = shapes[i].m, .n = shapes[i].n,
                     .k = shapes[i].k, .batch = shapes[i].batch, .accumulate = shapes[i].accumulate};
        assert_true(kl_gemm16_takes(&g));
        bad |= check_shape(be, &shapes[i], IR_F16, "gemm16");
    }
    be->ops->destroy(be);
    assert_int_equal(bad, 0);
    /* every size is taken (an element's sum depends on K alone); a batch
     * summed into an f16 C is left to the widened path */
    kl_gemm gemv = {.dtype = IR_F16, .out_dtype = IR_F16, .m = 1, .n = 4096, .k = 4096, .batch = 1};
    kl_gemm small = {.dtype = IR_F16, .out_dtype = IR_F16, .m = 32, .n = 32, .k = 32, .batch = 1};
    kl_gemm summed = {.dtype = IR_F16, .out_dtype = IR_F16, .m = 64, .n = 64, .k = 64, .batch = 4, .accumulate = true};
    assert_true(kl_gemm16_takes(&gemv));
    assert_true(kl_gemm16_takes(&small));
    assert_false(kl_gemm16_takes(&summed));
}

/* C = A B on `threads` threads, f16 result; A and B as seeded. */
static uint16_t *run(int threads, int ta, int tb, int64_t m, int64_t n, int64_t k)
{
    kl_backend *be = backend(threads);
    assert_non_null(be);
    uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(k * n)), *c = calloc((size_t)(m * n), 2);
    rng = 99;
    for (int64_t i = 0; i < m * k; i++)
        a[i] = kl_f32_to_f16(uniform());
    for (int64_t i = 0; i < k * n; i++)
        b[i] = kl_f32_to_f16(uniform());
    kl_gemm g = {.dtype = IR_F16, .out_dtype = IR_F16, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = 1,
                 .alpha = 1};
    be->ops->gemm(be, &g, a, b, c);
    be->ops->destroy(be);
    free(a), free(b);
    return c;
}

/* An element's sum depends on K alone: the first n1 columns of C from a
 * GEMM of n columns equal C of the GEMM of those n1 columns, and the
 * first m1 rows likewise (a tensor-parallel rank's slice against one
 * rank's whole GEMM); every transpose pair, with sizes on both sides of
 * what decides, on the tile unit, whether C or C^T is computed. */
static void test_sizes_agree(void **state)
{
    (void)state;
    const int64_t m = 48, n = 98, k = 200, n1 = 33, m1 = 7;
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(k * n));
        rng = 99;
        for (int64_t i = 0; i < m * k; i++)
            a[i] = kl_f32_to_f16(uniform());
        for (int64_t i = 0; i < k * n; i++)
            b[i] = kl_f32_to_f16(uniform());
        /* B's first n1 columns (B stored k x n, or n x k when tb) */
        uint16_t *bs = malloc(2 * (size_t)(k * n1)), *as = malloc(2 * (size_t)(m1 * k));
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n1; j++)
                bs[tb ? j * k + p : p * n1 + j] = b[tb ? j * k + p : p * n + j];
        for (int64_t i = 0; i < m1; i++)
            for (int64_t p = 0; p < k; p++)
                as[ta ? p * m1 + i : i * k + p] = a[ta ? p * m + i : i * k + p];
        kl_backend *be = backend(1);
        /* fp32 results: the last bits of the sums, which rounding to
         * f16 would mostly hide */
        float *whole = calloc((size_t)(m * n), 4), *cn = calloc((size_t)(m * n1), 4), *cm = calloc((size_t)(m1 * n), 4);
        kl_gemm gw = {.dtype = IR_F16, .out_dtype = IR_F32, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = 1,
                      .alpha = 1};
        kl_gemm gn = {.dtype = IR_F16, .out_dtype = IR_F32, .ta = ta, .tb = tb, .m = m, .n = n1, .k = k, .batch = 1,
                      .alpha = 1};
        kl_gemm gm = {.dtype = IR_F16, .out_dtype = IR_F32, .ta = ta, .tb = tb, .m = m1, .n = n, .k = k, .batch = 1,
                      .alpha = 1};
        be->ops->gemm(be, &gw, a, b, whole);
        be->ops->gemm(be, &gn, a, bs, cn);
        be->ops->gemm(be, &gm, as, b, cm);
        be->ops->destroy(be);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                if (j < n1 && memcmp(&cn[i * n1 + j], &whole[i * n + j], 4))
                    fail_msg("ta %d tb %d: C[%lld, %lld] of %lld columns differs from the whole GEMM's", ta, tb,
                             (long long)i, (long long)j, (long long)n1);
                if (i < m1 && memcmp(&cm[i * n + j], &whole[i * n + j], 4))
                    fail_msg("ta %d tb %d: C[%lld, %lld] of %lld rows differs from the whole GEMM's", ta, tb,
                             (long long)i, (long long)j, (long long)m1);
            }
        free(whole), free(a), free(b), free(as), free(bs), free(cn), free(cm);
    }
}

static void test_threads_agree(void **state)
{
    (void)state;
    /* by columns (many strips of 48), by rows (one strip, tall C) */
    const int64_t dims[][3] = {{40, 2000, 500}, {1000, 40, 300}, {130, 300, 70}};
    for (size_t d = 0; d < KL_ARRAY_LEN(dims); d++)
        for (int t = 0; t < 4; t++) {
            int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
            uint16_t *one = run(1, t & 1, t >> 1, m, n, k);
            for (int threads = 2; threads <= 3; threads++) {
                uint16_t *many = run(threads, t & 1, t >> 1, m, n, k);
                if (memcmp(one, many, 2 * (size_t)(m * n)))
                    fail_msg("%lldx%lldx%lld ta %d tb %d: %d threads differ from one", (long long)m, (long long)n,
                             (long long)k, t & 1, t >> 1, threads);
                free(many);
            }
            free(one);
        }
}

/* C = A B (fp32 result) with KILN_F16_GEMM=which. */
static float *run_with(const char *which, uint16_t *a, uint16_t *b, int64_t m, int64_t n, int64_t k)
{
    setenv("KILN_F16_GEMM", which, 1);
    kl_backend *be = backend(1);
    unsetenv("KILN_F16_GEMM");
    assert_non_null(be);
    float *c = calloc((size_t)(m * n), 4);
    kl_gemm g = {.dtype = IR_F16, .out_dtype = IR_F32, .m = m, .n = n, .k = k, .batch = 1, .alpha = 1};
    be->ops->gemm(be, &g, a, b, c);
    be->ops->destroy(be);
    return c;
}

static void test_nonfinite(void **state)
{
    (void)state;
    if (!kl_gemm16_amx_supported()) {
        printf("(no AMX here: nothing to compare)\n");
        return;
    }
    const int64_t m = 70, n = 90, k = 400;
    uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(k * n));
    rng = 7;
    /* positive values: a row with +inf sums to +inf, never inf - inf */
    for (int64_t i = 0; i < m * k; i++)
        a[i] = kl_f32_to_f16(0.55f + 0.45f * uniform());
    for (int64_t i = 0; i < k * n; i++)
        b[i] = kl_f32_to_f16(0.55f + 0.45f * uniform());
    a[3 * k + 17] = 0x7c00;  /* +inf: row 3 of C +inf */
    a[40 * k + 5] = 0xfc00;  /* -inf: row 40 -inf */
    b[100 * n + 61] = 0x7e00; /* NaN: column 61 NaN */
    b[399 * n + 7] = 0;       /* row 40 meets 0 there only through a[40 k + 399] */
    a[40 * k + 399] = 0x7c00; /* +inf and -inf in row 40: NaN */
    float *amx = run_with("amx", a, b, m, n, k), *fma = run_with("avx512", a, b, m, n, k);
    int infs = 0, nans = 0;
    for (int64_t i = 0; i < m * n; i++) {
        if (!isfinite(fma[i])) {
            infs += isinf(fma[i]);
            nans += isnan(fma[i]);
            if (memcmp(&amx[i], &fma[i], 4))
                fail_msg("C[%lld, %lld]: AMX %g, FMA %g", (long long)(i / n), (long long)(i % n), amx[i], fma[i]);
        } else if (!(fabsf(amx[i] - fma[i]) <= 1e-5f * fabsf(fma[i])))
            fail_msg("C[%lld, %lld]: AMX %.9g, FMA %.9g", (long long)(i / n), (long long)(i % n), amx[i], fma[i]);
    }
    /* row 3 (but column 61) +inf, row 40 and column 61 NaN */
    assert_int_equal(infs, n - 1);
    assert_int_equal(nans, n + m - 1);
    free(amx), free(fma), free(a), free(b);
}

static void test_setting(void **state)
{
    (void)state;
    setenv("KILN_F16_GEMM", "avx512", 1);
    kl_backend *be = backend(1);
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "f16 GEMMs: Kiln AVX-512"));
    be->ops->destroy(be);
    setenv("KILN_F16_GEMM", "amx", 1);
    be = backend(1);
    if (kl_gemm16_amx_supported()) {
        assert_non_null(be);
        assert_non_null(strstr(kl_cpu_gemm_choice(be), "f16 GEMMs: Kiln AMX"));
        be->ops->destroy(be);
    } else
        assert_null(be);
    setenv("KILN_F16_GEMM", "widened", 1);
    be = backend(1);
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "f16 GEMMs: sgemm, widened (KILN_F16_GEMM=widened)"));
    be->ops->destroy(be);
    setenv("KILN_F16_GEMM", "mkl", 1);
    assert_null(backend(1));
    unsetenv("KILN_F16_GEMM");
}

int main(void)
{
    if (!kl_gemm16_supported()) {
        const char *refused[] = {"avx512", "amx"};
        for (int i = 0; i < 2; i++) {
            setenv("KILN_F16_GEMM", refused[i], 1);
            kl_backend *be = backend(1);
            if (be) {
                fprintf(stderr, "FAIL: KILN_F16_GEMM=%s accepted on a CPU without AVX-512\n", refused[i]);
                return 1;
            }
        }
        printf("SKIP: this CPU lacks AVX-512 (F, BW, VL); KILN_F16_GEMM=avx512 and amx are refused\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_threads_agree),
        cmocka_unit_test(test_sizes_agree),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
