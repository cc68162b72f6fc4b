/* f16 GEMMs through Kiln's kernels (runtime/cpu/gemm16.c), as the CPU
 * backend runs them: the one KILN_F16_GEMM names, amx or avx512, at
 * every size (ctest runs this file with each: amx is skipped, 77, on a
 * CPU without AMX; unset, auto, the kernel auto would choose), against
 * the f64 reference (gemm_check.h):
 *  - every transpose pair; sizes that leave partial strips of rows (8)
 *    and columns (48); K over several blocks of 192 and under one; rows
 *    over one block of 192; columns over one block of 768; offsets,
 *    alpha and beta; f16 and fp32 results; batches with strides, a
 *    shared operand, items summed into an fp32 C;
 *  - which GEMMs it cannot take (a batch summed into an f16 C), and
 *    which auto leaves to the widened path by shape (kl_gemm16_pays:
 *    small ones; without AMX, all but those with an operand or C of 2^21
 *    elements or more), as the backend routes them;
 *  - the first columns, and rows, of a GEMM's C equal a narrower
 *    GEMM's (an element's sum depends on K alone);
 *  - the same bits with 1, 2 and 3 threads, C split by columns and by
 *    rows (each element sums in the same order whichever thread runs it);
 *  - on the tile unit, operands with inf and NaN: each C element the
 *    FMA kernel makes inf or NaN has the same bits (not NaN for inf),
 *    the others agree to fp32's rounding;
 *  - KILN_F16_GEMM: auto names the kernel at start-up, amx and avx512
 *    choose (refused where they cannot run), widened the old path, an
 *    unknown value is refused;
 *  - bf16 on the FMA kernel (--bf16-gemm kiln; run with
 *    KILN_F16_GEMM=avx512 only): every shape against the reference, its
 *    bf16 results rounded with kl_f32_to_bf16's bits (ties, NaN, inf,
 *    beta), the same bits on 1-3 threads, and what auto hands it (all
 *    but the small GEMMs on a CPU where kl_gemm16_bf16_preferred, none
 *    where oneDNN runs bf16 and is preferred).
 * Exits 77 (skipped) on a CPU without AVX-512, after checking that
 * KILN_F16_GEMM=avx512 and amx are refused there, and with
 * KILN_F16_GEMM=amx on a CPU without AMX (after checking that it is
 * refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "gemm_check.h"
#include "runtime/cpu/gemm16.h"

/* The kernel the tests run: KILN_F16_GEMM's amx or avx512, or (auto)
 * the one auto chooses, forced so that it takes every size. */
static const char *kernel;

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

/* A backend whose f16 GEMMs run on `which` (KILN_F16_GEMM). */
static kl_backend *backend_with(const char *which, int threads)
{
    setenv("KILN_F16_GEMM", which, 1);
    kl_cpu_options co = {.threads = threads, .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    unsetenv("KILN_F16_GEMM");
    return be;
}

static kl_backend *backend(int threads)
{
    return backend_with(kernel, threads);
}

/* A backend whose bf16 GEMMs run on `lib` (--bf16-gemm). */
static kl_backend *backend_bf16(const char *lib, int threads)
{
    kl_cpu_options co = {.threads = threads, .quiet = true, .bf16_gemm = lib};
    return kl_cpu_backend_new(&co);
}

static void test_against_reference(void **state)
{
    (void)state;
    kl_backend *be = backend(2);
    assert_non_null(be);
    bool amx = !strcmp(kernel, "amx");
    assert_non_null(strstr(kl_cpu_gemm_choice(be), amx ? "f16 GEMMs: Kiln AMX" : "f16 GEMMs: Kiln AVX-512"));
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++) {
        kl_gemm g = {.dtype = IR_F16, .out_dtype = shapes[i].out, .m = shapes[i].m, .n = shapes[i].n,
                     .k = shapes[i].k, .batch = shapes[i].batch, .accumulate = shapes[i].accumulate};
        assert_int_equal(kl_cpu_f16_route(be, &g), amx ? KL_F16_AMX : KL_F16_AVX512);
        bad |= check_shape(be, &shapes[i], IR_F16, "gemm16");
    }
    be->ops->destroy(be);
    assert_int_equal(bad, 0);
}

/* What auto hands the kernel (kl_gemm16_pays), as the backend routes it:
 * never a small GEMM (a matrix-vector product, the MLP's 128 x 10 x 128)
 * nor one it cannot take (a batch summed into an f16 C); with AMX every
 * other one; without, only those with an operand or C of 2^21 elements
 * or more (the CNN's 288 x 25088 x 64), not the MLP's 128 x 256 x 784 nor
 * 128 x 128 x 3136. */
static void test_auto_routes(void **state)
{
    (void)state;
    kl_backend *be = backend_with("auto", 1);
    assert_non_null(be);
    bool amx = kl_gemm16_amx_supported();
    kl_f16_route kern = amx ? KL_F16_AMX : KL_F16_AVX512;
    const struct { int64_t m, n, k, batch; bool acc; bool amx, fma; } cases[] = {
        {1, 4096, 4096, 1, false, false, false},     /* matrix-vector */
        {128, 10, 128, 1, false, false, false},      /* the MLP's head */
        {32, 32, 32, 1, false, false, false},
        {64, 64, 64, 4, true, false, false},         /* summed into an f16 C */
        {128, 256, 784, 1, false, true, false},
        {128, 128, 3136, 1, false, true, false},
        {288, 25088, 64, 1, false, true, true},
        {64, 288, 25088, 1, false, true, true},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl_gemm g = {.dtype = IR_F16, .out_dtype = IR_F16, .m = cases[i].m, .n = cases[i].n, .k = cases[i].k,
                     .batch = cases[i].batch, .accumulate = cases[i].acc};
        kl_f16_route want = (amx ? cases[i].amx : cases[i].fma) ? kern : KL_F16_WIDENED;
        if (kl_cpu_f16_route(be, &g) != want)
            fail_msg("%lld x %lld x %lld (batch %lld): route %d, expected %d", (long long)g.m, (long long)g.n,
                     (long long)g.k, (long long)g.batch, kl_cpu_f16_route(be, &g), want);
    }
    be->ops->destroy(be);
    /* widened: none; a forced kernel: every size it takes */
    kl_gemm small = {.dtype = IR_F16, .out_dtype = IR_F16, .m = 1, .n = 300, .k = 200, .batch = 1};
    be = backend_with("widened", 1);
    assert_int_equal(kl_cpu_f16_route(be, &small), KL_F16_WIDENED);
    be->ops->destroy(be);
    be = backend_with("avx512", 1);
    assert_int_equal(kl_cpu_f16_route(be, &small), KL_F16_AVX512);
    be->ops->destroy(be);
}

/* C = A B on `threads` threads, operands and result of dtype dt (f16 on
 * the kernel under test, bf16 on --bf16-gemm kiln); A and B as seeded. */
static uint16_t *run(ir_dtype dt, int threads, int ta, int tb, int64_t m, int64_t n, int64_t k)
{
    kl_backend *be = dt == IR_BF16 ? backend_bf16("kiln", threads) : backend(threads);
    assert_non_null(be);
    uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(k * n)), *c = calloc((size_t)(m * n), 2);
    rng = 99;
    for (int64_t i = 0; i < m * k; i++)
        a[i] = to16(dt, uniform());
    for (int64_t i = 0; i < k * n; i++)
        b[i] = to16(dt, uniform());
    kl_gemm g = {.dtype = dt, .out_dtype = dt, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = 1, .alpha = 1};
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

/* The same bits of C on 1, 2 and 3 threads, C split by columns (many
 * strips of 48) and by rows (one strip, tall C), every transpose pair. */
static void threads_agree(ir_dtype dt)
{
    const int64_t dims[][3] = {{40, 2000, 500}, {1000, 40, 300}, {130, 300, 70}};
    for (size_t d = 0; d < KL_ARRAY_LEN(dims); d++)
        for (int t = 0; t < 4; t++) {
            int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
            uint16_t *one = run(dt, 1, t & 1, t >> 1, m, n, k);
            for (int threads = 2; threads <= 3; threads++) {
                uint16_t *many = run(dt, threads, t & 1, t >> 1, m, n, k);
                if (memcmp(one, many, 2 * (size_t)(m * n)))
                    fail_msg("%s %lldx%lldx%lld ta %d tb %d: %d threads differ from one",
                             dt == IR_BF16 ? "bf16" : "f16", (long long)m, (long long)n, (long long)k, t & 1, t >> 1,
                             threads);
                free(many);
            }
            free(one);
        }
}

static void test_threads_agree(void **state)
{
    (void)state;
    threads_agree(IR_F16);
}

/* C = A B (fp32 result) with KILN_F16_GEMM=which. */
static float *run_with(const char *which, uint16_t *a, uint16_t *b, int64_t m, int64_t n, int64_t k)
{
    kl_backend *be = backend_with(which, 1);
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
    if (strcmp(kernel, "amx")) {
        printf("(the AMX kernel's recompute: KILN_F16_GEMM=amx runs it)\n");
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
    kl_backend *be = backend_with("avx512", 1);
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "f16 GEMMs: Kiln AVX-512 (fp32 sums; operands widened while packed; every size)"));
    be->ops->destroy(be);
    be = backend_with("amx", 1);
    if (kl_gemm16_amx_supported()) {
        assert_non_null(be);
        assert_non_null(strstr(kl_cpu_gemm_choice(be), "f16 GEMMs: Kiln AMX (exact bf16 parts of f16; fp32 sums; every size)"));
        be->ops->destroy(be);
    } else
        assert_null(be);
    be = backend_with("auto", 1);
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be), kl_gemm16_amx_supported() ? "f16 GEMMs: Kiln AMX (exact bf16 parts of f16; fp32 sums; small ones widened)"
                                                                               : "f16 GEMMs: Kiln AVX-512 (fp32 sums; operands widened while packed; large operands; others widened)"));
    be->ops->destroy(be);
    be = backend_with("widened", 1);
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "f16 GEMMs: sgemm, widened (KILN_F16_GEMM=widened)"));
    be->ops->destroy(be);
    assert_null(backend_with("mkl", 1));
}

/* ---- bf16 on the FMA kernel (--bf16-gemm kiln) ---- */

static void test_bf16_against_reference(void **state)
{
    (void)state;
    kl_backend *be = backend_bf16("kiln", 2);
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be),
                           "bf16 GEMMs: Kiln AVX-512 (fp32 sums; operands widened while packed; every size)"));
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++) {
        ir_dtype out = shapes[i].out == IR_F32 ? IR_F32 : IR_BF16;
        kl_gemm g = {.dtype = IR_BF16, .out_dtype = out, .m = shapes[i].m, .n = shapes[i].n, .k = shapes[i].k,
                     .batch = shapes[i].batch, .accumulate = shapes[i].accumulate};
        assert_true(kl_cpu_bf16_on_kiln(be, &g));
        assert_int_equal(kl_cpu_f16_route(be, &g), KL_F16_WIDENED);
        bad |= check_shape(be, &shapes[i], IR_BF16, "gemm16 bf16");
    }
    /* a batch summed into a bf16 C stays wide elsewhere */
    kl_gemm summed = {.dtype = IR_BF16, .out_dtype = IR_BF16, .m = 64, .n = 64, .k = 64, .batch = 4,
                      .accumulate = true};
    assert_false(kl_cpu_bf16_on_kiln(be, &summed));
    be->ops->destroy(be);
    assert_int_equal(bad, 0);
}

/* K = 1 and A = 1: each C element is alpha (0 + b) (+ beta C), one fp32
 * rounding, then kl_f32_to_bf16's: ties to even, NaN kept NaN, a carry
 * into inf, beta's old bf16 C read exactly. */
static void test_bf16_rounding(void **state)
{
    (void)state;
    kl_backend *be = backend_bf16("kiln", 1);
    assert_non_null(be);
    enum { N = 40 };
    const float vals[N] = {1.0f, -1.5f, 3.0f, 1.00390625f, 1.01171875f, -1.00390625f, 65504.0f, 3.3895314e38f,
                           -3.3895314e38f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, 7.0f, 0.1f, 0.2f, 0.3f,
                           123.456f, -9.87e10f, 2.5e-5f, 1.0f / 3.0f, 6.02e23f, -2.0f, 255.5f, 256.5f, 1.9921875f,
                           1.99609375f, 0.99609375f, 1e38f, -1e38f, 5.0f, 0.75f, 1.25f, 1000.0f, 1e-5f, 33.0f,
                           -0.001f, 42.0f};
    const float alphas[] = {1.0f, 1.0009765625f, 0.5f};
    const float betas[] = {0.0f, 1.0f, -0.75f};
    uint16_t a = kl_f32_to_bf16(1.0f), b[N], c[N], old[N];
    for (int j = 0; j < N; j++) {
        b[j] = kl_f32_to_bf16(vals[j]);
        old[j] = kl_f32_to_bf16(vals[(j * 7 + 3) % N] * 0.5f);
    }
    for (size_t x = 0; x < KL_ARRAY_LEN(alphas); x++)
        for (size_t y = 0; y < KL_ARRAY_LEN(betas); y++) {
            memcpy(c, old, sizeof c);
            kl_gemm g = {.dtype = IR_BF16, .out_dtype = IR_BF16, .m = 1, .n = N, .k = 1, .batch = 1,
                         .alpha = alphas[x], .beta = betas[y]};
            be->ops->gemm(be, &g, &a, b, c);
            for (int j = 0; j < N; j++) {
                /* the sum starts from +0, as any GEMM's (so -0 gives +0) */
                float v = alphas[x] * fmaf(1.0f, kl_bf16_to_f32(b[j]), 0.0f);
                if (betas[y] != 0.0f)
                    v = fmaf(betas[y], kl_bf16_to_f32(old[j]), v);
                uint16_t want = kl_f32_to_bf16(v);
                if (c[j] != want)
                    fail_msg("alpha %g beta %g, b = %g: C %#06x, kl_f32_to_bf16 %#06x", alphas[x], betas[y],
                             kl_bf16_to_f32(b[j]), c[j], want);
            }
        }
    be->ops->destroy(be);
}

static void test_bf16_threads_agree(void **state)
{
    (void)state;
    threads_agree(IR_BF16);
}

/* What --bf16-gemm auto hands the kernel, and the settings. */
static void test_bf16_auto(void **state)
{
    (void)state;
    kl_backend *be = backend_bf16("auto", 1);
    assert_non_null(be);
    kl_backend *dnnl = backend_bf16("onednn", 1);
    bool kiln = !dnnl || kl_gemm16_bf16_preferred();
    const char *choice = kl_cpu_gemm_choice(be);
    printf("auto: %s\n", strstr(choice, "bf16 GEMMs:"));
    assert_true(!kiln || strstr(choice, "bf16 GEMMs: Kiln AVX-512 (fp32 sums; operands widened while packed; "));
    const struct { int64_t m, n, k; bool with_dnnl, without; } cases[] = {
        {1, 4096, 4096, false, false},    /* matrix-vector */
        {128, 10, 128, false, false},     /* the MLP's head */
        {128, 128, 10, false, false},
        {2048, 128, 128, true, false},    /* the GPT's blocks */
        {128, 256, 784, true, false},
        {288, 25088, 64, true, true},     /* the CNN's convolution */
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl_gemm g = {.dtype = IR_BF16, .out_dtype = IR_BF16, .m = cases[i].m, .n = cases[i].n, .k = cases[i].k,
                     .batch = 1};
        bool want = kiln && (dnnl ? cases[i].with_dnnl : cases[i].without);
        if (kl_cpu_bf16_on_kiln(be, &g) != want)
            fail_msg("auto: %lld x %lld x %lld on the kernel: %d, expected %d", (long long)g.m, (long long)g.n,
                     (long long)g.k, !want, want);
    }
    be->ops->destroy(be);
    if (dnnl)
        dnnl->ops->destroy(dnnl);
    /* openblas and onednn never hand it any */
    kl_gemm big = {.dtype = IR_BF16, .out_dtype = IR_BF16, .m = 2048, .n = 512, .k = 512, .batch = 1};
    be = backend_bf16("openblas", 1);
    assert_non_null(be);
    assert_false(kl_cpu_bf16_on_kiln(be, &big));
    be->ops->destroy(be);
    assert_null(backend_bf16("mkl", 1));
}

int main(void)
{
    if (!kl_gemm16_supported()) {
        const char *refused[] = {"avx512", "amx"};
        for (int i = 0; i < 2; i++) {
            kl_backend *be = backend_with(refused[i], 1);
            if (be) {
                fprintf(stderr, "FAIL: KILN_F16_GEMM=%s accepted on a CPU without AVX-512\n", refused[i]);
                return 1;
            }
        }
        kl_backend *be = backend_bf16("kiln", 1);
        if (be) {
            fprintf(stderr, "FAIL: --bf16-gemm kiln accepted on a CPU without AVX-512\n");
            return 1;
        }
        printf("SKIP: this CPU lacks AVX-512 (F, BW, VL); KILN_F16_GEMM=avx512 and amx and --bf16-gemm kiln are "
               "refused\n");
        return 77;
    }
    const char *env = getenv("KILN_F16_GEMM");
    kernel = env && *env && strcmp(env, "auto") ? env : kl_gemm16_amx_supported() ? "amx" : "avx512";
    if (!strcmp(kernel, "amx") && !kl_gemm16_amx_supported()) {
        kl_backend *be = backend_with("amx", 1);
        if (be) {
            fprintf(stderr, "FAIL: KILN_F16_GEMM=amx accepted on a CPU or OS without AMX\n");
            return 1;
        }
        printf("SKIP: this CPU lacks AMX-TILE and AMX-BF16 (or the OS did not grant the tile registers), so the AMX "
               "kernel cannot run here; KILN_F16_GEMM=amx is refused\n");
        return 77;
    }
    if (strcmp(kernel, "amx") && strcmp(kernel, "avx512")) {
        fprintf(stderr, "FAIL: test_gemm16 runs Kiln's kernels: KILN_F16_GEMM=%s (amx, avx512 or auto)\n", kernel);
        return 1;
    }
    printf("kernel: %s\n", kernel);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_auto_routes),
        cmocka_unit_test(test_threads_agree),
        cmocka_unit_test(test_sizes_agree),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_setting),
    };
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_bf16_against_reference),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_threads_agree),
        cmocka_unit_test(test_bf16_auto),
    };
    /* bf16 does not depend on KILN_F16_GEMM: once, in the avx512 run */
    if (env && !strcmp(env, "avx512")) {
        int failed = cmocka_run_group_tests(bf16, NULL, NULL);
        if (failed)
            return failed;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
