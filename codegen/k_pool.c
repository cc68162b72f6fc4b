/* Window kernels: max and average pooling forward and backward (the
 * movements of convolution are k_conv.c).
 *
 * Reads outside the input (padding) use a clamped index and a validity
 * mask, so no lane ever loads out of bounds, vectorised or not. Backward
 * kernels gather (each input element sums the windows that cover it), so
 * they need no atomics and parallelise over the input. */
#include "k_window.h"

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

/* Opens PAR loops over [N*C, H, W] of t; vars out (nc, h, w). */
static void open_planes(cg_builder *b, const ir_type *t, int *nc, int *h, int *w)
{
    *nc = kir_loop_begin(K, KL_PAR, t->dim[0] * t->dim[1], "nc");
    *h = kir_loop_begin(K, KL_PAR, t->dim[2], "h");
    *w = kir_loop_begin(K, KL_PAR, t->dim[3], "w");
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
    /* fp16 max pooling widens nothing on the CPU: its maximum and store
     * are on the 16-bit patterns (codegen/print_expr.c print_bits16). */
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

/* For input position (h, w): the window positions (kh, kw) that can
 * cover it are those with h + p - kh a multiple of the stride, kh =
 * (h + p) mod s + j s for j < ceil(k / s) (and the same for w), in
 * increasing order: the loops visit only these, not all k of them, and
 * sum the same contributions in the same order as a loop over every kh
 * that adds 0 for the others (acc starts at +0, and x + 0 = x for every
 * x but -0, which a sum from +0 never reaches). Opens the loop over j on
 * one axis (var out j) and returns r = (h + p) mod s; covering_pos gives
 * kh = r + j s inside it. */
static int covering_loop(cg_builder *b, int64_t k, int64_t s, int64_t p, int h, const char *jname, int *j)
{
    int r = kir_let(K, BIN(KB_IMOD, kir_iadd(K, VAR(h), I(p)), I(s)), "r");
    *j = kir_loop_begin(K, KL_RED, (k + s - 1) / s, jname);
    return r;
}

static int covering_pos(cg_builder *b, int r, int j, int64_t s, const char *name)
{
    return kir_let(K, kir_iadd(K, VAR(r), kir_imul(K, VAR(j), s)), name);
}

/* For input position (h, w) and window position (kh, kw) of
 * covering_loop: the output (oh, ow) it lies in, and whether it is a
 * window position at all (kh < k) and an output (0 <= oh < OH). */
static kir_expr *covering(cg_builder *b, const window *wd, const ir_type *yt, int h, int w, int kh, int kw, int *ohv, int *owv)
{
    kir_expr *th = kir_iadd(K, kir_iadd(K, VAR(h), I(wd->p[0])), kir_un(K, KU_NEG, VAR(kh)));
    kir_expr *tw = kir_iadd(K, kir_iadd(K, VAR(w), I(wd->p[1])), kir_un(K, KU_NEG, VAR(kw)));
    int thv = kir_let(K, th, "th"), twv = kir_let(K, tw, "tw");
    kir_expr *oh = BIN(KB_IDIV, VAR(thv), I(wd->s[0])), *ow = BIN(KB_IDIV, VAR(twv), I(wd->s[1]));
    *ohv = kir_let(K, oh, "oh");
    *owv = kir_let(K, ow, "ow");
    kir_expr *ok = BIN(KB_AND, BIN(KB_GE, VAR(thv), I(0)), BIN(KB_GE, VAR(twv), I(0)));
    ok = BIN(KB_AND, ok, BIN(KB_LT, VAR(kh), I(wd->k[0])));
    ok = BIN(KB_AND, ok, BIN(KB_LT, VAR(kw), I(wd->k[1])));
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
    /* Max pooling's backward compares x with y and stores dy: on the
     * CPU in fp16 on the 16-bit patterns (print_bits16) where it stores
     * dy's own bits (non-overlapping windows); where windows overlap it
     * sums dy in floats, widened with F16C (GCC keeps these loops
     * scalar, where F16C costs the least). */
    K->scalar_f16 = pg->is_max;
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
    int jh, jw;
    int rh = covering_loop(b, wd.k[0], wd.s[0], wd.p[0], h, "jh", &jh);
    int acc = kir_loop_acc(K, KA_SUM, "acc");
    int rw = covering_loop(b, wd.k[1], wd.s[1], wd.p[1], w, "jw", &jw);
    int kh = covering_pos(b, rh, jh, wd.s[0], "kh"), kw = covering_pos(b, rw, jw, wd.s[1], "kw");
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
