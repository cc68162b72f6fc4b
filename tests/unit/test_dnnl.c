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
 *    time, on both sgemms;
 *  - widened GEMMs with under 16 result columns (the MLP's 128 x 10
 *    logits and their weight gradient) on OpenBLAS's sgemm where the
 *    fp32 choice is oneDNN's (kl_cpu_wide_on_openblas), the others on
 *    oneDNN's, fp32 GEMMs always on the fp32 choice.
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

#include "gemm_check.h"

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
 * (runtime/exec/backend_cpu.c cpu_gemm_panels): columns of B and C in panels
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
 * oneDNN's; f16 widened even where gemm16.h's kernel would take it
 * (unit.gemm16 checks that one). */
static void test_panels(void **state)
{
    (void)state;
    setenv("KILN_F16_GEMM", "widened", 1);
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
    unsetenv("KILN_F16_GEMM");
    assert_int_equal(bad, 0);
}

/* Which sgemm a widened GEMM runs on (runtime/backend_cpu.c
 * wide_on_openblas): OpenBLAS's for few result columns, where it is the
 * faster (with its AVX-512 kernels), when fp32 is on oneDNN; fp32 GEMMs
 * stay on the fp32 choice; results within the bound on either, and on
 * OpenBLAS's sgemm whatever its kernels where OpenBLAS is the fp32
 * choice. */
static void test_few_columns_on_openblas(void **state)
{
    (void)state;
    kl_backend *be = backend("openblas", "onednn");
    if (!be)
        skip();
    /* With OpenBLAS's AVX2 kernels oneDNN is the faster there too. */
    bool avx512 = kl_cpu_openblas_avx512();
    static const shape few[] = {
        {0, 0, 128, 10, 128, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F16}, /* the MLP's logits */
        {1, 0, 128, 10, 128, 1, 0, 0, 0, 0, 0, 0, false, 1, 0, IR_F32}, /* their weight gradient */
        {0, 1, 33, 15, 70, 1, 0, 0, 0, 2, 1, 3, false, 0.5, 1, IR_F32},
    };
    int bad = 0;
    for (size_t i = 0; i < KL_ARRAY_LEN(few); i++) {
        kl_gemm g = {.dtype = IR_F16, .out_dtype = few[i].out, .ta = few[i].ta, .tb = few[i].tb, .m = few[i].m,
                     .n = few[i].n, .k = few[i].k, .batch = 1};
        assert_int_equal(kl_cpu_wide_on_openblas(be, &g), avx512);
        g.dtype = IR_BF16; /* widened: --bf16-gemm openblas */
        assert_int_equal(kl_cpu_wide_on_openblas(be, &g), avx512);
        g.dtype = g.out_dtype = IR_F32;
        assert_false(kl_cpu_wide_on_openblas(be, &g));
        bad |= check_shape(be, &few[i], IR_F16, avx512 ? "f16 widened, openblas" : "f16 widened, onednn") |
               check_shape(be, &few[i], IR_BF16, avx512 ? "bf16 widened, openblas" : "bf16 widened, onednn");
    }
    const int64_t many[][3] = {{128, 256, 784}, {128, 128, 10}, {784, 256, 128}, {128, 16, 128}};
    for (size_t i = 0; i < KL_ARRAY_LEN(many); i++) {
        kl_gemm g = {.dtype = IR_F16, .out_dtype = IR_F16, .m = many[i][0], .n = many[i][1], .k = many[i][2], .batch = 1};
        assert_false(kl_cpu_wide_on_openblas(be, &g));
    }
    be->ops->destroy(be);
    be = backend("openblas", "openblas"); /* OpenBLAS is the fp32 choice: nothing to move */
    assert_non_null(be);
    kl_gemm g = {.dtype = IR_F16, .out_dtype = IR_F16, .m = 128, .n = 10, .k = 128, .batch = 1};
    assert_false(kl_cpu_wide_on_openblas(be, &g));
    /* Widened few-column GEMMs on OpenBLAS's sgemm, whatever its core. */
    for (size_t i = 0; i < KL_ARRAY_LEN(few); i++)
        bad |= check_shape(be, &few[i], IR_F16, "f16 widened, fp32 on openblas") |
               check_shape(be, &few[i], IR_BF16, "bf16 widened, fp32 on openblas");
    be->ops->destroy(be);
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
        cmocka_unit_test(test_few_columns_on_openblas),
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
