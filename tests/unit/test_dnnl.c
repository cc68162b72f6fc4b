/* bf16 GEMMs on the CPU backend, through oneDNN (--bf16-gemm onednn) and
 * through OpenBLAS on widened operands (--bf16-gemm openblas), and fp32
 * GEMMs through OpenBLAS's and oneDNN's sgemm (--fp32-gemm), each against
 * an f64 reference computed from the same operands:
 *  - every transpose pair, batches with strides, a shared operand (stride
 *    0), offsets, alpha and beta, accumulation over batch items, bf16 and
 *    fp32 results; shapes with odd sizes and one GEMM of the CNN's;
 *  - the bound: fp32 accumulation error (k * 2^-23 * sum |a b|) plus half
 *    an ulp of the result's dtype; a wrong transpose, stride or beta is
 *    off by far more;
 *  - the same call twice gives the same bits (one thread);
 *  - widened bf16 and f16 GEMMs large enough to be widened a panel at a
 *    time, on both sgemms.
 * The fp32 shapes are the same with fp32 operands and results. Exits 77
 * (skipped) where oneDNN cannot run bf16 GEMMs here (no libdnnl.so.2, or a
 * CPU without bf16 instructions), after checking the OpenBLAS path and
 * that --bf16-gemm onednn is refused with the reason; oneDNN's sgemm is
 * checked where the CPU has AVX-512. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/scalar.h"
#include "runtime/backend.h"

typedef struct shape {
    int ta, tb;
    int64_t m, n, k, batch;
    int64_t stride_a, stride_b, stride_c, off_a, off_b, off_c;
    bool accumulate;
    double alpha, beta;
    ir_dtype out;
} shape;

static uint64_t rng = 12345;
static float uniform(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Elements from the offset to the end of the last batch item. */
static int64_t extent(int64_t off, int64_t stride, int64_t batch, int64_t each)
{
    return off + stride * (batch - 1) + each;
}

static uint16_t to16(ir_dtype dt, float v)
{
    return dt == IR_F16 ? kl_f32_to_f16(v) : kl_f32_to_bf16(v);
}

static float from16(ir_dtype dt, uint16_t h)
{
    return dt == IR_F16 ? kl_f16_to_f32(h) : kl_bf16_to_f32(h);
}

/* Runs shape s on backend be with operands of dtype in (bf16 or f16, the
 * result fp32 or of dtype in as the shape says; or f32 with an f32
 * result); returns 0 when every element is within the bound, else prints
 * the first bad one. */
static int check_shape(kl_backend *be, const shape *shp, ir_dtype in, const char *who)
{
    shape wide = *shp;
    wide.out = in == IR_F32 || shp->out == IR_F32 ? IR_F32 : in;
    const shape *s = &wide;
    size_t isize = in == IR_F32 ? 4 : 2;
    int64_t na = extent(s->off_a, s->stride_a, s->batch, s->m * s->k);
    int64_t nb = extent(s->off_b, s->stride_b, s->batch, s->k * s->n);
    int64_t nc = extent(s->off_c, s->stride_c, s->accumulate ? 1 : s->batch, s->m * s->n);
    void *a = malloc(isize * (size_t)na), *b = malloc(isize * (size_t)nb);
    size_t csize = s->out == IR_F32 ? 4 : 2;
    void *c = malloc(csize * (size_t)nc), *c2 = malloc(csize * (size_t)nc);
    double *ref = malloc(8 * (size_t)nc), *mag = malloc(8 * (size_t)nc);
    for (int64_t i = 0; i < na; i++)
        if (in == IR_F32)
            ((float *)a)[i] = uniform();
        else
            ((uint16_t *)a)[i] = to16(in, uniform());
    for (int64_t i = 0; i < nb; i++)
        if (in == IR_F32)
            ((float *)b)[i] = uniform();
        else
            ((uint16_t *)b)[i] = to16(in, uniform());
    for (int64_t i = 0; i < nc; i++) {
        float v = uniform();
        if (s->out == IR_F32)
            ((float *)c)[i] = v;
        else
            ((uint16_t *)c)[i] = to16(s->out, v);
        ref[i] = s->out == IR_F32 ? v : from16(s->out, ((uint16_t *)c)[i]);
        mag[i] = fabs(ref[i] * s->beta);
    }
    /* The reference, in the order the GEMM means: C = alpha AB + beta C,
     * then (accumulating) + alpha AB for every further item. */
    for (int64_t t = 0; t < s->batch; t++) {
        int64_t oc = s->off_c + t * s->stride_c;
        double beta = s->accumulate && t > 0 ? 1.0 : s->beta;
        for (int64_t i = 0; i < s->m; i++)
            for (int64_t j = 0; j < s->n; j++) {
                double sum = 0, abs_sum = 0;
                for (int64_t p = 0; p < s->k; p++) {
                    int64_t ia = s->off_a + t * s->stride_a + (s->ta ? p * s->m + i : i * s->k + p);
                    int64_t ib = s->off_b + t * s->stride_b + (s->tb ? j * s->k + p : p * s->n + j);
                    double x = in == IR_F32 ? ((float *)a)[ia] : from16(in, ((uint16_t *)a)[ia]);
                    double y = in == IR_F32 ? ((float *)b)[ib] : from16(in, ((uint16_t *)b)[ib]);
                    sum += x * y;
                    abs_sum += fabs(x * y);
                }
                int64_t e = oc + i * s->n + j;
                ref[e] = s->alpha * sum + beta * ref[e];
                mag[e] += fabs(s->alpha) * abs_sum;
            }
    }
    kl_gemm g = {.dtype = in, .out_dtype = s->out, .ta = s->ta, .tb = s->tb, .m = s->m, .n = s->n, .k = s->k,
                 .batch = s->batch, .stride_a = s->stride_a, .stride_b = s->stride_b, .stride_c = s->stride_c,
                 .off_a = s->off_a, .off_b = s->off_b, .off_c = s->off_c, .accumulate = s->accumulate,
                 .alpha = s->alpha, .beta = s->beta};
    memcpy(c2, c, csize * (size_t)nc);
    be->ops->gemm(be, &g, a, b, c);
    be->ops->gemm(be, &g, a, b, c2);
    int bad = memcmp(c, c2, csize * (size_t)nc) != 0;
    if (bad)
        print_error("%s: %lldx%lldx%lld: the same GEMM twice gave different bits\n", who, (long long)s->m,
                    (long long)s->n, (long long)s->k);
    double eps_out = s->out == IR_F32 ? 0x1p-24 : s->out == IR_F16 ? 0x1p-11 : 0x1p-8;
    for (int64_t e = s->off_c; e < nc && !bad; e++) {
        double got = s->out == IR_F32 ? ((float *)c)[e] : from16(s->out, ((uint16_t *)c)[e]);
        double bound = (double)(s->k * s->batch + 2) * 0x1p-23 * mag[e] + eps_out * fabs(ref[e]) + 1e-30;
        if (fabs(got - ref[e]) > bound) {
            print_error("%s: %lldx%lldx%lld ta %d tb %d batch %lld acc %d alpha %g beta %g out %s: C[%lld] = %.9g, "
                        "want %.9g +- %.3g\n",
                        who, (long long)s->m, (long long)s->n, (long long)s->k, s->ta, s->tb, (long long)s->batch,
                        s->accumulate, s->alpha, s->beta, ir_dtype_name(s->out), (long long)e, got, ref[e], bound);
            bad = 1;
        }
    }
    free(a), free(b), free(c), free(c2), free(ref), free(mag);
    return bad;
}

static const shape shapes[] = {
    {0, 0, 7, 5, 3, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_BF16},
    {1, 0, 33, 17, 65, 1, 0, 0, 0, 3, 5, 7, false, 1, 0, IR_F32},
    {0, 1, 16, 31, 40, 1, 0, 0, 0, 0, 0, 0, false, 0.5, 1, IR_BF16},
    {1, 1, 9, 12, 70, 1, 0, 0, 0, 0, 0, 0, false, 1, 0.25, IR_F32},
    /* Batched: strided operands, a shared B, a bf16 result. */
    {0, 0, 12, 10, 18, 4, 12 * 18 + 3, 0, 12 * 10 + 1, 2, 0, 0, false, 1, 0, IR_BF16},
    /* Accumulated over batch items into one fp32 C (a weight gradient). */
    {0, 1, 8, 18, 49, 5, 8 * 49, 18 * 49, 0, 0, 0, 0, true, 1, 0, IR_F32},
    {0, 1, 8, 18, 49, 5, 8 * 49, 18 * 49, 0, 0, 0, 0, true, 1, 1, IR_F32},
    /* ... into a bf16 C (the widening path keeps the sum in fp32). */
    {1, 0, 6, 6, 20, 3, 6 * 20, 6 * 20, 0, 0, 0, 0, true, 1, 0, IR_BF16},
    /* The CNN's second convolution, one image: 64 x (14*14) x (32*9). */
    {0, 0, 64, 196, 288, 2, 0, 288 * 196, 64 * 196, 0, 0, 0, false, 1, 0, IR_BF16},
};

/* Widened GEMMs large enough to be widened a panel at a time
 * (runtime/backend_cpu.c cpu_gemm_panels): columns of B and C in panels
 * (N long; the last panel short), K in chunks (K long; the last chunk
 * short); every transpose, offsets, beta, 16-bit and fp32 results. The
 * bound above holds for any summation order. */
static const shape panel_shapes[] = {
    {0, 0, 20, 1500, 300, 1, 0, 0, 0, 3, 5, 7, false, 1, 0.5, IR_BF16},
    {1, 1, 17, 1203, 250, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32},
    {0, 1, 9, 2100, 130, 1, 0, 0, 0, 1, 0, 2, false, 0.5, 1, IR_F32},
    {1, 0, 5, 3000, 100, 1, 0, 0, 0, 0, 0, 0, false, 1, 1, IR_BF16},
    {0, 1, 24, 40, 9000, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32},
    {1, 0, 33, 20, 8500, 1, 0, 0, 0, 4, 6, 9, false, 1, 0.25, IR_BF16},
    {0, 0, 7, 35, 12000, 1, 0, 0, 0, 0, 0, 0, false, 1, 1, IR_F32},
    {1, 1, 40, 9, 10000, 1, 0, 0, 0, 0, 0, 0, false, 2, 0, IR_BF16},
};

static kl_backend *backend(const char *lib, const char *fp32)
{
    kl_cpu_options co = {.threads = 1, .quiet = true, .bf16_gemm = lib, .fp32_gemm = fp32};
    return kl_cpu_backend_new(&co);
}

static void test_openblas_path(void **state)
{
    (void)state;
    kl_backend *be = backend("openblas", "openblas");
    assert_non_null(be);
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "fp32 GEMMs: OpenBLAS sgemm (--fp32-gemm openblas)"));
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "bf16 GEMMs: OpenBLAS sgemm, widened (--bf16-gemm openblas)"));
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++)
        bad |= check_shape(be, &shapes[i], IR_BF16, "openblas") | check_shape(be, &shapes[i], IR_F32, "openblas");
    be->ops->destroy(be);
    assert_int_equal(bad, 0);
}

static void test_onednn_path(void **state)
{
    (void)state;
    kl_backend *be = backend("onednn", "openblas");
    if (!be)
        skip();
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "bf16 GEMMs: oneDNN"));
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++)
        bad |= check_shape(be, &shapes[i], IR_BF16, "onednn");
    be->ops->destroy(be);
    assert_int_equal(bad, 0);
}

/* oneDNN's sgemm: fp32 GEMMs, and bf16 ones widened for it. */
static void test_onednn_sgemm(void **state)
{
    (void)state;
    kl_backend *be = backend("openblas", "onednn");
    if (!be)
        skip();
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "fp32 GEMMs: oneDNN"));
    assert_non_null(strstr(kl_cpu_gemm_choice(be), "bf16 GEMMs: oneDNN sgemm, widened (--bf16-gemm openblas)"));
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(shapes); i++)
        bad |= check_shape(be, &shapes[i], IR_F32, "onednn sgemm") | check_shape(be, &shapes[i], IR_BF16, "widened");
    be->ops->destroy(be);
    assert_int_equal(bad, 0);
}

/* The panels, bf16 and f16, on OpenBLAS's sgemm and (with AVX-512)
 * oneDNN's. */
static void test_panels(void **state)
{
    (void)state;
    int bad = 0;
    const char *fp32[] = {"openblas", "onednn"};
    for (int l = 0; l < 2; l++) {
        kl_backend *be = backend("openblas", fp32[l]);
        if (!be)
            continue;
        for (size_t i = 0; i < KL_ARRAY_LEN(panel_shapes); i++)
            bad |= check_shape(be, &panel_shapes[i], IR_BF16, fp32[l]) |
                   check_shape(be, &panel_shapes[i], IR_F16, fp32[l]);
        be->ops->destroy(be);
    }
    assert_int_equal(bad, 0);
}

static void test_unknown_library_is_refused(void **state)
{
    (void)state;
    assert_null(backend("mkl", NULL));
    assert_null(backend(NULL, "mkl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openblas_path),
        cmocka_unit_test(test_onednn_path),
        cmocka_unit_test(test_onednn_sgemm),
        cmocka_unit_test(test_panels),
        cmocka_unit_test(test_unknown_library_is_refused),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed)
        return failed;
    kl_cpu_options co = {.threads = 1, .quiet = true, .bf16_gemm = "onednn"};
    kl_backend *be = kl_cpu_backend_new(&co);
    if (!be) {
        printf("SKIP: oneDNN cannot run bf16 GEMMs here (see the error above); the OpenBLAS path was checked\n");
        return 77;
    }
    be->ops->destroy(be);
    return 0;
}
