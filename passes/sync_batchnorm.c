/* sync_batchnorm: batch norm's batch statistics over every data-parallel
 * rank's rows (training).
 *
 * requires: lower (and tensor_parallel: the data-parallel world is
 *           ranks / tensor_parallel); before autodiff
 * provides: with sync_batchnorm = true and D > 1 data-parallel ranks,
 *           every batchnorm(x, gamma, beta, running_mean, running_var)
 *           computed from elementwise ops, sums and two all_reduce sums
 *           (ranks = D): mean = all_reduce(sum x) / (D n), var =
 *           all_reduce(sum (x - mean)^2) / (D n) (n: the elements per
 *           channel on one rank), y = (x - mean) rsqrt(var + eps) gamma
 *           + beta. An all_reduce over the data-parallel ranks has the
 *           all_reduce of dy as its gradient (ir/grad.c: the ranks'
 *           losses add up), so backward carries the statistics' gradient
 *           terms of every rank: D ranks compute what one rank with the
 *           global batch computes. The running statistics are updated
 *           with the global ones by a batchnorm of two rows per channel,
 *           mean -/+ sqrt(var_u / 2) (var_u: the unbiased variance over
 *           D n), whose mean is the global mean and whose unbiased
 *           variance the global one; its result is not used.
 * With one data-parallel rank, or sync_batchnorm = false, nothing
 * changes (each rank normalises over its own rows, as PyTorch's DDP
 * without SyncBatchNorm). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

typedef struct bn_ctx {
    ir_graph *g;
    kl_loc loc;
    int ranks;
    ir_dtype dt; /* x's */
} bn_ctx;

static int at(bn_ctx *b, int v)
{
    ir_nd(b->g, ir_val(b->g, v)->def)->loc = b->loc;
    return v;
}

static int bin(bn_ctx *b, ir_op op, int x, int y) { return at(b, ir_emit2(b->g, op, x, y, NULL)); }
static int un(bn_ctx *b, ir_op op, int x) { return at(b, ir_emit1(b->g, op, x, NULL)); }
static int konst(bn_ctx *b, double x) { return ir_emit_const(b->g, x, b->dt); }

static int with_attrs(bn_ctx *b, ir_op op, int x, const ir_attrs *a, const char *name)
{
    char *n = name ? ir_unique_name(b->g, name) : NULL;
    int v = at(b, ir_emit(b->g, op, &x, 1, a, n));
    free(n);
    return v;
}

static int reshaped(bn_ctx *b, int v, const int64_t *shape, int rank)
{
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "shape", shape, rank);
    int r = with_attrs(b, IR_OP_RESHAPE, v, &a, NULL);
    ir_attrs_free(&a);
    return r;
}

/* sum over every axis but the channel's (1), all-reduced over the ranks. */
static int global_sum(bn_ctx *b, int x, const char *name)
{
    const ir_type *t = &ir_val(b->g, x)->type;
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    for (int i = 0; i < t->rank; i++)
        if (i != 1)
            axes[na++] = i;
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "axis", axes, na);
    int s = with_attrs(b, IR_OP_SUM, x, &a, NULL);
    ir_attrs_free(&a);
    ir_attrs r = {0};
    ir_attrs_set_str(&r, "reduce", "sum");
    ir_attrs_set_int(&r, "ranks", b->ranks);
    int g = with_attrs(b, IR_OP_ALL_REDUCE, s, &r, name);
    ir_attrs_free(&r);
    return g;
}

static void sync_one(ir_graph *g, int i, int ranks)
{
    ir_node *n = ir_nd(g, i);
    bn_ctx b = {g, n->loc, ranks, ir_val(g, n->in.v[0])->type.dtype};
    int x = n->in.v[0], gamma = n->in.v[1], beta = n->in.v[2], rm = n->in.v[3], rv = n->in.v[4];
    int y_old = n->out.v[0];
    ir_attrs attrs;
    ir_attrs_copy(&attrs, &n->attrs);
    double eps = ir_attr_float(&attrs, "eps", 1e-5);
    const ir_type xt = ir_val(g, x)->type;
    int64_t C = xt.dim[1], count = ir_type_numel(&xt) / C, shape[IR_MAX_RANK];
    for (int k = 0; k < xt.rank; k++)
        shape[k] = k == 1 ? C : 1;
    double total = (double)count * (double)ranks;
    char *base = kl_xasprintf("%s.sync", ir_val(g, y_old)->name);
    char *mname = kl_xasprintf("%s.sum", base), *vname = kl_xasprintf("%s.sqsum", base);
    int mean = bin(&b, IR_OP_MUL, global_sum(&b, x, mname), konst(&b, 1.0 / total));
    int xc = bin(&b, IR_OP_SUB, x, reshaped(&b, mean, shape, xt.rank));
    int var = bin(&b, IR_OP_MUL, global_sum(&b, bin(&b, IR_OP_MUL, xc, xc), vname), konst(&b, 1.0 / total));
    int k = un(&b, IR_OP_RSQRT, bin(&b, IR_OP_ADD, var, konst(&b, eps)));
    int y = bin(&b, IR_OP_MUL, xc, reshaped(&b, k, shape, xt.rank));
    y = bin(&b, IR_OP_MUL, y, reshaped(&b, gamma, shape, xt.rank));
    y = bin(&b, IR_OP_ADD, y, reshaped(&b, beta, shape, xt.rank));
    ir_replace_uses(g, y_old, y);
    /* The running statistics: two rows mean -/+ d, d = sqrt(var_u / 2). */
    double unbias = total > 1 ? total / (total - 1) : 1.0;
    int d = un(&b, IR_OP_SQRT, bin(&b, IR_OP_MUL, var, konst(&b, unbias / 2)));
    int64_t row[2] = {1, C};
    int lo = reshaped(&b, bin(&b, IR_OP_SUB, mean, d), row, 2), hi = reshaped(&b, bin(&b, IR_OP_ADD, mean, d), row, 2);
    ir_attrs ca = {0};
    ir_attrs_set_int(&ca, "axis", 0);
    int two[2] = {lo, hi};
    int rows = at(&b, ir_emit(g, IR_OP_CONCAT, two, 2, &ca, NULL));
    ir_attrs_free(&ca);
    ir_kill_node(g, ir_nd(g, i));
    int in[5] = {rows, gamma, beta, rm, rv};
    char *sname = kl_xasprintf("%s.stats", base);
    char *un_name = ir_unique_name(g, sname);
    at(&b, ir_emit(g, IR_OP_BATCHNORM, in, 5, &attrs, un_name));
    free(un_name);
    free(sname);
    ir_attrs_free(&attrs);
    free(base);
    free(mname);
    free(vname);
}

int pass_sync_batchnorm(ir_graph *g, const pass_ctx *cx)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    bool sync = cfg.sync_batchnorm;
    int ranks = (cfg.tensor_parallel > 1 ? cx->ranks / cfg.tensor_parallel : cx->ranks) /
                (cfg.pipeline_parallel > 1 ? cfg.pipeline_parallel : 1);
    kl_train_config_free(&cfg);
    if (!sync || ranks <= 1)
        return 0;
    int nnodes = g->nodes.n;
    for (int i = 0; i < nnodes; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->op != IR_OP_BATCHNORM)
            continue;
        /* The statistics' results are read by nothing before autodiff. */
        for (int k = 1; k < n->out.n; k++)
            if (ir_val(g, n->out.v[k])->uses.n)
                kl_panic("sync_batchnorm: batchnorm's statistics are read before autodiff");
        sync_one(g, i, ranks);
    }
    ir_compact(g);
    ir_toposort(g);
    return 0;
}
