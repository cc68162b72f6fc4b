/* precision: assigns a dtype to every value for bf16 or fp16 training.
 *
 * requires: optimizer (or eval_mode); the train block's precision and
 *           tp_reduce
 * provides: with precision = fp32, nothing changes (the graph is the same
 *           bit for bit). With bf16 or fp16:
 *   - ops of precision class LOW (GEMM, convolution and their gradients)
 *     take low-precision operands; their products accumulate in fp32, and
 *     those that give a param's gradient return fp32 (attribute out);
 *   - ops of class F32 (softmax, losses, reductions, exp/log, statistics)
 *     take fp32 operands and give fp32; attention and its backward, with
 *     bf16, take bf16 q, k, v (and dout) and give fp32 (fp16 runs feed
 *     them fp32);
 *   - the rest follow their operands: low when every computed float
 *     operand is low, fp32 otherwise; normalisations keep their data's
 *     dtype and compute their statistics in fp32;
 *   - params stay fp32 (master weights); an op that wants one in low
 *     precision reads a low-precision copy (state NAME.lowp) that the
 *     optimizer update writes after each step;
 *   - tensor parallelism's partial sums (a GEMM whose result the group
 *     all-reduces: a row split's forward, a column split's input
 *     gradient) by tp_reduce: fp32 (default) returns them in fp32, the
 *     group sums in fp32 and the sum is rounded once after, as one rank's
 *     GEMM rounds its whole sum; bf16/fp16 (the run's) all-reduces the
 *     GEMM's 16-bit result; exact (debugging, slow) runs every split
 *     layer's GEMMs, on one rank too, on operands widened to f64, sums in
 *     f64 (the all-reduce too) and rounds once after, so one rank's bits
 *     and any group's agree;
 *   - casts are inserted only at the boundaries (one per value and dtype),
 *     for the fusion pass to fold into their neighbours;
 *   - an op annotated _precision = f32 (precision = fp32 on a call in the
 *     model file, or keep_fp32 in the train block) runs in fp32, and so
 *     does its backward (autodiff copies the annotation); a param that
 *     only such ops read gets no low-precision copy. An annotation of
 *     another low precision than the run's is an error.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

typedef enum { MODE_SKIP, MODE_LOW, MODE_F32, MODE_FOLLOW, MODE_NORM, MODE_ATTN } mode;

typedef struct prec {
    ir_graph *g;
    ir_dtype low;
    bool tp_f32;          /* tp_reduce = fp32: partial sums all-reduced in fp32 */
    int nvals;            /* values before the pass */
    int *cast[IR_NDTYPES]; /* per original value: its cast to a dtype, or -1 */
    int *copy;            /* per param: its low-precision copy, or -1 */
} prec;

static bool is_grad(const ir_graph *g, int v)
{
    for (int i = 0; i < g->grads.n; i++)
        if (g->grads.v[i].grad == v)
            return true;
    return false;
}

static mode mode_of(const prec *P, const ir_node *n)
{
    const char *want = ir_attr_str(&n->attrs, "_precision", NULL);
    if (n->phase == IR_PHASE_UPDATE || n->op == IR_OP_CONST || n->op == IR_OP_CAST)
        return MODE_SKIP;
    if (ir_ops[n->op].kclass == IR_KC_NORM)
        return MODE_NORM;
    if (want && !strcmp(want, "f32"))
        return MODE_F32;
    if (ir_ops[n->op].kclass == IR_KC_ATTN && P->low == IR_BF16)
        return MODE_ATTN;
    if (want && ir_dtype_from_name(want) == (int)P->low)
        return MODE_LOW;
    switch (ir_ops[n->op].precision) {
    case IR_PREC_LOW: return MODE_LOW;
    case IR_PREC_F32: return MODE_F32;
    case IR_PREC_FOLLOW: return MODE_FOLLOW;
    default: return MODE_SKIP;
    }
}

static bool is_low(const prec *P, ir_dtype d)
{
    return d == P->low;
}

/* The low-precision copy of param p, made on first use. */
static int copy_of(prec *P, int p)
{
    if (P->copy[p] >= 0)
        return P->copy[p];
    ir_value *pv = ir_val(P->g, p);
    char *name = kl_xasprintf("%s.lowp", pv->name);
    ir_type t = pv->type;
    t.dtype = P->low;
    int c = ir_declare(P->g, IR_VAL_STATE, name, &t, pv->loc);
    free(name);
    ir_value *cv = ir_val(P->g, c);
    ir_attr_val init = {.kind = IR_ATTR_CALL, .s = kl_xstrdup("copy")};
    init.args = kl_xcalloc(1, sizeof *init.args);
    ir_attrs_set_str(init.args, "from", ir_val(P->g, p)->name);
    ir_attrs_set(&cv->attrs, "init", init);
    ir_attrs_set_str(&cv->attrs, "role", "lowp");
    P->copy[p] = c;
    return c;
}

/* Value v as dtype dt: itself, a constant of that dtype, the param's
 * low-precision copy, or a cast (one per value and dtype). */
static int as_dtype(prec *P, int v, ir_dtype dt)
{
    ir_graph *g = P->g;
    const ir_value *val = ir_val(g, v);
    if (val->type.dtype == dt || !ir_dtype_is_float(val->type.dtype) || val->type.dtype == IR_F64)
        return v;
    if (val->def >= 0 && ir_nd(g, val->def)->op == IR_OP_CONST) {
        const ir_node *c = ir_nd(g, val->def);
        ir_attrs a;
        ir_attrs_copy(&a, &c->attrs);
        ir_attrs_set_str(&a, "dtype", ir_dtype_name(dt));
        int r = ir_emit(g, IR_OP_CONST, NULL, 0, &a, NULL);
        ir_attrs_free(&a);
        ir_nd(g, g->nodes.n - 1)->phase = c->phase;
        return r;
    }
    if (val->kind == IR_VAL_PARAM && dt == P->low)
        return copy_of(P, v);
    if (v < P->nvals && P->cast[dt][v] >= 0)
        return P->cast[dt][v];
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "to", ir_dtype_name(dt));
    int r = ir_emit(g, IR_OP_CAST, &v, 1, &a, NULL);
    ir_attrs_free(&a);
    ir_node *cn = ir_nd(g, g->nodes.n - 1);
    /* The cast runs with its value's producer (or its first reader). */
    cn->phase = val->def >= 0 ? ir_nd(g, val->def)->phase : IR_PHASE_FORWARD;
    cn->loc = val->loc;
    if (v < P->nvals)
        P->cast[dt][v] = r;
    return r;
}

static void set_operand_dtype(prec *P, ir_node *n, int k, ir_dtype dt)
{
    int v = n->in.v[k];
    int r = as_dtype(P, v, dt);
    if (r != v)
        ir_set_operand(P->g, n, k, r);
}

/* Reruns the node's shape rule and retypes its results. */
static void retype(ir_graph *g, ir_node *n)
{
    ir_type in[64];
    for (int k = 0; k < n->in.n; k++)
        in[k] = ir_val(g, n->in.v[k])->type;
    ir_attrs a;
    ir_attrs_copy(&a, &n->attrs);
    ir_infer inf = {.op = n->op, .nin = n->in.n, .in = in, .attrs = &a};
    if (ir_infer_run(&inf))
        kl_panic("precision: %s no longer type-checks: %s", ir_op_name(n->op), inf.err);
    for (int k = 0; k < n->out.n; k++)
        ir_val(g, n->out.v[k])->type = inf.out[k];
    ir_attrs_free(&n->attrs);
    n->attrs = a;
}

/* tp_reduce = fp32: tensor parallelism's partial products
 * (passes/shard_tp.c: a row matmul's forward, a column matmul's input
 * gradient) come out of the GEMM in fp32, the group sums them in fp32 and
 * the sum is rounded once, after, as one rank's GEMM rounds its whole
 * sum; the readers read the rounded sum. Only the order of fp32 sums
 * differs from one rank (and a value near a 16-bit rounding boundary may
 * round the other way): the tests compare within bounds derived from the
 * 16-bit unit roundoff (tests/ranks/helpers.bash). */
static bool tp_sum_f32(prec *P, ir_node *n)
{
    ir_graph *g = P->g;
    const char *group = ir_attr_str(&n->attrs, "group", NULL);
    if (!P->tp_f32 || n->op != IR_OP_ALL_REDUCE || !group || strcmp(group, "tp"))
        return false;
    const ir_value *x = ir_val(g, n->in.v[0]);
    if (x->def < 0 || !is_low(P, x->type.dtype) || x->uses.n != 1)
        return false;
    ir_node *d = ir_nd(g, x->def);
    if (d->op != IR_OP_MATMUL || d->out.n != 1)
        return false;
    ir_attrs_set_str(&d->attrs, "out", "f32");
    retype(g, d);
    retype(g, n);
    int sum = n->out.v[0];
    int c = as_dtype(P, sum, P->low);
    ir_replace_uses(g, sum, c);
    ir_set_operand(g, ir_nd(g, ir_val(g, c)->def), 0, sum);
    return true;
}

/* tp_reduce = exact, a debugging mode (slow: f64 GEMMs, twice the bytes
 * of an fp32 all-reduce): tensor parallelism's GEMMs, a split matmul's
 * forward, the matmul that reads its split weight transposed (a column
 * split's input gradient, a row split's gradient of its input units) and
 * the one that gives the weight's gradient, take their 16-bit operands
 * widened to f64 and sum in f64, exactly for bf16/f16 products of the
 * sizes seen (so in any order, by any library), on any world (one rank
 * too); the group sums in f64 where it sums, and the sum is rounded once,
 * after, to the GEMM's dtype: one rank's bits and any group's agree
 * (with the thread count pinned). */
static void mark_tp_sums(const ir_graph *g, bool *exact)
{
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->op != IR_OP_MATMUL || n->dead || !ir_attr_str(&n->attrs, "split", NULL))
            continue;
        exact[i] = true;
        int wv = n->in.v[1];
        const ir_value *w = ir_val(g, wv);
        for (int k = 0; k < g->grads.n; k++) {
            int d = g->grads.v[k].param == wv ? ir_val(g, g->grads.v[k].grad)->def : -1;
            if (d >= 0 && ir_nd(g, d)->op == IR_OP_MATMUL)
                exact[d] = true;
        }
        for (int u = 0; u < w->uses.n; u++) {
            const ir_node *m = ir_nd(g, w->uses.v[u].node);
            if (m != n && !m->dead && m->op == IR_OP_MATMUL && w->uses.v[u].operand == 1 &&
                ir_attr_int(&m->attrs, "transpose_b", 0) && !ir_attr_int(&m->attrs, "transpose_a", 0))
                exact[w->uses.v[u].node] = true;
        }
    }
}

/* A cast of v to dt, run with node `with` (its phase and location). */
static int emit_cast(ir_graph *g, int v, ir_dtype dt, const ir_node *with)
{
    ir_phase phase = with->phase;
    kl_loc loc = with->loc;
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "to", ir_dtype_name(dt));
    int c = ir_emit(g, IR_OP_CAST, &v, 1, &a, NULL);
    ir_attrs_free(&a);
    ir_node *cn = ir_nd(g, g->nodes.n - 1);
    cn->phase = phase;
    cn->loc = loc;
    return c;
}

/* The GEMM i (marked by mark_tp_sums) in f64 when its operands are low,
 * with the group's all_reduce after it, and the (summed) result cast
 * back to the GEMM's dtype. */
static void tp_sum_f64(prec *P, int i)
{
    ir_graph *g = P->g;
    ir_node *n = ir_nd(g, i);
    if (!is_low(P, ir_val(g, n->in.v[0])->type.dtype) || !is_low(P, ir_val(g, n->in.v[1])->type.dtype))
        return;
    ir_dtype was = ir_val(g, n->out.v[0])->type.dtype;
    for (int k = 0; k < 2; k++) {
        int c = emit_cast(g, ir_nd(g, i)->in.v[k], IR_F64, ir_nd(g, i));
        ir_set_operand(g, ir_nd(g, i), k, c);
    }
    n = ir_nd(g, i);
    ir_attrs_set_str(&n->attrs, "out", "f64");
    retype(g, n);
    int sum = n->out.v[0];
    const ir_value *y = ir_val(g, sum);
    if (y->uses.n == 1) {
        ir_node *r = ir_nd(g, y->uses.v[0].node);
        const char *group = ir_attr_str(&r->attrs, "group", NULL);
        if (r->op == IR_OP_ALL_REDUCE && group && !strcmp(group, "tp")) {
            retype(g, r);
            sum = r->out.v[0];
        }
    }
    int c = emit_cast(g, sum, was, ir_nd(g, ir_val(g, sum)->def));
    ir_replace_uses(g, sum, c);
    ir_set_operand(g, ir_nd(g, ir_val(g, c)->def), 0, sum);
    for (int k = 0; k < g->grads.n; k++) /* a weight's gradient: the cast */
        if (g->grads.v[k].grad == sum)
            g->grads.v[k].grad = c;
}

static void assign(prec *P, ir_node *n)
{
    ir_graph *g = P->g;
    mode m = mode_of(P, n);
    if (m == MODE_SKIP || tp_sum_f32(P, n))
        return;
    if (m == MODE_NORM) {
        /* The data keeps its dtype (statistics are fp32 inside the
         * kernel); a backward op's dy follows its x. */
        if ((n->op == IR_OP_BATCHNORM_GRAD || n->op == IR_OP_LAYERNORM_GRAD) &&
            ir_val(g, n->in.v[0])->type.dtype != ir_val(g, n->in.v[1])->type.dtype)
            set_operand_dtype(P, n, 0, ir_val(g, n->in.v[1])->type.dtype);
        retype(g, n);
        return;
    }
    if (m == MODE_ATTN) {
        /* bf16 operands (q, k, v; in backward dout too), f32 results:
         * the kernels widen each row as they load it and accumulate in
         * f32, and backward reads the forward's f32 out and lse. */
        int nlow = n->op == IR_OP_ATTENTION ? 3 : 4;
        for (int k = 0; k < n->in.n; k++)
            set_operand_dtype(P, n, k, k < nlow ? P->low : IR_F32);
        retype(g, n);
        return;
    }
    ir_dtype want = m == MODE_LOW ? P->low : IR_F32;
    if (m == MODE_FOLLOW) {
        /* Low when every computed (non-persistent) float operand is low. */
        int computed = 0, low = 0;
        for (int k = 0; k < n->in.n; k++) {
            const ir_value *v = ir_val(g, n->in.v[k]);
            bool konst = v->def >= 0 && ir_nd(g, v->def)->op == IR_OP_CONST;
            if (!ir_dtype_is_float(v->type.dtype) || ir_is_persistent(v) || konst)
                continue;
            computed++;
            low += is_low(P, v->type.dtype);
        }
        if (!computed)
            return;
        want = low == computed ? P->low : IR_F32;
    }
    for (int k = 0; k < n->in.n; k++) {
        if (ir_op_mutates(n->op, k))
            continue;
        /* Integer operands (labels, indices) keep their dtype. */
        if (!ir_dtype_is_float(ir_val(g, n->in.v[k])->type.dtype))
            continue;
        set_operand_dtype(P, n, k, want);
    }
    /* A low-precision GEMM that gives a param's gradient returns fp32
     * (not one whose operands stayed f64: f64 is explicit). */
    if (m == MODE_LOW && n->out.n == 1 && is_grad(g, n->out.v[0]) &&
        (n->op == IR_OP_MATMUL || ir_ops[n->op].kclass == IR_KC_CONV) && is_low(P, ir_val(g, n->in.v[0])->type.dtype))
        ir_attrs_set_str(&n->attrs, "out", "f32");
    retype(g, n);
}

/* Whether every reader of v takes it cast to dtype low, directly or
 * through views (the reshapes between the logits' gradient and the GEMMs
 * of its backward). */
static bool read_as_only(const ir_graph *g, int v, ir_dtype low, int depth)
{
    const ir_value *val = ir_val(g, v);
    if (depth > 8 || val->uses.n == 0 || ir_is_output(g, v))
        return false;
    for (int u = 0; u < val->uses.n; u++) {
        const ir_node *m = ir_nd(g, val->uses.v[u].node);
        if (m->op == IR_OP_CAST && ir_val(g, m->out.v[0])->type.dtype == low)
            continue;
        if (!ir_op_is_view(m->op) || m->out.n != 1 || !read_as_only(g, m->out.v[0], low, depth + 1))
            return false;
    }
    return true;
}

static void retype_views(ir_graph *g, int v, int depth)
{
    const ir_value *val = ir_val(g, v);
    for (int u = 0; u < val->uses.n && depth <= 8; u++) {
        ir_node *m = ir_nd(g, val->uses.v[u].node);
        if (ir_op_is_view(m->op)) {
            retype(g, m);
            retype_views(g, m->out.v[0], depth + 1);
        }
    }
}

/* The softmax cross-entropy gradient that every reader takes in the run's
 * low precision (the logits GEMM's two backward GEMMs) reads the low
 * logits and gives that dtype: its kernel widens each logit as it loads
 * it and computes in fp32 as before, and its rounded store is what the
 * cast stored (the same bits), without an fp32 gradient as large as the
 * logits in between; the casts become identities (simplify) and the
 * gradient can be written over the logits (plan/inplace.c). */
static void narrow_logits_grads(prec *P, int nnodes)
{
    ir_graph *g = P->g;
    for (int i = 0; i < nnodes; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || n->op != IR_OP_CROSS_ENTROPY_GRAD || ir_val(g, n->out.v[0])->type.dtype != IR_F32)
            continue;
        const ir_value *x = ir_val(g, n->in.v[1]);
        if (x->def < 0 || ir_nd(g, x->def)->op != IR_OP_CAST)
            continue;
        int low = ir_nd(g, x->def)->in.v[0];
        if (!is_low(P, ir_val(g, low)->type.dtype) || !read_as_only(g, n->out.v[0], P->low, 0))
            continue;
        ir_set_operand(g, n, 1, low);
        retype(g, n);
        retype_views(g, n->out.v[0], 0);
    }
}

int pass_precision(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    kl_precision p = cfg.precision;
    kl_tp_reduce tpr = cfg.tp_reduce;
    kl_train_config_free(&cfg);
    /* tp_reduce names a 16-bit dtype only for the run's own, and applies
     * to bf16/fp16 runs (an fp32 run all-reduces in fp32). */
    bool low16 = (tpr == KL_TP_REDUCE_BF16 && p == KL_PREC_BF16) || (tpr == KL_TP_REDUCE_FP16 && p == KL_PREC_FP16);
    if (tpr != KL_TP_REDUCE_FP32 && !low16 && !(tpr == KL_TP_REDUCE_EXACT && p != KL_PREC_FP32)) {
        pass_error(g, (kl_loc){0, 0},
                   "tp_reduce = %s needs %s, but the run's precision is %s (tp_reduce = fp32 works with any)",
                   kl_tp_reduce_name(tpr),
                   tpr == KL_TP_REDUCE_EXACT ? "precision = bf16 or fp16"
                   : tpr == KL_TP_REDUCE_BF16 ? "precision = bf16" : "precision = fp16",
                   kl_precision_name(p));
        return -1;
    }
    /* A per-op low precision other than the run's would be ignored (the
     * lowering refuses it in a model file; this catches IR dumps). */
    const char *run = p == KL_PREC_BF16 ? "bf16" : p == KL_PREC_FP16 ? "f16" : "f32";
    for (int i = 0; i < g->nodes.n; i++) {
        const char *want = ir_attr_str(&ir_nd(g, i)->attrs, "_precision", NULL);
        if (!ir_nd(g, i)->dead && want && strcmp(want, "f32") && strcmp(want, run)) {
            pass_error(g, ir_nd(g, i)->loc, "%s asks for precision %s, but the run's precision is %s",
                       ir_op_name(ir_nd(g, i)->op), !strcmp(want, "f16") ? "fp16" : want,
                       kl_precision_name(p));
            return -1;
        }
    }
    if (p == KL_PREC_FP32)
        return 0;
    prec P = {.g = g, .low = p == KL_PREC_BF16 ? IR_BF16 : IR_F16, .nvals = g->values.n,
              .tp_f32 = tpr == KL_TP_REDUCE_FP32};
    for (int d = 0; d < IR_NDTYPES; d++) {
        P.cast[d] = kl_xmalloc(sizeof(int) * (size_t)(P.nvals + 1));
        for (int v = 0; v < P.nvals; v++)
            P.cast[d][v] = -1;
    }
    P.copy = kl_xmalloc(sizeof(int) * (size_t)(P.nvals + 1));
    for (int v = 0; v < P.nvals; v++)
        P.copy[v] = -1;
    int nnodes = g->nodes.n;
    bool *exact = kl_xcalloc((size_t)nnodes + 1, 1);
    if (tpr == KL_TP_REDUCE_EXACT)
        mark_tp_sums(g, exact);
    for (int i = 0; i < nnodes; i++)
        if (!ir_nd(g, i)->dead)
            assign(&P, ir_nd(g, i));
    for (int i = 0; i < nnodes; i++)
        if (exact[i] && !ir_nd(g, i)->dead)
            tp_sum_f64(&P, i);
    free(exact);
    narrow_logits_grads(&P, nnodes);
    /* Gradients and the loss in fp32. */
    for (int i = 0; i < g->grads.n; i++) {
        int d = g->grads.v[i].grad;
        if (ir_val(g, d)->type.dtype != ir_val(g, g->grads.v[i].param)->type.dtype) {
            int c = as_dtype(&P, d, ir_val(g, g->grads.v[i].param)->type.dtype);
            ir_nd(g, ir_val(g, c)->def)->phase = IR_PHASE_BACKWARD;
            /* The update and the norm read the fp32 gradient. */
            const ir_value *dv = ir_val(g, d);
            for (int u = dv->uses.n - 1; u >= 0; u--) {
                ir_use use = dv->uses.v[u];
                if (ir_nd(g, use.node)->phase == IR_PHASE_UPDATE)
                    ir_set_operand(g, ir_nd(g, use.node), use.operand, c);
            }
            g->grads.v[i].grad = c;
        }
    }
    if (g->loss >= 0 && ir_val(g, g->loss)->type.dtype != IR_F32 && ir_val(g, g->loss)->type.dtype != IR_F64)
        g->loss = as_dtype(&P, g->loss, IR_F32);
    /* The updates write the low-precision copies. */
    for (int i = 0; i < nnodes; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || ir_ops[n->op].kclass != IR_KC_UPDATE || n->op == IR_OP_GRAD_ACCUMULATE)
            continue;
        int w = n->in.v[0];
        if (w < P.nvals && P.copy[w] >= 0)
            ir_append_operand(g, n, P.copy[w]);
    }
    for (int d = 0; d < IR_NDTYPES; d++)
        free(P.cast[d]);
    free(P.copy);
    ir_toposort(g);
    return 0;
}
