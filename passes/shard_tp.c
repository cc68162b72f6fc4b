/* tensor_parallel: Megatron-style tensor parallelism (forward graph).
 *
 * requires: lower (the forward graph, before autodiff)
 * provides: with the train setting tensor_parallel = T > 1, every pair of
 *           a matmul marked split = column and the matmul marked split =
 *           row that reads its result (through elementwise ops) split
 *           across the T ranks of a tensor-parallel group: the column
 *           matmul's weight [k, n] becomes [k, n / T] (its output
 *           columns), as does every param [n] the elementwise ops between
 *           the two read (the bias); the row matmul's weight [n, m]
 *           becomes [n / T, m] (its input rows); a tp_copy (identity
 *           forward, all_reduce over the group backward: Megatron's "f")
 *           feeds the column matmul and an all_reduce sum over the group
 *           (group = "tp"; identity backward: "g") follows the row
 *           matmul, so that the graph computes what one rank would. Each
 *           split param carries tp_axis (the axis cut) and tp_ranks (T);
 *           rank i of a group holds slice i of the full param along
 *           tp_axis (runtime/exec/tp.c). The same structure is checked with
 *           T = 1, where nothing changes (a model runs on any world).
 *           A split size T does not divide is padded with zero units to
 *           the next multiple of T (tp_size: the real size; the mask
 *           NAME.tp_mask zeroes the padded units before the row matmul,
 *           so that their gradients are 0 and they stay 0).
 *           For the optimizer: pass_tp_norm_share and pass_tp_norm_sum
 *           make the gradients' squared norm (clip, fp16's inf/NaN
 *           check) the whole model's on every rank.
 *
 * Refused, with the call's location: a split on a matmul whose right
 * operand is not a 2-D param (or is transposed), a column split whose
 * result reaches anything other than elementwise ops and a row split (or
 * leaves the graph), a row split that no column split feeds, dropout or
 * positional ops between the two (their values depend on the element's
 * index), and T > 1 without any split. The data-parallel rest of the world (ranks / T groups) is the
 * shard pass's (passes/shard.c). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

static const char *split_of(const ir_node *n)
{
    return n->op == IR_OP_MATMUL ? ir_attr_str(&n->attrs, "split", NULL) : NULL;
}

/* The split matmul's right operand: a 2-D param, not transposed. */
static int check_weight(ir_graph *g, const ir_node *n, const char *split)
{
    const ir_value *w = ir_val(g, n->in.v[1]);
    if (w->kind != IR_VAL_PARAM || w->type.rank != 2 || ir_attr_int(&n->attrs, "transpose_b", 0) ||
        ir_attr_int(&n->attrs, "transpose_a", 0)) {
        pass_error(g, n->loc, "split = %s needs x @ w with w a 2-D param (not transposed); here the weight is %s", split,
                   w->name);
        return -1;
    }
    return 0;
}

typedef struct tp_split {
    KL_VEC(int) params;  /* params to cut */
    KL_VEC(int) axes;    /* and the axis of each */
    KL_VEC(int) columns; /* column matmul nodes */
    KL_VEC(int) rows;    /* row matmul nodes */
} tp_split;

static void add_param(tp_split *s, int v, int axis)
{
    for (int i = 0; i < s->params.n; i++)
        if (s->params.v[i] == v)
            return;
    kl_vec_push(s->params, v);
    kl_vec_push(s->axes, axis);
}

/* The region of column matmul c: its result, forward through elementwise
 * ops, up to the row matmuls that read it. */
static int walk_region(ir_graph *g, int c, tp_split *s, bool *row_fed)
{
    const ir_node *cn = ir_nd(g, c);
    int64_t n = ir_val(g, cn->out.v[0])->type.dim[ir_val(g, cn->out.v[0])->type.rank - 1];
    bool *in_region = kl_xcalloc((size_t)g->values.n + 1, 1);
    KL_VEC(int) work = {0};
    kl_vec_push(work, cn->out.v[0]);
    in_region[cn->out.v[0]] = true;
    int rows = 0, rc = 0;
    while (work.n && !rc) {
        int v = work.v[--work.n];
        const ir_value *x = ir_val(g, v);
        if (ir_is_output(g, v)) {
            pass_error(g, cn->loc, "the result of this split = column matmul reaches %s, which leaves the graph (the loss "
                       "or a reported value): follow it with a split = row matmul", x->name);
            rc = -1;
            break;
        }
        for (int u = 0; u < x->uses.n && !rc; u++) {
            ir_use use = x->uses.v[u];
            const ir_node *r = ir_nd(g, use.node);
            if (r->dead)
                continue;
            const char *sp = split_of(r);
            if (sp && !strcmp(sp, "row") && use.operand == 0) {
                if (check_weight(g, r, "row")) {
                    rc = -1;
                    break;
                }
                if (!row_fed[use.node]) {
                    row_fed[use.node] = true;
                    rows++;
                    kl_vec_push(s->rows, use.node);
                }
                add_param(s, r->in.v[1], 0);
                continue;
            }
            if (r->op == IR_OP_MATMUL) {
                pass_error(g, cn->loc, "split = column has no matching split = row: its result reaches the matmul at "
                           "line %d, which is not marked split = row (as operand 1)", r->loc.line);
                rc = -1;
                break;
            }
            if (!ir_op_is_pointwise(r->op) || (ir_ops[r->op].flags & IR_F_POSITIONAL) || r->op == IR_OP_DROPOUT ||
                r->out.n != 1) {
                pass_error(g, r->loc, "the result of the split = column matmul at line %d reaches %s, which tensor "
                           "parallelism cannot split: between split = column and split = row only elementwise ops "
                           "(no dropout) may stand", cn->loc.line, ir_op_name(r->op));
                rc = -1;
                break;
            }
            /* The op's other operands: split values, broadcasts along the
             * split axis (scalars, size-1 last axes), or params [n] cut
             * with it. */
            for (int k = 0; k < r->in.n && !rc; k++) {
                int o = r->in.v[k];
                const ir_value *ov = ir_val(g, o);
                if (in_region[o] || ov->type.rank == 0 || ov->type.dim[ov->type.rank - 1] == 1)
                    continue;
                if (ov->kind == IR_VAL_PARAM && ov->type.rank == 1 && ov->type.dim[0] == n) {
                    add_param(s, o, 0);
                    continue;
                }
                pass_error(g, r->loc, "%s between split = column (line %d) and split = row reads %s, which is not split "
                           "(only 1-D params of the split size, such as a bias, are cut with it)", ir_op_name(r->op),
                           cn->loc.line, ov->name);
                rc = -1;
            }
            if (!rc && !in_region[r->out.v[0]]) {
                in_region[r->out.v[0]] = true;
                kl_vec_push(work, r->out.v[0]);
            }
        }
    }
    if (!rc && rows == 0) {
        pass_error(g, cn->loc, "split = column has no matching split = row: its result must reach a matmul marked "
                   "split = row (through elementwise ops), e.g. dense(relu(dense(x, 1024, split = column)), 256, "
                   "split = row)");
        rc = -1;
    }
    free(work.v);
    free(in_region);
    return rc;
}

/* Re-infers every live node's result types (after params were cut), in
 * order; a rule that refuses the new shapes is the user's error. */
static int retype(ir_graph *g)
{
    for (int i = 0; i < g->nodes.n; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead)
            continue;
        ir_type in[64];
        kl_check(n->in.n <= 64);
        for (int k = 0; k < n->in.n; k++)
            in[k] = ir_val(g, n->in.v[k])->type;
        ir_attrs attrs;
        ir_attrs_copy(&attrs, &n->attrs);
        ir_infer inf = {.op = n->op, .nin = n->in.n, .in = in, .attrs = &attrs};
        int rc = ir_infer_run(&inf);
        ir_attrs_free(&attrs);
        if (rc) {
            pass_error(g, n->loc, "tensor parallel: %s does not accept the split shapes: %s", ir_op_name(n->op), inf.err);
            return -1;
        }
        for (int k = 0; k < n->out.n; k++)
            ir_val(g, n->out.v[k])->type = inf.out[k];
    }
    return 0;
}

static int emit_named(ir_graph *g, ir_op op, int x, const ir_attrs *a, const char *suffix, kl_loc loc)
{
    char *base = kl_xasprintf("%s.%s", ir_val(g, x)->name, suffix);
    char *name = ir_unique_name(g, base);
    int v = ir_emit(g, op, &x, 1, a, name);
    ir_nd(g, g->nodes.n - 1)->loc = loc;
    free(name);
    free(base);
    return v;
}

/* The mask of a padded split: the state NAME.tp_mask, f32[n' / T], cut
 * as the params (1 on this rank's real units, 0 on padding: runtime/exec/tp.c
 * initialises the full [n] of ones and pads it with zeros). */
static int declare_mask(ir_graph *g, const ir_value *w, int64_t padded, int64_t size, int T)
{
    char *name = kl_xasprintf("%s.tp_mask", w->name);
    ir_type t = {IR_F32, 1, {padded / T}};
    int m = ir_declare(g, IR_VAL_STATE, name, &t, w->loc);
    free(name);
    ir_attrs *a = &ir_val(g, m)->attrs;
    ir_attrs_set_str(a, "init", "ones");
    ir_attrs_set_str(a, "role", "tp_mask");
    ir_attrs_set_int(a, "tp_axis", 0);
    ir_attrs_set_int(a, "tp_ranks", T);
    ir_attrs_set_int(a, "tp_size", size);
    return m;
}

static int split_graph(ir_graph *g, const tp_split *s, int T)
{
    for (int i = 0; i < s->params.n; i++) {
        ir_value *p = ir_val(g, s->params.v[i]);
        int axis = s->axes.v[i];
        /* Column weights [k, n] are cut on axis 1, biases [n] and row
         * weights [n, m] on axis 0; a size T does not divide is padded
         * with zeros to the next multiple (tp_size: the real size). */
        int64_t size = p->type.dim[axis], padded = (size + T - 1) / T * T;
        if (padded != size)
            ir_attrs_set_int(&p->attrs, "tp_size", size);
        p->type.dim[axis] = padded / T;
        ir_attrs_set_int(&p->attrs, "tp_axis", axis);
        ir_attrs_set_int(&p->attrs, "tp_ranks", T);
    }
    ir_attrs f = {0};
    ir_attrs_set_int(&f, "ranks", T);
    for (int i = 0; i < s->columns.n; i++) {
        ir_node *c = ir_nd(g, s->columns.v[i]);
        kl_loc loc = c->loc;
        int x = c->in.v[0];
        int y = emit_named(g, IR_OP_TP_COPY, x, &f, "tp_copy", loc);
        ir_set_operand(g, ir_nd(g, s->columns.v[i]), 0, y);
    }
    ir_attrs_free(&f);
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "reduce", "sum");
    ir_attrs_set_int(&a, "ranks", T);
    ir_attrs_set_str(&a, "group", "tp");
    for (int i = 0; i < s->rows.n; i++) {
        int y = ir_nd(g, s->rows.v[i])->out.v[0];
        int sum = emit_named(g, IR_OP_ALL_REDUCE, y, &a, "tp_sum", ir_nd(g, s->rows.v[i])->loc);
        ir_replace_uses(g, y, sum);
        ir_set_operand(g, ir_nd(g, ir_val(g, sum)->def), 0, y);
    }
    ir_attrs_free(&a);
    ir_toposort(g);
    if (retype(g))
        return -1;
    int before = g->nodes.n;
    /* Padding: the padded units' weights and biases start at zero; the
     * row matmul's input is multiplied by the mask, so that the padded
     * units read 0 whatever the elementwise ops between make of a zero
     * (sigmoid(0) = 0.5): every padded unit's gradient is exactly 0, so
     * its weights stay 0 under any optimizer (weight decay of 0 is 0),
     * and it adds nothing to the gradient norm. */
    for (int i = 0; i < before; i++) {
        ir_node *r = ir_nd(g, i);
        const char *sp = split_of(r);
        if (r->dead || !sp || strcmp(sp, "row"))
            continue;
        const ir_value *w = ir_val(g, r->in.v[1]);
        int64_t size = ir_attr_int(&w->attrs, "tp_size", 0);
        if (!size)
            continue;
        kl_loc loc = r->loc;
        int h = r->in.v[0];
        int mask = declare_mask(g, w, w->type.dim[0] * T, size, T);
        char *base = kl_xasprintf("%s.tp_masked", ir_val(g, h)->name);
        char *name = ir_unique_name(g, base);
        int y = ir_emit2(g, IR_OP_MUL, h, mask, name);
        ir_nd(g, g->nodes.n - 1)->loc = loc;
        free(name);
        free(base);
        ir_set_operand(g, ir_nd(g, i), 0, y);
    }
    if (g->nodes.n > before)
        ir_toposort(g);
    return 0;
}

int pass_shard_tp(ir_graph *g, const pass_ctx *cx)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int T = cfg.tensor_parallel > 1 ? cfg.tensor_parallel : 1;
    kl_shard mode = cfg.shard;
    kl_train_config_free(&cfg);
    tp_split s = {0};
    bool *row_fed = kl_xcalloc((size_t)g->nodes.n + 1, 1);
    int rc = 0;
    for (int i = 0; i < g->nodes.n && !rc; i++) {
        const ir_node *n = ir_nd(g, i);
        const char *sp = split_of(n);
        if (n->dead || !sp || strcmp(sp, "column"))
            continue;
        if (check_weight(g, n, "column")) {
            rc = -1;
            break;
        }
        kl_vec_push(s.columns, i);
        add_param(&s, n->in.v[1], 1);
        rc = walk_region(g, i, &s, row_fed);
    }
    for (int i = 0; i < g->nodes.n && !rc; i++) {
        const ir_node *n = ir_nd(g, i);
        const char *sp = split_of(n);
        if (!n->dead && sp && !strcmp(sp, "row") && !row_fed[i]) {
            pass_error(g, n->loc, "split = row needs the result of a split = column matmul (through elementwise ops) "
                       "as its input");
            rc = -1;
        }
    }
    if (!rc && T > 1) {
        if (!s.columns.n) {
            pass_error(g, (kl_loc){0, 0}, "tensor_parallel = %d, but no call is marked split = column|row (e.g. "
                       "dense(x, 1024, split = column))", T);
            rc = -1;
        } else if (mode == KL_SHARD_ZERO3) {
            pass_error(g, (kl_loc){0, 0}, "tensor_parallel = %d with shard = zero3 is not built: use shard = dp, "
                       "zero1 or zero2 with tensor parallelism", T);
            rc = -1;
        } else if (cx->ranks > 1 && cx->ranks % T) {
            pass_error(g, (kl_loc){0, 0}, "tensor_parallel = %d does not divide the world of %d ranks", T, cx->ranks);
            rc = -1;
        } else {
            rc = split_graph(g, &s, T);
        }
    }
    free(row_fed);
    free(s.params.v);
    free(s.axes.v);
    free(s.columns.v);
    free(s.rows.v);
    return rc;
}

int pass_tp_ranks(const ir_graph *g)
{
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (ir_attrs_find(&v->attrs, "tp_ranks"))
            return (int)ir_attr_int(&v->attrs, "tp_ranks", 1);
    }
    return 1;
}

char *pass_tp_memory(const ir_graph *g, int ranks)
{
    int T = pass_tp_ranks(g);
    if (T <= 1)
        return NULL;
    /* Per rank: the slices (padding included) and the replicated params;
     * one rank holds the real sizes. */
    int64_t split = 0, whole = 0, split_bytes = 0, whole_bytes = 0, real = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_PARAM)
            continue;
        bool cut = ir_attrs_find(&v->attrs, "tp_axis") != NULL;
        *(cut ? &split : &whole) += ir_type_numel(&v->type);
        *(cut ? &split_bytes : &whole_bytes) += ir_type_bytes(&v->type);
        if (cut) {
            int axis = (int)ir_attr_int(&v->attrs, "tp_axis", 0);
            int64_t size = ir_attr_int(&v->attrs, "tp_size", v->type.dim[axis] * T);
            real += ir_type_numel(&v->type) / v->type.dim[axis] * size;
        }
    }
    char pad[64] = "";
    if (real != split * T)
        snprintf(pad, sizeof pad, ", %lld padded to it", (long long)real);
    return kl_xasprintf("tensor parallel: groups of %d ranks x %d data-parallel; params per rank %lld = %.3f MB (%lld "
                        "split, 1/%d of %lld%s; %lld replicated), one rank would hold %lld",
                        T, ranks > T ? ranks / T : 1, (long long)(split + whole), (double)(split_bytes + whole_bytes) * 1e-6,
                        (long long)split, T, (long long)(split * T), pad, (long long)whole, (long long)(real + whole));
}

bool pass_tp_is_split(const ir_graph *g, int v) { return ir_attrs_find(&ir_val(g, v)->attrs, "tp_axis") != NULL; }

int pass_tp_norm_share(ir_graph *g, int sq, int param)
{
    int T = pass_tp_ranks(g);
    if (T <= 1 || pass_tp_is_split(g, param))
        return sq;
    return ir_emit2(g, IR_OP_MUL, sq, ir_emit_const(g, 1.0 / T, IR_F32), NULL);
}

int pass_tp_norm_sum(ir_graph *g, int total)
{
    int T = pass_tp_ranks(g);
    if (T <= 1)
        return total;
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "reduce", "sum");
    ir_attrs_set_int(&a, "ranks", T);
    ir_attrs_set_str(&a, "group", "tp");
    int sum = ir_emit(g, IR_OP_ALL_REDUCE, &total, 1, &a, "tp_grad_sqnorm");
    ir_attrs_free(&a);
    return sum;
}
