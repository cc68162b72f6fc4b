/* Convolution's steps in the plan: im2col + GEMM (forward, weight
 * gradient), GEMM + col2im (input gradient), with the axis swaps between
 * the GEMM's [O, N, HW] layout and the tensors' [N, O, HW], or direct
 * kernels for few input taps. The kernels are codegen/k_conv.c. */
#include "codegen/cg.h"
#include "plan.h"
#include "plan_build.h"

static void conv_geometry(const ir_graph *g, const ir_node *n, cg_conv *cv)
{
    /* The input and output shapes of the forward convolution. */
    ir_type x, y, w;
    if (n->op == IR_OP_CONV2D) {
        x = ir_val(g, n->in.v[0])->type;
        w = ir_val(g, n->in.v[1])->type;
        y = ir_val(g, n->out.v[0])->type;
    } else {
        ir_type shape = {ir_val(g, n->out.v[0])->type.dtype, 4, {0}};
        ir_attr_ints(&n->attrs, "shape", shape.dim, 4);
        y = ir_val(g, n->in.v[0])->type;
        if (n->op == IR_OP_CONV2D_GRAD_INPUT)
            x = shape, w = ir_val(g, n->in.v[1])->type;
        else
            w = shape, x = ir_val(g, n->in.v[1])->type;
    }
    cv->dtype = n->op == IR_OP_CONV2D ? x.dtype : y.dtype; /* the GEMM operands' dtype */
    cv->out_dtype = ir_val(g, n->out.v[0])->type.dtype;
    cv->n = x.dim[0], cv->c = x.dim[1], cv->h = x.dim[2], cv->w = x.dim[3];
    cv->o = y.dim[1], cv->oh = y.dim[2], cv->ow = y.dim[3];
    cv->kh = w.dim[2], cv->kw = w.dim[3];
    cv->groups = ir_attr_int(&n->attrs, "groups", 1);
    ir_attr_ints(&n->attrs, "stride", cv->s, 2);
    ir_attr_ints(&n->attrs, "pad", cv->p, 2);
    ir_attr_ints(&n->attrs, "dilation", cv->d, 2);
}

typedef struct conv_move {
    const cg_conv *cv;
    int from, to; /* value or scratch ids */
    bool to_col;
} conv_move;

static void build_conv_move(cg_builder *b, void *arg)
{
    conv_move *m = arg;
    if (m->to_col)
        cg_build_im2col(b, m->cv, m->from, m->to);
    else
        cg_build_col2im(b, m->cv, m->from, m->to);
}

/* One GEMM per group over the whole batch, in the layouts
 * col [C*KK, N*HW] and y' [O, N*HW] (channels outermost). */
static void add_conv_gemms(kl_plan *p, const ir_node *n, const cg_conv *cv, int a, int bb, int c)
{
    int64_t G = cv->groups, og = cv->o / G, cg = cv->c / G, kk = cv->kh * cv->kw, nhw = cv->n * cv->oh * cv->ow;
    for (int64_t g = 0; g < G; g++) {
        kl_gemm m = {.dtype = cv->dtype, .out_dtype = cv->out_dtype, .alpha = 1, .beta = 0, .batch = 1, .a = a, .b = bb, .c = c};
        switch (n->op) {
        case IR_OP_CONV2D: /* y'[o, nhw] = w[o, ckk] col[ckk, nhw] */
            m.m = og, m.n = nhw, m.k = cg * kk;
            m.off_a = g * og * cg * kk, m.off_b = g * cg * kk * nhw, m.off_c = g * og * nhw;
            break;
        case IR_OP_CONV2D_GRAD_INPUT: /* colgrad[ckk, nhw] = w^T dy'[o, nhw] */
            m.ta = 1;
            m.m = cg * kk, m.n = nhw, m.k = og;
            m.off_a = g * og * cg * kk, m.off_b = g * og * nhw, m.off_c = g * cg * kk * nhw;
            break;
        default: /* dw[o, ckk] = dy'[o, nhw] col[ckk, nhw]^T */
            m.tb = 1;
            m.m = og, m.n = cg * kk, m.k = nhw;
            m.off_a = g * og * nhw, m.off_b = g * cg * kk * nhw, m.off_c = g * og * cg * kk;
            break;
        }
        kl_step s = {.kind = KL_STEP_GEMM, .phase = n->phase, .gemm = m, .node = n->id};
        s.flops = 2.0 * (double)m.m * (double)m.n * (double)m.k;
        s.bytes = (m.m * m.k + m.k * m.n) * ir_dtype_size(m.dtype) + m.m * m.n * ir_dtype_size(m.out_dtype);
        kl_vec_push(p->steps, s);
    }
}

/* y[n, o, hw] += bias[o] */
typedef struct bias_add {
    int y, bias;
    const cg_conv *cv;
} bias_add;

static void build_bias_add(cg_builder *b, void *arg)
{
    bias_add *ba = arg;
    kir_kernel *k = b->k;
    const cg_conv *cv = ba->cv;
    int by = cg_buf(b, ba->y), bb = cg_buf(b, ba->bias);
    k->work = cv->n * cv->o * cv->oh * cv->ow;
    int n = kir_loop_begin(k, KL_PAR, cv->n, "n");
    int o = kir_loop_begin(k, KL_PAR, cv->o, "o");
    int bv = kir_let(k, kir_load(k, bb, kir_varref(k, o)), "bias");
    int i = kir_loop_begin(k, KL_PAR, cv->oh * cv->ow, "i");
    kir_expr *idx = kir_iadd(k, kir_imul(k, kir_iadd(k, kir_imul(k, kir_varref(k, n), cv->o), kir_varref(k, o)), cv->oh * cv->ow),
                             kir_varref(k, i));
    kir_store(k, by, idx, kir_bin(k, KB_ADD, kir_load(k, by, idx), kir_varref(k, bv)));
    for (int j = 0; j < 3; j++)
        kir_loop_end(k);
}

typedef struct swap_outer {
    int from, to;
    ir_dtype dt;
    int64_t a, b, inner;
} swap_outer;

static void build_swap(cg_builder *b, void *arg)
{
    swap_outer *sw = arg;
    cg_build_swap_outer(b, sw->from, sw->to, sw->dt, sw->a, sw->b, sw->inner);
}

typedef struct direct_conv {
    const cg_conv *cv;
    int a, b, out; /* values or scratch ids */
    int which;     /* 0 pad, 1 forward, 2 weight gradient */
} direct_conv;

static void build_direct(cg_builder *b, void *arg)
{
    direct_conv *d = arg;
    if (d->which == 0)
        cg_build_pad(b, d->cv, d->a, d->out);
    else if (d->which == 1)
        cg_build_conv_direct(b, d->cv, d->a, d->b, d->out);
    else
        cg_build_conv_direct_wgrad(b, d->cv, d->a, d->b, d->out);
}

/* A convolution with few taps per output (the first layer of an image
 * model: C = 1 or 3): direct kernels beat im2col + a skinny GEMM
 * (measured: kiln bench examples/fashion_cnn.kl). */
static bool direct_conv_fits(const ir_node *n, const cg_conv *cv)
{
    return n->op != IR_OP_CONV2D_GRAD_INPUT && cv->groups == 1 && cv->c * cv->kh * cv->kw <= 27 &&
           !(n->op == IR_OP_CONV2D && n->in.n == 3);
}

/* forward: im2col, GEMM into y' [O, N, HW], swap into y [N, O, HW];
 * grad_input: swap dy into dy', GEMM into colgrad, col2im;
 * grad_weight: im2col, swap dy into dy', GEMM into dw. */
void plan_add_conv_steps(kl_plan *p, const cg_group *grp, const ir_node *n)
{
    const ir_graph *g = p->g;
    cg_conv cv;
    conv_geometry(g, n, &cv);
    int64_t hw = cv.oh * cv.ow;
    if (direct_conv_fits(n, &cv)) {
        int x = n->in.v[n->op == IR_OP_CONV2D ? 0 : 1];
        int xpad = plan_scratch(p, cg_conv_pad_dtype(&cv), cv.n * cv.c * (cv.h + 2 * cv.p[0]) * (cv.w + 2 * cv.p[1]));
        direct_conv pad = {&cv, x, -1, plan_scratch_id(xpad), 0};
        plan_add_kernel_step_with(p, grp, build_direct, &pad);
        direct_conv dc = {&cv, plan_scratch_id(xpad), n->in.v[n->op == IR_OP_CONV2D ? 1 : 0], n->out.v[0],
                          n->op == IR_OP_CONV2D ? 1 : 2};
        plan_add_kernel_step_with(p, grp, build_direct, &dc);
        return;
    }
    int64_t cols = cv.n * cv.c * cv.kh * cv.kw * hw;
    /* col holds x's taps (forward, weight gradient) or the GEMM's input
     * gradient (its result's dtype). */
    cg_conv colv = cv;
    if (n->op == IR_OP_CONV2D_GRAD_INPUT)
        colv.dtype = cv.out_dtype;
    int col = plan_scratch(p, colv.dtype, cols);
    int out = plan_buffer_of(p, n->out.v[0]);
    if (n->op == IR_OP_CONV2D) {
        conv_move mv = {&colv, n->in.v[0], plan_scratch_id(col), true};
        plan_add_kernel_step_with(p, grp, build_conv_move, &mv);
        int yt = plan_scratch(p, cv.out_dtype, cv.n * cv.o * hw);
        add_conv_gemms(p, n, &cv, plan_buffer_of(p, n->in.v[1]), col, yt);
        swap_outer sw = {plan_scratch_id(yt), n->out.v[0], cv.out_dtype, cv.o, cv.n, hw};
        plan_add_kernel_step_with(p, grp, build_swap, &sw);
        if (n->in.n == 3) {
            bias_add ba = {n->out.v[0], n->in.v[2], &cv};
            plan_add_kernel_step_with(p, grp, build_bias_add, &ba);
        }
        (void)out;
        return;
    }
    int dyt = plan_scratch(p, cv.dtype, cv.n * cv.o * hw);
    swap_outer sw = {n->in.v[0], plan_scratch_id(dyt), cv.dtype, cv.n, cv.o, hw};
    plan_add_kernel_step_with(p, grp, build_swap, &sw);
    if (n->op == IR_OP_CONV2D_GRAD_WEIGHT) {
        conv_move mv = {&colv, n->in.v[1], plan_scratch_id(col), true};
        plan_add_kernel_step_with(p, grp, build_conv_move, &mv);
        add_conv_gemms(p, n, &cv, dyt, col, out);
    } else {
        add_conv_gemms(p, n, &cv, plan_buffer_of(p, n->in.v[1]), dyt, col);
        conv_move mv = {&colv, plan_scratch_id(col), n->out.v[0], false};
        plan_add_kernel_step_with(p, grp, build_conv_move, &mv);
    }
}
