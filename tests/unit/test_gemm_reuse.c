/* Which 16-bit GEMM operands a later GEMM step may take from an earlier
 * one's converted copy (plan/gemm_reuse.c), on hand-built plans: the
 * same buffer and elements with nothing written in between is reused; a
 * kernel writing it (directly or through an in-place view), another arena
 * buffer written over its bytes, a GEMM's C on it, a collective touching
 * it, another element count or an fp32 GEMM is not. The runs that check
 * every reuse against a new widening are precision.gemm_reuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plan/plan.h"

static int buffer(kl_plan *p, kl_region region, int64_t offset, int64_t numel, int view_of)
{
    kl_buffer b = {.value = -1, .dtype = IR_F16, .numel = numel, .bytes = 2 * numel, .region = region,
                   .offset = offset, .view_of = view_of};
    kl_vec_push(p->buffers, b);
    return p->buffers.n - 1;
}

/* C (m x n) = A (m x k) B (k x n), 16 x 16 x 16. */
static int gemm(kl_plan *p, ir_dtype dt, int a, int b, int c, int64_t k)
{
    kl_step s = {.kind = KL_STEP_GEMM};
    s.gemm = (kl_gemm){.dtype = dt, .out_dtype = dt, .m = 16, .n = 16, .k = k, .batch = 1, .alpha = 1,
                       .a = a, .b = b, .c = c, .epi.kind = KL_LT_NONE};
    kl_vec_push(p->steps, s);
    return p->steps.n - 1;
}

static void kernel(kl_plan *p, kl_step_kind kind, int read, int written)
{
    kl_step s = {.kind = kind, .nargs = 2, .args = {read, written}, .rw = {KL_ARG_READ, KL_ARG_WRITE}};
    kl_vec_push(p->steps, s);
}

static const kl_gemm *G(const kl_plan *p, int step) { return &p->steps.v[step].gemm; }

static void test_reuse_until_written(void **state)
{
    (void)state;
    kl_plan p = {0};
    int x = buffer(&p, KL_REGION_ARENA, 0, 256, -1), w = buffer(&p, KL_REGION_PERSISTENT, 0, 256, -1);
    int c1 = buffer(&p, KL_REGION_ARENA, 1024, 256, -1), c2 = buffer(&p, KL_REGION_ARENA, 2048, 256, -1);
    int xv = buffer(&p, KL_REGION_VIEW, 0, 256, x); /* an in-place result over x */
    int s0 = gemm(&p, IR_F16, x, w, c1, 16);
    kernel(&p, KL_STEP_KERNEL, c1, c2); /* touches neither */
    int s2 = gemm(&p, IR_F16, x, w, c2, 16);
    kernel(&p, KL_STEP_KERNEL, c2, xv);  /* writes x's memory through the view */
    int s4 = gemm(&p, IR_F16, x, w, c1, 16);
    int s5 = gemm(&p, IR_F16, xv, w, c2, 16); /* the view is x's memory: reuses s4's */
    plan_mark_gemm_reuse(&p);
    assert_int_not_equal(G(&p, s0)->keep_a, 0);
    assert_int_equal(G(&p, s2)->reuse_a, G(&p, s0)->keep_a);
    assert_int_equal(G(&p, s2)->keep_a, 0); /* x is written after it: nothing to keep */
    assert_int_equal(G(&p, s4)->reuse_a, 0);
    assert_int_not_equal(G(&p, s4)->keep_a, 0);
    assert_int_equal(G(&p, s5)->reuse_a, G(&p, s4)->keep_a);
    /* w is never written: s0's copy serves every later step. */
    assert_int_not_equal(G(&p, s0)->keep_b, 0);
    assert_int_equal(G(&p, s2)->reuse_b, G(&p, s0)->keep_b);
    assert_int_equal(G(&p, s4)->reuse_b, G(&p, s0)->keep_b);
    assert_int_equal(G(&p, s5)->reuse_b, G(&p, s0)->keep_b);
    assert_int_equal(G(&p, s2)->keep_b + G(&p, s4)->keep_b + G(&p, s5)->keep_b, 0);
    kl_vec_free(p.buffers);
    kl_vec_free(p.steps);
}

static void test_other_writers_end_reuse(void **state)
{
    (void)state;
    kl_plan p = {0};
    int x = buffer(&p, KL_REGION_ARENA, 0, 256, -1), w = buffer(&p, KL_REGION_PERSISTENT, 0, 256, -1);
    int over = buffer(&p, KL_REGION_ARENA, 256, 256, -1); /* bytes 256-767: over x's 0-511 */
    int c = buffer(&p, KL_REGION_ARENA, 4096, 256, -1), o = buffer(&p, KL_REGION_ARENA, 8192, 256, -1);
    int s0 = gemm(&p, IR_F16, x, w, c, 16);
    kernel(&p, KL_STEP_KERNEL, c, over);
    int s2 = gemm(&p, IR_F16, x, w, c, 16);
    int s3 = gemm(&p, IR_F16, c, w, x, 16); /* its C is x */
    int s4 = gemm(&p, IR_F16, x, w, o, 16);
    kernel(&p, KL_STEP_COLLECTIVE, w, o); /* an all-reduce reading w */
    int s6 = gemm(&p, IR_F16, x, w, o, 16);
    int s7 = gemm(&p, IR_F16, x, w, o, 8); /* fewer elements of both */
    int s8 = gemm(&p, IR_F32, x, w, o, 16);
    plan_mark_gemm_reuse(&p);
    assert_int_equal(G(&p, s0)->keep_a, 0);
    assert_int_equal(G(&p, s2)->reuse_a, 0);
    assert_int_equal(G(&p, s2)->keep_a, 0); /* s3 writes x */
    assert_int_equal(G(&p, s3)->keep_a + G(&p, s3)->reuse_a, 0); /* no other step reads its A */
    assert_int_equal(G(&p, s4)->reuse_a, 0);
    assert_int_equal(G(&p, s6)->reuse_a, G(&p, s4)->keep_a);
    assert_int_not_equal(G(&p, s4)->keep_a, 0);
    /* w: reused up to the collective that touches it, then kept anew. */
    assert_int_equal(G(&p, s4)->reuse_b, G(&p, s0)->keep_b);
    assert_int_equal(G(&p, s6)->reuse_b, 0);
    assert_int_equal(G(&p, s7)->reuse_b, 0);
    assert_int_equal(G(&p, s7)->reuse_a, 0);
    assert_int_equal(G(&p, s6)->keep_b, 0); /* s7 reads other elements, s8 is fp32 */
    assert_int_equal(G(&p, s8)->reuse_a + G(&p, s8)->reuse_b + G(&p, s8)->keep_a + G(&p, s8)->keep_b, 0);
    kl_vec_free(p.buffers);
    kl_vec_free(p.steps);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_until_written),
        cmocka_unit_test(test_other_writers_end_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
