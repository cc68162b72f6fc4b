/* Reduction kernels: sum/mean/max over axes, sum_to, softmax and
 * log-softmax with their gradients, cross-entropy with its gradient, and
 * accuracy. Each reads its operands through cg_value_at, so elementwise
 * producers fused into the group are computed in place of the loads. */
#include <string.h>

#include "cg.h"

enum { KEPT = CG_KEPT, REDUCED = CG_REDUCED };

/* Whether value v is only tested for finiteness: not reported nor an
 * output, and each use an isfinite or an add whose result is only tested
 * so (the fp16 loss scale's check of the gradients' sums of squares
 * without clipping: passes/optimizer.c update_scale). */
static bool only_tested_finite(const ir_graph *g, int v, int depth)
{
    if (depth > 64)
        return false;
    for (int i = 0; i < g->reports.n; i++)
        if (g->reports.v[i].value == v)
            return false;
    for (int i = 0; i < g->outputs.n; i++)
        if (g->outputs.v[i].value == v)
            return false;
    const ir_value *val = ir_val(g, v);
    if (!val->uses.n)
        return false;
    for (int u = 0; u < val->uses.n; u++) {
        const ir_node *n = ir_nd(g, val->uses.v[u].node);
        if (n->op == IR_OP_ADD && n->out.n == 1 && only_tested_finite(g, n->out.v[0], depth + 1))
            continue;
        if (n->op != IR_OP_ISFINITE)
            return false;
    }
    return true;
}

/* sum, mean, max over axes and sum_to: kept dims PAR, reduced dims RED. */
static void build_axes_reduce(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    int x = n->in.v[0], y = n->out.v[0];
    const ir_type *xt = &ir_val(g, x)->type;
    int cls[IR_MAX_RANK] = {0};
    if (n->op == IR_OP_SUM_TO) {
        const ir_type *yt = &ir_val(g, y)->type;
        int off = xt->rank - yt->rank;
        for (int k = 0; k < xt->rank; k++)
            cls[k] = k < off || (yt->dim[k - off] == 1 && xt->dim[k] != 1) ? REDUCED : KEPT;
    } else {
        int64_t axes[IR_MAX_RANK];
        int na = ir_attr_ints(&n->attrs, "axis", axes, IR_MAX_RANK);
        for (int i = 0; i < na; i++)
            cls[axes[i]] = REDUCED;
    }
    cg_nest nest;
    cg_nest_init(b, &nest, xt, cls);
    b->k->work = ir_type_numel(xt);
    kir_acc_op op = n->op == IR_OP_MAX ? KA_MAX : KA_SUM;
    int acc;
    int outer = cg_open_class(b, KEPT, KL_PAR, NULL, 0, NULL);
    int inner = cg_open_class(b, REDUCED, KL_RED, &op, 1, &acc);
    /* A whole sum tested only for finiteness: any order of its terms
     * tells inf and NaN alike (apart from a total within rounding of
     * FLT_MAX), so the C printer may sum in independent lanes, where one
     * accumulator waits on each add. */
    if (n->op == IR_OP_SUM && inner == 1 && outer == 0 && only_tested_finite(g, y, 0))
        kir_loop_free_order(b->k);
    if (!inner) {
        /* Nothing to reduce (all reduced dims are 1): a copy. */
        acc = kir_let(b->k, kir_const_f(b->k, 0), "acc");
    }
    cg_reset_cache(b);
    if (inner)
        kir_acc_add(b->k, acc, cg_value_at(b, x));
    cg_close_loops(b, inner);
    kir_expr *r = inner ? kir_varref(b->k, acc) : cg_value_at(b, x);
    if (n->op == IR_OP_MEAN)
        r = kir_bin(b->k, KB_DIV, r, kir_const_f(b->k, (double)cg_class_size(&nest, REDUCED)));
    kir_store(b->k, cg_buf(b, y), cg_kept_index(b), r);
    cg_close_loops(b, outer);
    if (n->op != IR_OP_MAX && cg_column_lanes_fit(&nest)) {
        /* Over leading axes, on the CPU: the rows streamed, a vector lane
         * per column, where the form above reads a column at a time (a
         * stride of a row per element). The GPU keeps the form above: a
         * block (split: codegen/cuda_map.c) per output. */
        kir_begin_host_body(b->k);
        cg_build_column_lanes(b, x, y, n->op == IR_OP_MEAN ? (double)cg_class_size(&nest, REDUCED) : 1);
    }
}

/* softmax, log_softmax and their gradients along one axis. */
static void build_softmax(cg_builder *b, const ir_node *n)
{
    const ir_graph *g = b->grp->g;
    kir_kernel *k = b->k;
    int axis = (int)ir_attr_int(&n->attrs, "axis", -1);
    int x = n->in.v[0];
    const ir_type *xt = &ir_val(g, x)->type;
    int cls[IR_MAX_RANK] = {0};
    cls[axis] = REDUCED;
    cg_nest nest;
    cg_nest_init(b, &nest, xt, cls);
    k->work = ir_type_numel(xt);
    int y = n->out.v[0], by = cg_buf(b, y);
    int outer = cg_open_class(b, KEPT, KL_PAR, NULL, 0, NULL);
    int inner;
    if (n->op == IR_OP_SOFTMAX || n->op == IR_OP_LOG_SOFTMAX) {
        kir_acc_op mx = KA_MAX, sum = KA_SUM;
        int m = -1, s = -1;
        inner = cg_open_class(b, REDUCED, KL_RED, &mx, 1, &m);
        cg_reset_cache(b);
        kir_acc_add(k, m, cg_value_at(b, x));
        cg_close_loops(b, inner);
        inner = cg_open_class(b, REDUCED, KL_RED, &sum, 1, &s);
        cg_reset_cache(b);
        kir_acc_add(k, s, kir_un(k, KU_EXP_NONPOS, kir_bin(k, KB_SUB, cg_value_at(b, x), kir_varref(k, m))));
        cg_close_loops(b, inner);
        int ls = kir_let(k, kir_un(k, KU_LOG, kir_varref(k, s)), "logsum");
        inner = cg_open_class(b, REDUCED, KL_BPAR, NULL, 0, NULL);
        cg_reset_cache(b);
        kir_expr *shifted = kir_bin(k, KB_SUB, cg_value_at(b, x), kir_varref(k, m));
        kir_expr *r = n->op == IR_OP_SOFTMAX ? kir_bin(k, KB_DIV, kir_un(k, KU_EXP_NONPOS, shifted), kir_varref(k, s))
                                             : kir_bin(k, KB_SUB, shifted, kir_varref(k, ls));
        kir_store(k, by, cg_index(b, xt), r);
        cg_close_loops(b, inner);
    } else {
        /* softmax_grad: dx = y (dy - sum dy y); log_softmax_grad:
         * dx = dy - exp(y) sum dy. Operands (dy, y). */
        int dy = n->in.v[0], yv = n->in.v[1];
        bool lsm = n->op == IR_OP_LOG_SOFTMAX_GRAD;
        kir_acc_op sum = KA_SUM;
        int s = -1;
        inner = cg_open_class(b, REDUCED, KL_RED, &sum, 1, &s);
        cg_reset_cache(b);
        kir_acc_add(k, s, lsm ? cg_value_at(b, dy) : kir_bin(k, KB_MUL, cg_value_at(b, dy), cg_value_at(b, yv)));
        cg_close_loops(b, inner);
        inner = cg_open_class(b, REDUCED, KL_BPAR, NULL, 0, NULL);
        cg_reset_cache(b);
        kir_expr *r = lsm ? kir_bin(k, KB_SUB, cg_value_at(b, dy), kir_bin(k, KB_MUL, kir_un(k, KU_EXP_NONPOS, cg_value_at(b, yv)), kir_varref(k, s)))
                          : kir_bin(k, KB_MUL, cg_value_at(b, yv), kir_bin(k, KB_SUB, cg_value_at(b, dy), kir_varref(k, s)));
        kir_store(k, by, cg_index(b, xt), r);
        cg_close_loops(b, inner);
    }
    cg_close_loops(b, outer);
}

/* The label of row var i, clamped into [0, C) so a bad label cannot read
 * out of bounds (the data loader rejects such labels before this). */
static int label_of(cg_builder *b, int labels, int row_var, int64_t classes)
{
    kir_kernel *k = b->k;
    kir_expr *l = kir_load(k, cg_buf(b, labels), kir_varref(k, row_var));
    l = kir_bin(k, KB_MAX, kir_const_i(k, 0), kir_bin(k, KB_MIN, l, kir_const_i(k, classes - 1)));
    return kir_let(k, l, "label");
}

/* Whether row var i's label is not n's ignore_index (true when n has none). */
static kir_expr *row_kept(cg_builder *b, const ir_node *n, int labels, int row_var)
{
    kir_kernel *k = b->k;
    if (!n || !ir_attrs_find(&n->attrs, "ignore_index"))
        return NULL;
    kir_expr *l = kir_load(k, cg_buf(b, labels), kir_varref(k, row_var));
    return kir_bin(k, KB_NE, l, kir_const_i(k, ir_attr_int(&n->attrs, "ignore_index", 0)));
}

/* cross_entropy, accuracy and cross_entropy_grad over logits [N, C]: any
 * of them that share the logits and labels (the softmax_cross_entropy
 * fusion) in one pass per row: max, sum of exponentials, then the loss
 * term, the accuracy test and the gradient row. With ignore_index, a row
 * with that label adds nothing to the loss and gets a zero gradient row,
 * and the mean is over the rows kept (counted here for the loss; the
 * gradient reads the count as its fourth operand). */
static void build_logits(cg_builder *b)
{
    const cg_group *grp = b->grp;
    const ir_graph *g = grp->g;
    kir_kernel *k = b->k;
    const ir_node *ce = NULL, *acc = NULL, *grad = NULL;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        if (n->op == IR_OP_CROSS_ENTROPY)
            ce = n;
        else if (n->op == IR_OP_ACCURACY)
            acc = n;
        else if (n->op == IR_OP_CROSS_ENTROPY_GRAD)
            grad = n;
    }
    const ir_node *any = ce ? ce : acc ? acc : grad;
    int logits = any->in.v[any == grad ? 1 : 0], labels = any->in.v[any == grad ? 2 : 1];
    const ir_type *lt = &ir_val(g, logits)->type;
    int64_t rows = lt->dim[0], classes = lt->dim[1];
    int cls[2] = {KEPT, REDUCED};
    cg_nest nest;
    cg_nest_init(b, &nest, lt, cls);
    /* Keep both dims even when one is 1, so the vars below exist. */
    nest.rank = 2;
    nest.dim[0] = rows;
    nest.dim[1] = classes;
    nest.cls[0] = KEPT;
    nest.cls[1] = REDUCED;
    nest.map[0] = 0;
    nest.map[1] = 1;
    k->work = ir_type_numel(lt);
    int loss_sum = -1, correct = -1, kept_sum = -1, i;
    bool ce_ignores = ce && ir_attrs_find(&ce->attrs, "ignore_index");
    if (ce || acc) {
        i = kir_loop_begin(k, KL_RED, rows, "n");
        if (ce)
            loss_sum = kir_loop_acc(k, KA_SUM, "loss");
        if (ce_ignores)
            kept_sum = kir_loop_acc(k, KA_SUM, "kept");
        if (acc)
            correct = kir_loop_acc(k, KA_SUM, "correct");
    } else {
        i = kir_loop_begin(k, KL_PAR, rows, "n");
    }
    nest.var[0] = i;
    int label = label_of(b, labels, i, classes);
    nest.var[1] = label;
    cg_reset_cache(b);
    int xl = kir_let(k, cg_value_at(b, logits), "xl");
    int m = -1, s = -1, c;
    if (ce || grad) {
        c = kir_loop_begin(k, KL_RED, classes, "c");
        m = kir_loop_acc(k, KA_MAX, "m");
        nest.var[1] = c;
        cg_reset_cache(b);
        kir_acc_add(k, m, cg_value_at(b, logits));
        kir_loop_end(k);
        c = kir_loop_begin(k, KL_RED, classes, "c");
        s = kir_loop_acc(k, KA_SUM, "s");
        nest.var[1] = c;
        cg_reset_cache(b);
        kir_acc_add(k, s, kir_un(k, KU_EXP_NONPOS, kir_bin(k, KB_SUB, cg_value_at(b, logits), kir_varref(k, m))));
        kir_loop_end(k);
    }
    if (ce) { /* loss_n = log sum exp - x[label] */
        kir_expr *term = kir_bin(k, KB_SUB, kir_bin(k, KB_ADD, kir_un(k, KU_LOG, kir_varref(k, s)), kir_varref(k, m)),
                                 kir_varref(k, xl));
        kir_expr *keep = row_kept(b, ce, labels, i);
        if (keep) {
            int kv = kir_let(k, keep, "keep");
            term = kir_select(k, kir_varref(k, kv), term, kir_const_f(k, 0));
            kir_acc_add(k, kept_sum, kir_select(k, kir_varref(k, kv), kir_const_f(k, 1), kir_const_f(k, 0)));
        }
        kir_acc_add(k, loss_sum, term);
    }
    if (acc) {
        /* Correct when the label's logit is the first maximum: no class
         * before it reaches it and none after it exceeds it. */
        c = kir_loop_begin(k, KL_RED, classes, "c");
        int beats = kir_loop_acc(k, KA_SUM, "beats");
        nest.var[1] = c;
        cg_reset_cache(b);
        kir_expr *xc = cg_value_at(b, logits);
        kir_expr *before = kir_bin(k, KB_AND, kir_bin(k, KB_LT, kir_varref(k, c), kir_varref(k, label)),
                                   kir_bin(k, KB_GE, xc, kir_varref(k, xl)));
        kir_expr *after = kir_bin(k, KB_AND, kir_bin(k, KB_GT, kir_varref(k, c), kir_varref(k, label)),
                                  kir_bin(k, KB_GT, xc, kir_varref(k, xl)));
        kir_acc_add(k, beats, kir_select(k, kir_bin(k, KB_OR, before, after), kir_const_f(k, 1), kir_const_f(k, 0)));
        kir_loop_end(k);
        kir_acc_add(k, correct, kir_select(k, kir_bin(k, KB_EQ, kir_varref(k, beats), kir_const_f(k, 0)),
                                           kir_const_f(k, 1), kir_const_f(k, 0)));
    }
    if (grad) {
        /* dlogits = (softmax - onehot) * dloss / N */
        kir_expr *count = grad->in.n == 4 ? cg_scalar(b, grad->in.v[3]) : kir_const_f(k, (double)rows);
        int scale = kir_let(k, kir_bin(k, KB_DIV, cg_scalar(b, grad->in.v[0]), count), "scale");
        kir_expr *keep = row_kept(b, grad, labels, i);
        if (keep)
            keep = kir_varref(k, kir_let(k, keep, "keep"));
        int inv = kir_let(k, kir_bin(k, KB_DIV, kir_const_f(k, 1), kir_varref(k, s)), "inv");
        c = kir_loop_begin(k, KL_BPAR, classes, "c");
        nest.var[1] = c;
        cg_reset_cache(b);
        kir_expr *p = kir_bin(k, KB_MUL, kir_un(k, KU_EXP_NONPOS, kir_bin(k, KB_SUB, cg_value_at(b, logits), kir_varref(k, m))),
                              kir_varref(k, inv));
        kir_expr *hot = kir_select(k, kir_bin(k, KB_EQ, kir_varref(k, c), kir_varref(k, label)), kir_const_f(k, 1),
                                   kir_const_f(k, 0));
        kir_expr *d = kir_bin(k, KB_MUL, kir_bin(k, KB_SUB, p, hot), kir_varref(k, scale));
        if (keep)
            d = kir_select(k, keep, d, kir_const_f(k, 0));
        kir_store(k, cg_buf(b, grad->out.v[0]), cg_index(b, lt), d);
        kir_loop_end(k);
    }
    kir_loop_end(k);
    if (ce)
        kir_store(k, cg_buf(b, ce->out.v[0]), kir_const_i(k, 0),
                  kir_bin(k, KB_DIV, kir_varref(k, loss_sum),
                          ce_ignores ? kir_varref(k, kept_sum) : kir_const_f(k, (double)rows)));
    if (acc)
        kir_store(k, cg_buf(b, acc->out.v[0]), kir_const_i(k, 0), kir_bin(k, KB_DIV, kir_varref(k, correct), kir_const_f(k, (double)rows)));
}

/* Full sums of several values in one kernel (the grad_norms pattern),
 * one after the other, each over its value's elements in order: a nest
 * of one REDUCED dim per value, its fused producers computed at each
 * load. */
static void build_full_sums(cg_builder *b)
{
    const cg_group *grp = b->grp;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(grp->g, grp->nodes[i]);
        if (n->op != IR_OP_SUM)
            continue;
        const ir_type *xt = &ir_val(grp->g, n->in.v[0])->type;
        cg_nest nest;
        memset(&nest, 0, sizeof nest);
        nest.domain = *xt;
        nest.rank = 1;
        nest.dim[0] = ir_type_numel(xt);
        nest.cls[0] = REDUCED;
        b->nest = &nest;
        b->k->work += nest.dim[0];
        kir_acc_op op = KA_SUM;
        int acc;
        int inner = cg_open_class(b, REDUCED, KL_RED, &op, 1, &acc);
        if (inner == 1 && only_tested_finite(grp->g, n->out.v[0], 0))
            kir_loop_free_order(b->k);
        cg_reset_cache(b);
        kir_acc_add(b->k, acc, cg_value_at(b, n->in.v[0]));
        cg_close_loops(b, inner);
        kir_store(b->k, cg_buf(b, n->out.v[0]), kir_const_i(b->k, 0), kir_varref(b->k, acc));
        cg_reset_cache(b);
    }
}

static int count_sums(const cg_group *grp)
{
    int c = 0;
    for (int i = 0; i < grp->n; i++)
        c += ir_nd(grp->g, grp->nodes[i])->op == IR_OP_SUM;
    return c;
}

void cg_build_reduce(cg_builder *b, const ir_node *n)
{
    if (n->op == IR_OP_SUM && count_sums(b->grp) > 1) {
        build_full_sums(b);
        return;
    }
    switch (n->op) {
    case IR_OP_SUM:
    case IR_OP_MEAN:
    case IR_OP_MAX:
    case IR_OP_SUM_TO:
        build_axes_reduce(b, n);
        return;
    case IR_OP_SOFTMAX:
    case IR_OP_LOG_SOFTMAX:
    case IR_OP_SOFTMAX_GRAD:
    case IR_OP_LOG_SOFTMAX_GRAD:
        build_softmax(b, n);
        return;
    case IR_OP_CROSS_ENTROPY:
    case IR_OP_CROSS_ENTROPY_GRAD:
    case IR_OP_ACCURACY:
        build_logits(b);
        return;
    default:
        kl_panic("no reduction kernel for %s", ir_op_name(n->op));
    }
}
