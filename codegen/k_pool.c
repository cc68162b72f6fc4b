/* Window kernels: max and average pooling forward and backward, and the
 * im2col / col2im movements that turn convolution into GEMMs.
 *
 * Reads outside the input (padding) use a clamped index and a validity
 * mask, so no lane ever loads out of bounds, vectorised or not. Backward
 * kernels gather (each input element sums the windows that cover it), so
 * they need no atomics and parallelise over the input. */
#include "cg.h"

#define K (b->k)
#define BIN(op, x, y) kir_bin(K, op, x, y)
#define VAR(v) kir_varref(K, v)
#define I(x) kir_const_i(K, x)

typedef struct window {
    int64_t k[2], s[2], p[2], d[2];
} window;

static void window_of(const ir_node *n, window *w)
{
    int64_t one[2] = {1, 1};
    if (ir_attr_ints(&n->attrs, "size", w->k, 2) < 0)
        w->k[0] = w->k[1] = 0;
    ir_attr_ints(&n->attrs, "stride", w->s, 2);
    ir_attr_ints(&n->attrs, "pad", w->p, 2);
    if (ir_attr_ints(&n->attrs, "dilation", w->d, 2) < 0)
        w->d[0] = one[0], w->d[1] = one[1];
}

/* lo <= e < hi */
static kir_expr *in_range(cg_builder *b, kir_expr *e, int64_t hi)
{
    return BIN(KB_AND, BIN(KB_GE, e, I(0)), BIN(KB_LT, e, I(hi)));
}

static kir_expr *clamp(cg_builder *b, kir_expr *e, int64_t hi)
{
    return BIN(KB_MAX, I(0), BIN(KB_MIN, e, I(hi - 1)));
}

/* Opens PAR loops over [N*C, H, W] of t; vars out (nc, h, w). */
static void open_planes(cg_builder *b, const ir_type *t, int *nc, int *h, int *w)
{
    *nc = kir_loop_begin(K, KL_PAR, t->dim[0] * t->dim[1], "nc");
    *h = kir_loop_begin(K, KL_PAR, t->dim[2], "h");
    *w = kir_loop_begin(K, KL_PAR, t->dim[3], "w");
}

static void close_n(cg_builder *b, int n)
{
    for (int i = 0; i < n; i++)
        kir_loop_end(K);
}

static kir_expr *plane_index(cg_builder *b, const ir_type *t, kir_expr *nc, kir_expr *h, kir_expr *w)
{
    return kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, nc, t->dim[2]), h), t->dim[3]), w);
}

/* A nest over the result so the epilogue can store through cg_index. */
static void result_nest(cg_builder *b, cg_nest *nest, const ir_type *t, int nc, int h, int w)
{
    int cls[4] = {0, 0, 1, 2};
    cg_nest_init(b, nest, t, cls);
    /* Re-point the collapsed groups at the loop variables opened here:
     * the groups are (N*C), H, W minus unit dims. */
    int vars[3] = {nc, h, w};
    int64_t dims[3] = {t->dim[0] * t->dim[1], t->dim[2], t->dim[3]};
    nest->rank = 0;
    for (int i = 0; i < 3; i++) {
        nest->var[nest->rank] = vars[i];
        nest->dim[nest->rank] = dims[i];
        nest->cls[nest->rank] = i;
        nest->rank++;
    }
    nest->map[0] = nest->map[1] = 0;
    nest->map[2] = 1;
    nest->map[3] = 2;
    /* Unit dims are skipped by cg_index through domain->dim == 1. */
}

static void pool_forward(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int x = n->in.v[0], y = n->out.v[0];
    const ir_type *xt = &ir_val(g, x)->type, *yt = &ir_val(g, y)->type;
    bool is_max = n->op == IR_OP_MAXPOOL;
    window wd;
    window_of(n, &wd);
    K->work = ir_type_numel(xt);
    int bx = cg_buf(b, x);
    int nc, oh, ow;
    open_planes(b, yt, &nc, &oh, &ow);
    kir_expr *r;
    kir_expr *none = kir_const_f(K, is_max ? -1.0 / 0.0 : 0.0);
    if (wd.k[0] * wd.k[1] <= 16) {
        /* Small windows unrolled: the loop over ow is the leaf and
         * vectorises. */
        kir_expr *acc = NULL;
        for (int64_t kh = 0; kh < wd.k[0]; kh++) {
            for (int64_t kw = 0; kw < wd.k[1]; kw++) {
                kir_expr *ih = kir_iadd(K, kir_imul(K, VAR(oh), wd.s[0]), I(kh - wd.p[0]));
                kir_expr *iw = kir_iadd(K, kir_imul(K, VAR(ow), wd.s[1]), I(kw - wd.p[1]));
                kir_expr *v = kir_load(K, bx, plane_index(b, xt, VAR(nc), wd.p[0] ? clamp(b, ih, xt->dim[2]) : ih,
                                                          wd.p[1] ? clamp(b, iw, xt->dim[3]) : iw));
                if (wd.p[0] || wd.p[1])
                    v = kir_select(K, BIN(KB_AND, in_range(b, ih, xt->dim[2]), in_range(b, iw, xt->dim[3])), v, none);
                acc = !acc ? v : is_max ? BIN(KB_MAX, acc, v) : BIN(KB_ADD, acc, v);
            }
        }
        r = acc;
    } else {
        int kh = kir_loop_begin(K, KL_RED, wd.k[0], "kh");
        int acc = kir_loop_acc(K, is_max ? KA_MAX : KA_SUM, "acc");
        int kw = kir_loop_begin(K, KL_RED, wd.k[1], "kw");
        kir_expr *ih = kir_iadd(K, kir_iadd(K, kir_imul(K, VAR(oh), wd.s[0]), I(-wd.p[0])), VAR(kh));
        kir_expr *iw = kir_iadd(K, kir_iadd(K, kir_imul(K, VAR(ow), wd.s[1]), I(-wd.p[1])), VAR(kw));
        int ihv = kir_let(K, ih, "ih"), iwv = kir_let(K, iw, "iw");
        kir_expr *valid = BIN(KB_AND, in_range(b, VAR(ihv), xt->dim[2]), in_range(b, VAR(iwv), xt->dim[3]));
        kir_expr *v = kir_load(K, bx, plane_index(b, xt, VAR(nc), clamp(b, VAR(ihv), xt->dim[2]), clamp(b, VAR(iwv), xt->dim[3])));
        kir_acc_add(K, acc, kir_select(K, valid, v, none));
        close_n(b, 2);
        r = VAR(acc);
    }
    if (!is_max)
        r = BIN(KB_DIV, r, kir_const_f(K, (double)(wd.k[0] * wd.k[1])));
    cg_nest nest;
    result_nest(b, &nest, yt, nc, oh, ow);
    cg_reset_cache(b);
    cg_emit_epilogue(b, y, r);
    close_n(b, 3);
}

/* For input position (h, w): the window positions (kh, kw) and outputs
 * (oh, ow) that cover it, with validity. */
static kir_expr *covering(cg_builder *b, const window *wd, const ir_type *yt, int h, int w, int kh, int kw, int *ohv, int *owv)
{
    kir_expr *th = kir_iadd(K, kir_iadd(K, VAR(h), I(wd->p[0])), kir_un(K, KU_NEG, VAR(kh)));
    kir_expr *tw = kir_iadd(K, kir_iadd(K, VAR(w), I(wd->p[1])), kir_un(K, KU_NEG, VAR(kw)));
    int thv = kir_let(K, th, "th"), twv = kir_let(K, tw, "tw");
    kir_expr *oh = BIN(KB_IDIV, VAR(thv), I(wd->s[0])), *ow = BIN(KB_IDIV, VAR(twv), I(wd->s[1]));
    *ohv = kir_let(K, oh, "oh");
    *owv = kir_let(K, ow, "ow");
    kir_expr *ok = BIN(KB_AND, BIN(KB_GE, VAR(thv), I(0)), BIN(KB_GE, VAR(twv), I(0)));
    ok = BIN(KB_AND, ok, BIN(KB_EQ, BIN(KB_IMOD, VAR(thv), I(wd->s[0])), I(0)));
    ok = BIN(KB_AND, ok, BIN(KB_EQ, BIN(KB_IMOD, VAR(twv), I(wd->s[1])), I(0)));
    ok = BIN(KB_AND, ok, BIN(KB_LT, VAR(*ohv), I(yt->dim[2])));
    ok = BIN(KB_AND, ok, BIN(KB_LT, VAR(*owv), I(yt->dim[3])));
    return ok;
}

/* What both pooling backward kernels start from: dy [N, C, OH, OW] and
 * dx [N, C, H, W], the window, and the buffers of dy and (max pooling)
 * the forward's x and y. */
typedef struct pool_grad {
    bool is_max;
    const ir_type *yt, *xt;
    window wd;
    int bdy, bx, by;
} pool_grad;

static void pool_grad_begin(cg_builder *b, const ir_node *n, pool_grad *pg)
{
    const ir_graph *g = b->grp->g;
    pg->is_max = n->op == IR_OP_MAXPOOL_GRAD;
    pg->yt = &ir_val(g, n->in.v[0])->type;
    pg->xt = &ir_val(g, n->out.v[0])->type;
    window_of(n, &pg->wd);
    K->work = ir_type_numel(pg->xt);
    pg->bdy = cg_buf(b, n->in.v[0]);
    pg->bx = pg->is_max ? cg_buf(b, n->in.v[1]) : -1;
    pg->by = pg->is_max ? cg_buf(b, n->in.v[2]) : -1;
}

/* Non-overlapping windows (stride = size, no padding): every input is in
 * at most one window, so each output writes its own window's gradient:
 * dy to the first maximum (max pooling) or dy / K to each (average). */
static void pool_backward_tiled(cg_builder *b, const ir_node *n)
{
    pool_grad pg;
    pool_grad_begin(b, n, &pg);
    bool is_max = pg.is_max;
    const ir_type *yt = pg.yt, *xt = pg.xt;
    window wd = pg.wd;
    int bdy = pg.bdy, bx = pg.bx, by = pg.by, bdx = cg_buf(b, n->out.v[0]);
    if (xt->dim[2] % wd.k[0] || xt->dim[3] % wd.k[1]) {
        /* Rows and columns no window covers get 0. */
        int z = kir_loop_begin(K, KL_PAR, ir_type_numel(xt), "i");
        kir_store(K, bdx, VAR(z), kir_const_f(K, 0));
        kir_loop_end(K);
    }
    int nc, oh, ow;
    open_planes(b, yt, &nc, &oh, &ow);
    kir_expr *o = plane_index(b, yt, VAR(nc), VAR(oh), VAR(ow));
    int d = kir_let(K, kir_load(K, bdy, o), "dy");
    int ym = is_max ? kir_let(K, kir_load(K, by, o), "ym") : -1;
    int seen = -1;
    for (int64_t kh = 0; kh < wd.k[0]; kh++) {
        for (int64_t kw = 0; kw < wd.k[1]; kw++) {
            kir_expr *ih = kir_iadd(K, kir_imul(K, VAR(oh), wd.k[0]), I(kh));
            kir_expr *iw = kir_iadd(K, kir_imul(K, VAR(ow), wd.k[1]), I(kw));
            kir_expr *pos = plane_index(b, xt, VAR(nc), ih, iw);
            kir_expr *val;
            if (is_max) {
                int eq = kir_let(K, BIN(KB_EQ, kir_load(K, bx, pos), VAR(ym)), "eq");
                kir_expr *first = seen < 0 ? VAR(eq) : BIN(KB_AND, VAR(eq), kir_un(K, KU_NOT, VAR(seen)));
                val = kir_select(K, first, VAR(d), kir_const_f(K, 0));
                seen = seen < 0 ? eq : kir_let(K, BIN(KB_OR, VAR(seen), VAR(eq)), "seen");
            } else {
                val = BIN(KB_DIV, VAR(d), kir_const_f(K, (double)(wd.k[0] * wd.k[1])));
            }
            kir_store(K, bdx, plane_index(b, xt, VAR(nc), kir_iadd(K, kir_imul(K, VAR(oh), wd.k[0]), I(kh)),
                                          kir_iadd(K, kir_imul(K, VAR(ow), wd.k[1]), I(kw))), val);
        }
    }
    close_n(b, 3);
}

static void pool_backward(cg_builder *b, const ir_node *n)
{
    pool_grad pg;
    pool_grad_begin(b, n, &pg);
    bool is_max = pg.is_max;
    const ir_type *yt = pg.yt, *xt = pg.xt;
    window wd = pg.wd;
    int bdy = pg.bdy, bx = pg.bx, by = pg.by;
    int nc, h, w;
    open_planes(b, xt, &nc, &h, &w);
    int xv = is_max ? kir_let(K, kir_load(K, bx, plane_index(b, xt, VAR(nc), VAR(h), VAR(w))), "xv") : -1;
    int kh = kir_loop_begin(K, KL_RED, wd.k[0], "kh");
    int acc = kir_loop_acc(K, KA_SUM, "acc");
    int kw = kir_loop_begin(K, KL_RED, wd.k[1], "kw");
    int ohv, owv;
    kir_expr *ok = covering(b, &wd, yt, h, w, kh, kw, &ohv, &owv);
    int okv = kir_let(K, ok, "ok");
    kir_expr *oidx = plane_index(b, yt, VAR(nc), clamp(b, VAR(ohv), yt->dim[2]), clamp(b, VAR(owv), yt->dim[3]));
    int oi = kir_let(K, oidx, "o");
    kir_expr *contrib = kir_load(K, bdy, VAR(oi));
    if (is_max) {
        /* The gradient goes to the window's first maximum: this position
         * equals the max and no earlier position of the window does. */
        int ym = kir_let(K, kir_load(K, by, VAR(oi)), "ym");
        int qh = kir_loop_begin(K, KL_RED, wd.k[0], "qh");
        int earlier = kir_loop_acc(K, KA_SUM, "earlier");
        int qw = kir_loop_begin(K, KL_RED, wd.k[1], "qw");
        kir_expr *before = BIN(KB_LT, kir_iadd(K, kir_imul(K, VAR(qh), wd.k[1]), VAR(qw)),
                               kir_iadd(K, kir_imul(K, VAR(kh), wd.k[1]), VAR(kw)));
        kir_expr *ih = kir_iadd(K, kir_iadd(K, kir_imul(K, VAR(ohv), wd.s[0]), I(-wd.p[0])), VAR(qh));
        kir_expr *iw = kir_iadd(K, kir_iadd(K, kir_imul(K, VAR(owv), wd.s[1]), I(-wd.p[1])), VAR(qw));
        int ihv = kir_let(K, ih, "ih"), iwv = kir_let(K, iw, "iw");
        kir_expr *inside = BIN(KB_AND, in_range(b, VAR(ihv), xt->dim[2]), in_range(b, VAR(iwv), xt->dim[3]));
        kir_expr *q = kir_load(K, bx, plane_index(b, xt, VAR(nc), clamp(b, VAR(ihv), xt->dim[2]), clamp(b, VAR(iwv), xt->dim[3])));
        kir_expr *hit = BIN(KB_AND, BIN(KB_AND, before, inside), BIN(KB_EQ, q, VAR(ym)));
        kir_acc_add(K, earlier, kir_select(K, hit, kir_const_f(K, 1), kir_const_f(K, 0)));
        close_n(b, 2);
        kir_expr *first = BIN(KB_AND, BIN(KB_EQ, VAR(xv), VAR(ym)), BIN(KB_EQ, VAR(earlier), kir_const_f(K, 0)));
        kir_acc_add(K, acc, kir_select(K, BIN(KB_AND, VAR(okv), first), contrib, kir_const_f(K, 0)));
    } else {
        kir_acc_add(K, acc, kir_select(K, VAR(okv), BIN(KB_DIV, contrib, kir_const_f(K, (double)(wd.k[0] * wd.k[1]))),
                                       kir_const_f(K, 0)));
    }
    close_n(b, 2);
    cg_nest nest;
    result_nest(b, &nest, xt, nc, h, w);
    cg_reset_cache(b);
    cg_emit_epilogue(b, n->out.v[0], VAR(acc));
    close_n(b, 3);
}

void cg_build_pool(cg_builder *b, const ir_node *n)
{
    switch (n->op) {
    case IR_OP_MAXPOOL:
    case IR_OP_AVGPOOL:
        pool_forward(b, n);
        return;
    case IR_OP_MAXPOOL_GRAD:
    case IR_OP_AVGPOOL_GRAD: {
        window wd;
        window_of(n, &wd);
        bool tiled = wd.s[0] == wd.k[0] && wd.s[1] == wd.k[1] && !wd.p[0] && !wd.p[1] && wd.k[0] * wd.k[1] <= 16 &&
                     b->grp->n == 1;
        if (tiled)
            pool_backward_tiled(b, n);
        else
            pool_backward(b, n);
        return;
    }
    default:
        kl_panic("no pooling kernel for %s", ir_op_name(n->op));
    }
}

/* ---- convolution's movements ---- */

/* col[(c, kh, kw), n, (oh, ow)] = x[n, c, oh s - p + kh d, ow s - p + kw d]
 * (0 in the padding): one row per kernel tap, so the convolution of the
 * whole batch is one GEMM, W[o, ckk] col[ckk, n hw]. col is a scratch
 * buffer (a negative id).
 *
 * Per output row and tap, the columns that read x are one constant range
 * [lo, hi) of ow, so the copy is a plain strided loop and the padding on
 * either side and the rows outside x are stored as zeros by loops of
 * their own: no clamped indices or selects, which keep gcc from
 * vectorising (measured 2-2.5x slower). */
void cg_build_im2col(cg_builder *b, const cg_conv *cv, int x, int col)
{
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bx = cg_buf(b, x), bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw);
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    int kh = kir_loop_begin(K, KL_PAR, cv->kh, "kh");
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int oh = kir_loop_begin(K, KL_PAR, cv->oh, "oh");
    int ih = kir_let(K, kir_iadd(K, kir_iadd(K, kir_imul(K, VAR(oh), cv->s[0]), I(-cv->p[0])), kir_imul(K, VAR(kh), cv->d[0])), "ih");
    for (int inside = 1; inside >= 0; inside--) {
        kir_expr *row_ok = in_range(b, VAR(ih), cv->h);
        kir_if_begin(K, inside ? row_ok : kir_un(K, KU_NOT, row_ok));
        int xrow = -1;
        if (inside) {
            kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
            xrow = kir_let(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(ih)), cv->w), "xrow");
        }
        for (int64_t kw = 0; kw < cv->kw; kw++) {
            /* iw = ow s + shift; x has it for ow in [lo, hi). */
            int64_t shift = kw * cv->d[1] - cv->p[1], st = cv->s[1];
            int64_t lo = shift >= 0 ? 0 : (-shift + st - 1) / st;
            int64_t hi = cv->w - 1 - shift < 0 ? 0 : (cv->w - 1 - shift) / st + 1;
            if (hi > cv->ow)
                hi = cv->ow;
            if (!inside || hi < lo)
                lo = hi = cv->ow;
            kir_expr *row = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(c), cv->kh), VAR(kh)), cv->kw), I(kw));
            int dst = kir_let(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, row, cv->n), VAR(n)), hw),
                                          kir_imul(K, VAR(oh), cv->ow)), "dst");
            int64_t zeros[2][2] = {{0, lo}, {hi, cv->ow}};
            for (int z = 0; z < 2; z++) {
                if (zeros[z][1] <= zeros[z][0])
                    continue;
                int i = kir_loop_begin(K, KL_PAR, zeros[z][1] - zeros[z][0], "i");
                kir_store(K, bc, kir_iadd(K, VAR(dst), kir_iadd(K, VAR(i), I(zeros[z][0]))), kir_const_f(K, 0));
                kir_loop_end(K);
            }
            if (hi > lo) {
                int i = kir_loop_begin(K, KL_PAR, hi - lo, "i");
                kir_expr *ow = kir_iadd(K, VAR(i), I(lo));
                kir_expr *src = kir_iadd(K, VAR(xrow), kir_iadd(K, kir_imul(K, ow, st), I(shift)));
                kir_store(K, bc, kir_iadd(K, VAR(dst), ow), kir_load(K, bx, src));
                kir_loop_end(K);
            }
        }
        kir_if_end(K);
    }
    close_n(b, 4);
}

/* col2im for stride 1: per input row, zero it, then add each tap's row
 * of col over the columns it covers. The covered ranges are constants,
 * so every inner loop reads and writes contiguously with no clamps (the
 * general version gathers through clamped indices). */
static void col2im_stride1(cg_builder *b, const cg_conv *cv, int col, int x)
{
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw), bx = cg_buf(b, x);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    int h = kir_loop_begin(K, KL_PAR, cv->h, "h");
    kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
    int xrow = kir_let(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(h)), cv->w), "xrow");
    int z = kir_loop_begin(K, KL_PAR, cv->w, "w");
    kir_store(K, bx, kir_iadd(K, VAR(xrow), VAR(z)), kir_const_f(K, 0));
    kir_loop_end(K);
    for (int64_t kh = 0; kh < cv->kh; kh++) {
        /* The output row whose tap kh lands on row h. */
        int oh = kir_let(K, kir_iadd(K, VAR(h), I(cv->p[0] - kh * cv->d[0])), "oh");
        kir_if_begin(K, in_range(b, VAR(oh), cv->oh));
        for (int64_t kw = 0; kw < cv->kw; kw++) {
            int64_t shift = cv->p[1] - kw * cv->d[1]; /* ow = w + shift */
            int64_t lo = shift < 0 ? -shift : 0, hi = cv->ow - shift < cv->w ? cv->ow - shift : cv->w;
            if (hi <= lo)
                continue;
            kir_expr *row = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(c), cv->kh), I(kh)), cv->kw), I(kw));
            int src = kir_let(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, row, cv->n), VAR(n)), hw),
                                          kir_imul(K, VAR(oh), cv->ow)), "src");
            int i = kir_loop_begin(K, KL_PAR, hi - lo, "i");
            kir_expr *w = kir_iadd(K, VAR(i), I(lo));
            kir_addto(K, bx, kir_iadd(K, VAR(xrow), w), kir_load(K, bc, kir_iadd(K, VAR(src), kir_iadd(K, w, I(shift)))));
            kir_loop_end(K);
        }
        kir_if_end(K);
    }
    close_n(b, 3);
}

/* x[n, c, h, w] = sum over (kh, kw) of col[(c, kh, kw), n, (oh, ow)] for the
 * outputs whose window puts (kh, kw) on (h, w). */
void cg_build_col2im(cg_builder *b, const cg_conv *cv, int col, int x)
{
    if (cv->s[0] == 1 && cv->s[1] == 1 && cv->kh * cv->kw <= 49) {
        col2im_stride1(b, cv, col, x);
        return;
    }
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw), bx = cg_buf(b, x);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    int h = kir_loop_begin(K, KL_PAR, cv->h, "h");
    int w = kir_loop_begin(K, KL_PAR, cv->w, "w");
    kir_expr *acc = NULL;
    int accv = -1;
    bool unroll = cv->kh * cv->kw <= 16;
    int kh = -1, kw = -1;
    if (!unroll) {
        kh = kir_loop_begin(K, KL_RED, cv->kh, "kh");
        accv = kir_loop_acc(K, KA_SUM, "acc");
        kw = kir_loop_begin(K, KL_RED, cv->kw, "kw");
    }
    for (int64_t i = 0; i < (unroll ? cv->kh : 1); i++) {
        for (int64_t j = 0; j < (unroll ? cv->kw : 1); j++) {
            kir_expr *khe = unroll ? I(i) : VAR(kh), *kwe = unroll ? I(j) : VAR(kw);
            int th = kir_let(K, kir_iadd(K, kir_iadd(K, VAR(h), I(cv->p[0])), kir_imul(K, khe, -cv->d[0])), "th");
            int tw = kir_let(K, kir_iadd(K, kir_iadd(K, VAR(w), I(cv->p[1])), kir_imul(K, kwe, -cv->d[1])), "tw");
            kir_expr *oh = cv->s[0] == 1 ? VAR(th) : BIN(KB_IDIV, VAR(th), I(cv->s[0]));
            kir_expr *ow = cv->s[1] == 1 ? VAR(tw) : BIN(KB_IDIV, VAR(tw), I(cv->s[1]));
            int ohv = kir_let(K, oh, "oh"), owv = kir_let(K, ow, "ow");
            kir_expr *ok = BIN(KB_AND, BIN(KB_GE, VAR(th), I(0)), BIN(KB_GE, VAR(tw), I(0)));
            if (cv->s[0] > 1)
                ok = BIN(KB_AND, ok, BIN(KB_EQ, BIN(KB_IMOD, VAR(th), I(cv->s[0])), I(0)));
            if (cv->s[1] > 1)
                ok = BIN(KB_AND, ok, BIN(KB_EQ, BIN(KB_IMOD, VAR(tw), I(cv->s[1])), I(0)));
            ok = BIN(KB_AND, ok, BIN(KB_AND, BIN(KB_LT, VAR(ohv), I(cv->oh)), BIN(KB_LT, VAR(owv), I(cv->ow))));
            kir_expr *row = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(c), cv->kh), khe), cv->kw), kwe);
            kir_expr *pos = kir_iadd(K, kir_imul(K, clamp(b, VAR(ohv), cv->oh), cv->ow), clamp(b, VAR(owv), cv->ow));
            kir_expr *src = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, row, cv->n), VAR(n)), hw), pos);
            kir_expr *v = kir_select(K, ok, kir_load(K, bc, src), kir_const_f(K, 0));
            if (unroll)
                acc = acc ? BIN(KB_ADD, acc, v) : v;
            else
                kir_acc_add(K, accv, v);
        }
    }
    if (!unroll) {
        close_n(b, 2);
        acc = VAR(accv);
    }
    kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(h)), cv->w), VAR(w));
    kir_store(K, bx, dst, acc);
    close_n(b, 4);
}

/* Swaps the two outer axes of [a, b, inner]: out[j, i, k] = in[i, j, k]. */
void cg_build_swap_outer(cg_builder *b, int from, int to, ir_dtype dt, int64_t a, int64_t bb, int64_t inner)
{
    K->work = a * bb * inner;
    int bi = kir_buf_add(K, from, dt, a * bb * inner), bo = kir_buf_add(K, to, dt, a * bb * inner);
    int j = kir_loop_begin(K, KL_PAR, bb, "j");
    int i = kir_loop_begin(K, KL_PAR, a, "i");
    int k = kir_loop_begin(K, KL_PAR, inner, "k");
    kir_expr *src = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(i), bb), VAR(j)), inner), VAR(k));
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(j), a), VAR(i)), inner), VAR(k));
    kir_store(K, bo, dst, kir_load(K, bi, src));
    close_n(b, 3);
}

/* ---- direct convolution, for few input taps (the first layer) ---- */

/* xpad[n, c, h + p, w + p] = x[n, c, h, w], 0 in the border, so the direct
 * kernels read without bounds checks. */
void cg_build_pad(cg_builder *b, const cg_conv *cv, int x, int xpad)
{
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    K->work = cv->n * cv->c * hp * wp;
    int bx = cg_buf(b, x), bp = kir_buf_add(K, xpad, ir_val(b->grp->g, x)->type.dtype, cv->n * cv->c * hp * wp);
    int nc = kir_loop_begin(K, KL_PAR, cv->n * cv->c, "nc");
    int h = kir_loop_begin(K, KL_PAR, hp, "h");
    int w = kir_loop_begin(K, KL_PAR, wp, "w");
    kir_expr *ih = kir_iadd(K, VAR(h), I(-cv->p[0])), *iw = kir_iadd(K, VAR(w), I(-cv->p[1]));
    kir_expr *valid = BIN(KB_AND, in_range(b, ih, cv->h), in_range(b, iw, cv->w));
    kir_expr *src = plane_index(b, &(ir_type){IR_F32, 4, {cv->n, cv->c, cv->h, cv->w}}, VAR(nc), clamp(b, ih, cv->h),
                                clamp(b, iw, cv->w));
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(nc), hp), VAR(h)), wp), VAR(w));
    kir_store(K, bp, dst, kir_select(K, valid, kir_load(K, bx, src), kir_const_f(K, 0)));
    close_n(b, 3);
}

/* The flat index of xpad[n, c, oh s + kh d, ow s + kw d]. */
static kir_expr *xpad_at(cg_builder *b, const cg_conv *cv, kir_expr *n, int64_t c, int64_t kh, int64_t kw, int oh, int ow)
{
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    kir_expr *plane = kir_iadd(K, kir_imul(K, n, cv->c), I(c));
    kir_expr *row = kir_iadd(K, kir_imul(K, VAR(oh), cv->s[0]), I(kh * cv->d[0]));
    kir_expr *col = kir_iadd(K, kir_imul(K, VAR(ow), cv->s[1]), I(kw * cv->d[1]));
    return kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, hp), row), wp), col);
}

/* y[n, o, oh, ow] = sum over taps of xpad[...] w[o, tap]: every tap
 * unrolled, the loop over ow the vectorised leaf. */
void cg_build_conv_direct(cg_builder *b, const cg_conv *cv, int xpad, int w, int y)
{
    int64_t taps = cv->c * cv->kh * cv->kw;
    K->work = cv->n * cv->o * cv->oh * cv->ow * taps;
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    int bp = kir_buf_add(K, xpad, cv->dtype, cv->n * cv->c * hp * wp), bw = cg_buf(b, w), by = cg_buf(b, y);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int o = kir_loop_begin(K, KL_PAR, cv->o, "o");
    int wt[64];
    for (int64_t t = 0; t < taps; t++)
        wt[t] = kir_let(K, kir_load(K, bw, kir_iadd(K, kir_imul(K, VAR(o), taps), I(t))), "wt");
    int oh = kir_loop_begin(K, KL_PAR, cv->oh, "oh");
    int ow = kir_loop_begin(K, KL_PAR, cv->ow, "ow");
    kir_expr *acc = NULL;
    for (int64_t c = 0, t = 0; c < cv->c; c++)
        for (int64_t kh = 0; kh < cv->kh; kh++)
            for (int64_t kw = 0; kw < cv->kw; kw++, t++) {
                kir_expr *term = BIN(KB_MUL, kir_load(K, bp, xpad_at(b, cv, VAR(n), c, kh, kw, oh, ow)), VAR(wt[t]));
                acc = acc ? BIN(KB_ADD, acc, term) : term;
            }
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(n), cv->o), VAR(o)), cv->oh), VAR(oh)),
                                         cv->ow), VAR(ow));
    kir_store(K, by, dst, acc);
    close_n(b, 4);
}

/* dw[o, tap] = sum over n, oh, ow of dy[n, o, oh, ow] xpad[n, tap...]:
 * one pass over dy per output channel, every tap a separate accumulator
 * of the same reduction. */
void cg_build_conv_direct_wgrad(cg_builder *b, const cg_conv *cv, int xpad, int dy, int dw)
{
    int64_t taps = cv->c * cv->kh * cv->kw;
    K->work = cv->n * cv->o * cv->oh * cv->ow * taps;
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    int bp = kir_buf_add(K, xpad, cv->dtype, cv->n * cv->c * hp * wp), bdy = cg_buf(b, dy), bdw = cg_buf(b, dw);
    int o = kir_loop_begin(K, KL_PAR, cv->o, "o");
    for (int64_t t0 = 0; t0 < taps; t0 += 16) {
        int64_t nt = taps - t0 < 16 ? taps - t0 : 16;
        int n = kir_loop_begin(K, KL_RED, cv->n, "n");
        int acc[16];
        for (int64_t t = 0; t < nt; t++)
            acc[t] = kir_loop_acc(K, KA_SUM, "acc");
        int oh = kir_loop_begin(K, KL_RED, cv->oh, "oh");
        int ow = kir_loop_begin(K, KL_RED, cv->ow, "ow");
        kir_expr *dyi = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(n), cv->o), VAR(o)), cv->oh),
                                                         VAR(oh)), cv->ow), VAR(ow));
        int d = kir_let(K, kir_load(K, bdy, dyi), "dy");
        for (int64_t t = 0; t < nt; t++) {
            int64_t tap = t0 + t, c = tap / (cv->kh * cv->kw), kh = tap / cv->kw % cv->kh, kw = tap % cv->kw;
            kir_acc_add(K, acc[t], BIN(KB_MUL, VAR(d), kir_load(K, bp, xpad_at(b, cv, VAR(n), c, kh, kw, oh, ow))));
        }
        close_n(b, 3);
        for (int64_t t = 0; t < nt; t++)
            kir_store(K, bdw, kir_iadd(K, kir_imul(K, VAR(o), taps), I(t0 + t)), VAR(acc[t]));
    }
    kir_loop_end(K);
}
