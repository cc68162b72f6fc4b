/* Memory planning (codegen/memplan.h): the kernel-level in-place rule on
 * hand-built kernels, and the plan checker catching broken plans (the
 * tests over every model show it passes correct ones; these show it can
 * fail). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plan/memplan.h"
#include "driver/compile.h"

/* out[i] = f(in[i]) over n elements; order: 0 load then store (one
 * statement), 1 store then a second load (load after store), 2 reversed
 * index for the load. */
static kir_kernel *elementwise(int64_t n, int variant)
{
    kir_kernel *k = kir_new("test", KT_F32);
    int bi = kir_buf_add(k, 1, IR_F32, n), bo = kir_buf_add(k, 2, IR_F32, n);
    int i = kir_loop_begin(k, KL_PAR, n, "i");
    kir_expr *idx = kir_varref(k, i);
    kir_expr *ridx = kir_iadd(k, kir_const_i(k, n - 1), kir_imul(k, kir_varref(k, i), -1));
    kir_expr *x = kir_load(k, bi, variant == 2 ? ridx : idx);
    kir_store(k, bo, kir_varref(k, i), kir_un(k, KU_EXP, x));
    if (variant == 1)
        kir_store(k, bo, kir_varref(k, i), kir_load(k, bi, kir_varref(k, i)));
    kir_loop_end(k);
    return k;
}

static void test_inplace_rule(void **state)
{
    (void)state;
    kir_kernel *k = elementwise(64, 0);
    assert_true(plan_kernel_inplace_ok(k, 0, 1));
    assert_false(plan_kernel_inplace_ok(k, 1, 0));
    kir_free(k);
    k = elementwise(64, 1);
    assert_false(plan_kernel_inplace_ok(k, 0, 1));
    kir_free(k);
    k = elementwise(64, 2);
    assert_false(plan_kernel_inplace_ok(k, 0, 1));
    kir_free(k);
    /* A reduction: out[r] = sum over c of in[r, c] (sizes differ). */
    k = kir_new("sum", KT_F32);
    int bi = kir_buf_add(k, 1, IR_F32, 64), bo = kir_buf_add(k, 2, IR_F32, 8);
    int r = kir_loop_begin(k, KL_PAR, 8, "r");
    int c = kir_loop_begin(k, KL_RED, 8, "c");
    int acc = kir_loop_acc(k, KA_SUM, "acc");
    kir_acc_add(k, acc, kir_load(k, bi, kir_iadd(k, kir_imul(k, kir_varref(k, r), 8), kir_varref(k, c))));
    kir_loop_end(k);
    kir_store(k, bo, kir_varref(k, r), kir_varref(k, acc));
    kir_loop_end(k);
    assert_false(plan_kernel_inplace_ok(k, bi, bo));
    kir_free(k);
}

/* The softmax cross-entropy gradient's shape of kernel over rows x cols
 * (codegen/k_reduce.c): per row the label's logit, the row's maximum and
 * sum of exponentials (reductions), then the gradient row stored over
 * the logits. Variants that must be refused: 1 the row after this one is
 * read (r + 1), 2 the label is not clamped into the row, 3 the loss term
 * reads a logit after the gradient row is stored, 4 no reduction between
 * the loads before the store loop and it, 5 the store loop is one column
 * short of the row. */
static kir_kernel *logits_kernel(int64_t rows, int64_t cols, int variant, int *bi, int *bo)
{
    kir_kernel *k = kir_new("cross_entropy_grad", KT_F32);
    int bl = kir_buf_add(k, 1, IR_I32, rows);
    *bi = kir_buf_add(k, 2, IR_F32, rows * cols);
    *bo = kir_buf_add(k, 3, IR_F32, rows * cols);
    int bloss = kir_buf_add(k, 4, IR_F32, 1);
    int r = kir_loop_begin(k, KL_RED, rows, "r");
    int loss = kir_loop_acc(k, KA_SUM, "loss");
    kir_expr *row = kir_imul(k, kir_varref(k, r), cols);
    kir_expr *l = kir_load(k, bl, kir_varref(k, r));
    if (variant != 2)
        l = kir_bin(k, KB_MAX, kir_const_i(k, 0), kir_bin(k, KB_MIN, l, kir_const_i(k, cols - 1)));
    int label = kir_let(k, l, "label");
    int xl = kir_let(k, kir_load(k, *bi, kir_iadd(k, row, kir_varref(k, label))), "xl");
    int m = -1;
    if (variant != 4) {
        int c = kir_loop_begin(k, KL_RED, cols, "c");
        m = kir_loop_acc(k, KA_MAX, "m");
        kir_expr *at = kir_iadd(k, variant == 1 ? kir_imul(k, kir_iadd(k, kir_varref(k, r), kir_const_i(k, 1)), cols) : row,
                                kir_varref(k, c));
        kir_acc_add(k, m, kir_load(k, *bi, at));
        kir_loop_end(k);
    }
    int c = kir_loop_begin(k, KL_BPAR, variant == 5 ? cols - 1 : cols, "c");
    kir_expr *x = kir_load(k, *bi, kir_iadd(k, row, kir_varref(k, c)));
    kir_expr *d = kir_bin(k, KB_SUB, x, m >= 0 ? kir_varref(k, m) : kir_varref(k, xl));
    kir_store(k, *bo, kir_iadd(k, row, kir_varref(k, c)), kir_un(k, KU_EXP, d));
    kir_loop_end(k);
    kir_expr *term = kir_varref(k, xl);
    if (variant == 3)
        term = kir_load(k, *bi, kir_iadd(k, row, kir_varref(k, label)));
    kir_acc_add(k, loss, term);
    kir_loop_end(k);
    kir_store(k, bloss, kir_const_i(k, 0), kir_varref(k, loss));
    return k;
}

/* A result written row by row over its operand: each row read whole
 * (reductions) before the same row is stored; refused when another row is
 * read, a label may leave the row, a load follows the stores, no
 * reduction separates the loads from the stores, or the rows are not
 * covered. */
static void test_inplace_rows(void **state)
{
    (void)state;
    static const bool ok[] = {true, false, false, false, false, false};
    for (int variant = 0; variant < 6; variant++) {
        int bi, bo;
        kir_kernel *k = logits_kernel(8, 10, variant, &bi, &bo);
        if (ok[variant] != plan_kernel_inplace_ok(k, bi, bo))
            fail_msg("row variant %d: in place %s", variant, ok[variant] ? "refused" : "allowed");
        kir_free(k);
    }
}

/* The model's softmax cross-entropy gradient takes its logits' memory
 * (a reshape view of the GEMM that makes them). */
static void test_logits_gradient_in_place(void **state);

static const char *model =
    "model m {\n"
    "  input x : f32[batch, 16]\n"
    "  input y : i32[batch]\n"
    "  param w1 : [16, 32] init = normal(std = 0.5)\n"
    "  param b1 : [32] init = zeros\n"
    "  param w2 : [32, 4] init = normal(std = 0.5)\n"
    "  loss = cross_entropy(relu(x @ w1 + b1) @ w2, y)\n"
    "}\n"
    "train { batch = 8 }\n";

/* The model's plan, through memory planning (its graph in *gp; the
 * caller frees both). */
static kl_plan *plan_of_opts(ir_graph **gp, const kl_plan_opts *o)
{
    kl_source src;
    kl_source_from_string(&src, "test.kl", model);
    kl_compile_opts co = {.mode = KL_MODE_TRAIN, .verify = true, .stop_after = "memplan", .plan = o};
    kl_compiled *c = kl_compile_source(&src, &co);
    kl_source_free(&src);
    assert_non_null(c);
    kl_plan *p = c->plan;
    *gp = c->g;
    free(c);
    return p;
}

static kl_plan *plan_of(ir_graph **gp)
{
    return plan_of_opts(gp, NULL);
}

/* The largest two arena buffers live at the same time. */
static void overlapping_pair(const kl_plan *p, int *a, int *b)
{
    *a = *b = -1;
    int64_t best = -1;
    for (int i = 0; i < p->buffers.n; i++) {
        const kl_buffer *x = &p->buffers.v[i];
        for (int j = i + 1; j < p->buffers.n; j++) {
            const kl_buffer *y = &p->buffers.v[j];
            if (x->region != KL_REGION_ARENA || y->region != KL_REGION_ARENA || x->first < 0 || y->first < 0 ||
                x->last < y->first || y->last < x->first)
                continue;
            if (x->bytes + y->bytes > best) {
                best = x->bytes + y->bytes;
                *a = i;
                *b = j;
            }
        }
    }
    assert_true(*a >= 0);
}

static void test_checker_passes_the_plan(void **state)
{
    (void)state;
    ir_graph *g;
    kl_plan *p = plan_of(&g);
    kl_buf why = {0};
    assert_int_equal(plan_check(p, 1, &why), 0);
    assert_int_equal(plan_check(p, 4, &why), 0);
    assert_true(p->planned);
    assert_true(p->arena_bytes >= p->arena_lower_bound);
    assert_true(p->arena_bytes <= p->arena_unplanned);
    kl_buf_free(&why);
    plan_free(p);
    ir_graph_free(g);
}

static void test_checker_finds_overlap(void **state)
{
    (void)state;
    ir_graph *g;
    kl_plan *p = plan_of(&g);
    int a, b;
    overlapping_pair(p, &a, &b);
    p->buffers.v[b].offset = p->buffers.v[a].offset;
    kl_buf why = {0};
    assert_true(plan_check(p, 1, &why) > 0);
    assert_non_null(strstr(why.s, "overlap in memory"));
    kl_buf_free(&why);
    plan_free(p);
    ir_graph_free(g);
}

static void test_checker_finds_misalignment(void **state)
{
    (void)state;
    ir_graph *g;
    kl_plan *p = plan_of(&g);
    int a, b;
    overlapping_pair(p, &a, &b);
    p->buffers.v[a].offset += 4;
    kl_buf why = {0};
    assert_true(plan_check(p, 1, &why) > 0);
    assert_non_null(strstr(why.s, "not a multiple of 256"));
    kl_buf_free(&why);
    plan_free(p);
    ir_graph_free(g);
}

/* A result made to share the memory of a value that is still read later:
 * the simulation finds the read of overwritten data (the overlap check
 * cannot, as the two are one buffer now). */
static void test_checker_finds_a_clobbered_read(void **state)
{
    (void)state;
    ir_graph *g;
    kl_plan *p = plan_of(&g);
    /* The input x: pinned, read in forward and in backward (the gradient
     * of w1); the logits (written by a forward GEMM, smaller) go over it. */
    int x = p->value_buf[ir_find_value(g, "x")];
    int victim = -1;
    for (int i = 0; i < p->steps.n && victim < 0; i++) {
        const kl_step *s = &p->steps.v[i];
        if (s->kind == KL_STEP_GEMM && s->gemm.c != x && p->buffers.v[s->gemm.c].bytes <= p->buffers.v[x].bytes &&
            p->buffers.v[s->gemm.c].region == KL_REGION_ARENA)
            victim = s->gemm.c;
    }
    assert_true(victim >= 0);
    p->buffers.v[victim].region = KL_REGION_VIEW;
    p->buffers.v[victim].view_of = x;
    p->buffers.v[victim].inplace = true;
    plan_liveness(p);
    kl_buf why = {0};
    assert_true(plan_check(p, 2, &why) > 0);
    assert_non_null(strstr(why.s, "overwr"));
    kl_buf_free(&why);
    plan_free(p);
    ir_graph_free(g);
}

static void test_logits_gradient_in_place(void **state)
{
    (void)state;
    ir_graph *g;
    kl_plan *p = plan_of(&g);
    int grad = -1;
    for (int i = 0; i < g->nodes.n; i++)
        if (ir_nd(g, i)->op == IR_OP_CROSS_ENTROPY_GRAD)
            grad = ir_nd(g, i)->out.v[0];
    assert_true(grad >= 0);
    const kl_buffer *b = &p->buffers.v[p->value_buf[grad]];
    assert_int_equal(b->region, KL_REGION_VIEW);
    assert_true(b->inplace);
    int logits = ir_nd(g, ir_val(g, grad)->def)->in.v[1];
    assert_int_equal(plan_real_buffer(p, p->value_buf[grad]), plan_real_buffer(p, p->value_buf[logits]));
    assert_int_equal(plan_check(p, 2, NULL), 0);
    plan_free(p);
    ir_graph_free(g);
}

/* Without planning every buffer has memory of its own. */
static void test_unplanned(void **state)
{
    (void)state;
    ir_graph *g, *g2;
    kl_plan *planned = plan_of(&g);
    kl_plan_opts o = {.unplanned = true};
    kl_plan *p = plan_of_opts(&g2, &o);
    assert_false(p->planned);
    assert_int_equal(p->arena_bytes, p->arena_unplanned);
    assert_int_equal(plan_check(p, 1, NULL), 0);
    for (int i = 0; i < p->buffers.n; i++)
        assert_false(p->buffers.v[i].inplace);
    assert_true(planned->arena_bytes < p->arena_bytes);
    plan_free(p);
    plan_free(planned);
    ir_graph_free(g);
    ir_graph_free(g2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inplace_rule),
        cmocka_unit_test(test_inplace_rows),
        cmocka_unit_test(test_logits_gradient_in_place),
        cmocka_unit_test(test_checker_passes_the_plan),
        cmocka_unit_test(test_checker_finds_overlap),
        cmocka_unit_test(test_checker_finds_misalignment),
        cmocka_unit_test(test_checker_finds_a_clobbered_read),
        cmocka_unit_test(test_unplanned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
