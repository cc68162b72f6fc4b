/* Normalisation kernels: batch norm (training and inference) and layer
 * norm, forward and backward, each one kernel.
 *
 * Batch norm forward (training) reads x twice: one pass for the
 * statistics (sums of x - x0 and its square, shifted by the channel's
 * first value so the variance does not cancel), one to normalise. The
 * normalised value goes through cg_emit_epilogue, so a following
 * activation (relu) is applied before the single store. The backward
 * kernel reads its dy through cg_value_at, so the activation's backward
 * (relu_grad) is computed in place of a load: the fused batch norm. */
#include "cg.h"

enum { KEPT = CG_KEPT, REDUCED = CG_REDUCED };

/* Points every REDUCED group of the nest at index 0. */
static void at_first(cg_builder *b)
{
    int zero = kir_let(b->k, kir_const_i(b->k, 0), "z");
    for (int j = 0; j < b->nest->rank; j++)
        if (b->nest->cls[j] == REDUCED)
            b->nest->var[j] = zero;
    cg_reset_cache(b);
}

static kir_expr *load_at(cg_builder *b, int v, kir_expr *idx)
{
    return kir_load(b->k, cg_buf(b, v), idx);
}

#define K (b->k)
#define BIN(op, x, y) kir_bin(K, op, x, y)
#define VAR(v) kir_varref(K, v)
#define F(x) kir_const_f(K, x)

/* Sets up a nest over x: the channel (dim 1) KEPT, the rest REDUCED for
 * batch norm; the last dim REDUCED for layer norm. */
static void norm_nest(cg_builder *b, cg_nest *nest, const ir_type *xt, bool batch)
{
    int cls[IR_MAX_RANK];
    for (int k = 0; k < xt->rank; k++)
        cls[k] = batch ? (k == 1 ? KEPT : REDUCED) : (k == xt->rank - 1 ? REDUCED : KEPT);
    cg_nest_init(b, nest, xt, cls);
    K->work = ir_type_numel(xt);
}

/* mean and invstd over the REDUCED dims at the current KEPT position. */
static void statistics(cg_builder *b, int x, double eps, int *mean, int *var, int *invstd)
{
    cg_nest *nest = b->nest;
    double m = (double)cg_class_size(nest, REDUCED);
    at_first(b);
    int x0 = kir_let(K, cg_value_at(b, x), "x0");
    kir_acc_op ops[2] = {KA_SUM, KA_SUM};
    int accs[2] = {-1, -1};
    int n = cg_open_class(b, REDUCED, KL_RED, ops, 2, accs);
    cg_reset_cache(b);
    int d = kir_let(K, BIN(KB_SUB, cg_value_at(b, x), VAR(x0)), "d");
    kir_acc_add(K, accs[0], VAR(d));
    kir_acc_add(K, accs[1], BIN(KB_MUL, VAR(d), VAR(d)));
    cg_close_loops(b, n);
    (void)nest;
    int md = kir_let(K, BIN(KB_DIV, VAR(accs[0]), F(m)), "md");
    *var = kir_let(K, BIN(KB_MAX, F(0), BIN(KB_SUB, BIN(KB_DIV, VAR(accs[1]), F(m)), BIN(KB_MUL, VAR(md), VAR(md)))), "var");
    *mean = kir_let(K, BIN(KB_ADD, VAR(x0), VAR(md)), "mean");
    *invstd = kir_let(K, kir_un(K, KU_RSQRT, BIN(KB_ADD, VAR(*var), F(eps))), "invstd");
}

static void batchnorm_forward(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int x = n->in.v[0], gamma = n->in.v[1], beta = n->in.v[2], rm = n->in.v[3], rv = n->in.v[4];
    const ir_type *xt = &ir_val(g, x)->type;
    double eps = ir_attr_float(&n->attrs, "eps", 1e-5), mom = ir_attr_float(&n->attrs, "momentum", 0.1);
    cg_nest nest;
    norm_nest(b, &nest, xt, true);
    int outer = cg_open_class(b, KEPT, KL_PAR, NULL, 0, NULL);
    kir_expr *c = cg_kept_index(b);
    int cv = kir_let(K, c, "ch");
    int a, sh;
    if (n->op == IR_OP_BATCHNORM) {
        int mean, var, invstd;
        statistics(b, x, eps, &mean, &var, &invstd);
        double m = (double)cg_class_size(&nest, REDUCED);
        kir_store(K, cg_buf(b, n->out.v[1]), VAR(cv), VAR(mean));
        kir_store(K, cg_buf(b, n->out.v[2]), VAR(cv), VAR(invstd));
        /* Running statistics, with the unbiased variance. */
        kir_store(K, cg_buf(b, rm), VAR(cv), BIN(KB_ADD, BIN(KB_MUL, F(1 - mom), load_at(b, rm, VAR(cv))), BIN(KB_MUL, F(mom), VAR(mean))));
        kir_store(K, cg_buf(b, rv), VAR(cv), BIN(KB_ADD, BIN(KB_MUL, F(1 - mom), load_at(b, rv, VAR(cv))),
                                                  BIN(KB_MUL, F(mom * m / (m > 1 ? m - 1 : 1)), VAR(var))));
        a = kir_let(K, BIN(KB_MUL, load_at(b, gamma, VAR(cv)), VAR(invstd)), "a");
        sh = kir_let(K, BIN(KB_SUB, load_at(b, beta, VAR(cv)), BIN(KB_MUL, VAR(mean), VAR(a))), "sh");
    } else if (n->op == IR_OP_BATCHNORM_APPLY) {
        /* The statistics batch norm stored (operands 3 and 4), through the
         * same expressions: the same result bit for bit (f32 statistics). */
        int mean = kir_let(K, load_at(b, rm, VAR(cv)), "mean"), invstd = kir_let(K, load_at(b, rv, VAR(cv)), "invstd");
        a = kir_let(K, BIN(KB_MUL, load_at(b, gamma, VAR(cv)), VAR(invstd)), "a");
        sh = kir_let(K, BIN(KB_SUB, load_at(b, beta, VAR(cv)), BIN(KB_MUL, VAR(mean), VAR(a))), "sh");
    } else {
        int invstd = kir_let(K, kir_un(K, KU_RSQRT, BIN(KB_ADD, load_at(b, rv, VAR(cv)), F(eps))), "invstd");
        a = kir_let(K, BIN(KB_MUL, load_at(b, gamma, VAR(cv)), VAR(invstd)), "a");
        sh = kir_let(K, BIN(KB_SUB, load_at(b, beta, VAR(cv)), BIN(KB_MUL, load_at(b, rm, VAR(cv)), VAR(a))), "sh");
    }
    int inner = cg_open_class(b, REDUCED, KL_BPAR, NULL, 0, NULL);
    cg_reset_cache(b);
    cg_emit_epilogue(b, n->out.v[0], BIN(KB_ADD, BIN(KB_MUL, cg_value_at(b, x), VAR(a)), VAR(sh)));
    cg_close_loops(b, inner);
    cg_close_loops(b, outer);
}

/* dx = gamma invstd / M (M dy - sum dy - xhat sum(dy xhat)),
 * dgamma = sum(dy xhat), dbeta = sum dy; xhat = (x - mean) invstd. */
static void batchnorm_backward(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int dy = n->in.v[0], x = n->in.v[1], gamma = n->in.v[2], mean = n->in.v[3], invstd = n->in.v[4];
    const ir_type *xt = &ir_val(g, x)->type;
    cg_nest nest;
    norm_nest(b, &nest, xt, true);
    double m = (double)cg_class_size(&nest, REDUCED);
    int outer = cg_open_class(b, KEPT, KL_PAR, NULL, 0, NULL);
    int cv = kir_let(K, cg_kept_index(b), "ch");
    int mu = kir_let(K, load_at(b, mean, VAR(cv)), "mu"), is = kir_let(K, load_at(b, invstd, VAR(cv)), "is");
    kir_acc_op ops[2] = {KA_SUM, KA_SUM};
    int accs[2] = {-1, -1};
    int inner = cg_open_class(b, REDUCED, KL_RED, ops, 2, accs);
    cg_reset_cache(b);
    int d = kir_let(K, cg_value_at(b, dy), "dy");
    kir_acc_add(K, accs[0], VAR(d));
    kir_acc_add(K, accs[1], BIN(KB_MUL, VAR(d), BIN(KB_SUB, cg_value_at(b, x), VAR(mu))));
    cg_close_loops(b, inner);
    int sdyx = kir_let(K, BIN(KB_MUL, VAR(accs[1]), VAR(is)), "sdyx"); /* sum(dy xhat) */
    kir_store(K, cg_buf(b, n->out.v[1]), VAR(cv), VAR(sdyx));
    kir_store(K, cg_buf(b, n->out.v[2]), VAR(cv), VAR(accs[0]));
    int k1 = kir_let(K, BIN(KB_DIV, BIN(KB_MUL, load_at(b, gamma, VAR(cv)), VAR(is)), F(m)), "k1");
    inner = cg_open_class(b, REDUCED, KL_BPAR, NULL, 0, NULL);
    cg_reset_cache(b);
    kir_expr *xhat = BIN(KB_MUL, BIN(KB_SUB, cg_value_at(b, x), VAR(mu)), VAR(is));
    kir_expr *dx = BIN(KB_MUL, VAR(k1), BIN(KB_SUB, BIN(KB_SUB, BIN(KB_MUL, F(m), cg_value_at(b, dy)), VAR(accs[0])),
                                         BIN(KB_MUL, xhat, VAR(sdyx))));
    cg_emit_epilogue(b, n->out.v[0], dx);
    cg_close_loops(b, inner);
    cg_close_loops(b, outer);
}

static void layernorm_forward(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int x = n->in.v[0], gamma = n->in.v[1], beta = n->in.v[2];
    const ir_type *xt = &ir_val(g, x)->type;
    double eps = ir_attr_float(&n->attrs, "eps", 1e-5);
    cg_nest nest;
    norm_nest(b, &nest, xt, false);
    int outer = cg_open_class(b, KEPT, KL_PAR, NULL, 0, NULL);
    int row = kir_let(K, cg_kept_index(b), "row");
    int mean, var, invstd;
    statistics(b, x, eps, &mean, &var, &invstd);
    kir_store(K, cg_buf(b, n->out.v[1]), VAR(row), VAR(mean));
    kir_store(K, cg_buf(b, n->out.v[2]), VAR(row), VAR(invstd));
    int inner = cg_open_class(b, REDUCED, KL_BPAR, NULL, 0, NULL);
    cg_reset_cache(b);
    kir_expr *d = cg_dim_index(b, xt->rank - 1);
    kir_expr *y = BIN(KB_ADD, BIN(KB_MUL, BIN(KB_MUL, BIN(KB_SUB, cg_value_at(b, x), VAR(mean)), VAR(invstd)), load_at(b, gamma, d)),
                      load_at(b, beta, d));
    cg_emit_epilogue(b, n->out.v[0], y);
    cg_close_loops(b, inner);
    cg_close_loops(b, outer);
}

/* dx = invstd / D (D g - sum g - xhat sum(g xhat)), g = dy gamma: a nest
 * over rows. */
static void layernorm_backward_rows(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int dy = n->in.v[0], x = n->in.v[1], gamma = n->in.v[2], mean = n->in.v[3], invstd = n->in.v[4];
    const ir_type *xt = &ir_val(g, x)->type;
    int64_t dim = xt->dim[xt->rank - 1];
    cg_nest nest;
    norm_nest(b, &nest, xt, false);
    int outer = cg_open_class(b, KEPT, KL_PAR, NULL, 0, NULL);
    int row = kir_let(K, cg_kept_index(b), "row");
    int mu = kir_let(K, load_at(b, mean, VAR(row)), "mu"), is = kir_let(K, load_at(b, invstd, VAR(row)), "is");
    kir_acc_op ops[2] = {KA_SUM, KA_SUM};
    int accs[2] = {-1, -1};
    int inner = cg_open_class(b, REDUCED, KL_RED, ops, 2, accs);
    cg_reset_cache(b);
    kir_expr *gd = BIN(KB_MUL, cg_value_at(b, dy), load_at(b, gamma, cg_dim_index(b, xt->rank - 1)));
    int gv = kir_let(K, gd, "g");
    kir_acc_add(K, accs[0], VAR(gv));
    kir_acc_add(K, accs[1], BIN(KB_MUL, VAR(gv), BIN(KB_MUL, BIN(KB_SUB, cg_value_at(b, x), VAR(mu)), VAR(is))));
    cg_close_loops(b, inner);
    inner = cg_open_class(b, REDUCED, KL_BPAR, NULL, 0, NULL);
    cg_reset_cache(b);
    kir_expr *xhat = BIN(KB_MUL, BIN(KB_SUB, cg_value_at(b, x), VAR(mu)), VAR(is));
    kir_expr *gval = BIN(KB_MUL, cg_value_at(b, dy), load_at(b, gamma, cg_dim_index(b, xt->rank - 1)));
    kir_expr *dx = BIN(KB_MUL, BIN(KB_DIV, VAR(is), F((double)dim)),
                       BIN(KB_SUB, BIN(KB_SUB, BIN(KB_MUL, F((double)dim), gval), VAR(accs[0])), BIN(KB_MUL, xhat, VAR(accs[1]))));
    cg_emit_epilogue(b, n->out.v[0], dx);
    cg_close_loops(b, inner);
    cg_close_loops(b, outer);
}

typedef struct param_terms {
    int dy, x, mean, invstd; /* buffers */
    int64_t dim;
} param_terms;

/* dy and dy xhat at row r, feature col: the terms of dbeta and dgamma. */
static void layernorm_param_terms(cg_builder *b, int r, int col, void *arg, kir_expr **out)
{
    const param_terms *t = arg;
    kir_expr *idx = kir_iadd(K, kir_imul(K, VAR(r), t->dim), VAR(col));
    int dyv = kir_let(K, kir_load(K, t->dy, idx), "dy");
    kir_expr *xh = BIN(KB_MUL, BIN(KB_SUB, kir_load(K, t->x, idx), kir_load(K, t->mean, VAR(r))), kir_load(K, t->invstd, VAR(r)));
    out[0] = BIN(KB_MUL, VAR(dyv), xh);
    out[1] = VAR(dyv);
}

/* dx (layernorm_backward_rows); then dgamma = sum over rows of dy xhat,
 * dbeta = sum over rows of dy (a second nest): a reduction per feature,
 * and on the CPU (the host body) the rows streamed with a vector lane per
 * feature, as sum_to over leading axes (codegen/k_colsum.c). */
static void layernorm_backward(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int dy = n->in.v[0], x = n->in.v[1], mean = n->in.v[3], invstd = n->in.v[4];
    const ir_type *xt = &ir_val(g, x)->type;
    int64_t dim = xt->dim[xt->rank - 1], rows = ir_type_numel(xt) / dim;
    layernorm_backward_rows(b, n);
    int dgb = cg_buf(b, n->out.v[1]), dbb = cg_buf(b, n->out.v[2]);
    int bdy = cg_buf(b, dy), bx = cg_buf(b, x), bmean = cg_buf(b, mean), binv = cg_buf(b, invstd);
    param_terms t = {bdy, bx, bmean, binv, dim};
    int dv = kir_loop_begin(K, KL_PAR, dim, "d");
    int r = kir_loop_begin(K, KL_RED, rows, "r");
    int sg = kir_loop_acc(K, KA_SUM, "sg"), sb = kir_loop_acc(K, KA_SUM, "sb");
    kir_expr *term[2];
    layernorm_param_terms(b, r, dv, &t, term);
    kir_acc_add(K, sg, term[0]);
    kir_acc_add(K, sb, term[1]);
    kir_loop_end(K);
    kir_store(K, dgb, VAR(dv), VAR(sg));
    kir_store(K, dbb, VAR(dv), VAR(sb));
    kir_loop_end(K);
    if (cg_lane_width(dim) >= 4) {
        kir_begin_host_body(K);
        layernorm_backward_rows(b, n);
        int dst[2] = {dgb, dbb};
        cg_column_lanes(b, rows, dim, 2, dst, 1, layernorm_param_terms, &t);
    }
}

void cg_build_norm(cg_builder *b, const ir_node *n)
{
    switch (n->op) {
    case IR_OP_BATCHNORM:
    case IR_OP_BATCHNORM_INFER:
    case IR_OP_BATCHNORM_APPLY:
        batchnorm_forward(b, n);
        return;
    case IR_OP_BATCHNORM_GRAD:
        batchnorm_backward(b, n);
        return;
    case IR_OP_LAYERNORM:
        layernorm_forward(b, n);
        return;
    case IR_OP_LAYERNORM_GRAD:
        layernorm_backward(b, n);
        return;
    default:
        kl_panic("no norm kernel for %s", ir_op_name(n->op));
    }
}
