/* recompute: activation recomputation.
 *
 * requires: simplify (which would fold the copies back into the originals),
 *           before fusion; the train block's recompute and memory_limit
 * provides: with recompute = [def, ...] or auto, chosen forward values that
 *           backward reads are computed again in backward, right before
 *           their first backward reader, and backward reads the copies: the
 *           originals die after their forward readers instead of living
 *           until backward. A copy's operands are read where they are when
 *           backward keeps them anyway (params, inputs, values backward
 *           reads), else recomputed too when cheap, else read where they are
 *           (living longer). Cheap: elementwise ops, casts, broadcasts and
 *           views; batch norm's result through batchnorm_apply from the
 *           statistics it saved (the same values bit for bit; the running
 *           statistics are not updated twice; not for f64 data, whose
 *           statistics are stored rounded to f32); layer norm. Random ops
 *           (dropout) are never copied: a copy would draw another mask.
 *   [def, ...]  the cheap values computed inside calls of those defs;
 *   auto        the copies below, then each cheap value, largest first,
 *               kept when it makes the arena of the plan smaller (measured
 *               through the hook the compile function hands over: the
 *               passes after this one, kernel lowering and memory planning
 *               of a copy); with memory_limit, only until params, state
 *               and arena fit;
 *   copies      (the default) only permuted or transposed copies of values
 *               backward reads anyway (mark_copies): never more memory,
 *               one pass over each copy, the same bits;
 *   none        nothing changes.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

/* Whether result out of node n can be computed again in backward. */
static bool cheap(const ir_graph *g, const ir_node *n, int out)
{
    if (n->dead || n->phase != IR_PHASE_FORWARD)
        return false;
    /* Pointwise ops and views, but not random ones: dropout's mask is
     * drawn per node, and a copy would draw another. */
    if (ir_op_is_view(n->op) || ir_op_is_pointwise(n->op))
        return ir_ops[n->op].kclass != IR_KC_RANDOM;
    if (n->op == IR_OP_PERMUTE || n->op == IR_OP_TRANSPOSE)
        return true; /* a copy */
    switch (ir_ops[n->op].kclass) {
    case IR_KC_NORM:
        if (n->op == IR_OP_BATCHNORM)
            return out == 0 && ir_val(g, n->in.v[0])->type.dtype != IR_F64;
        return n->op == IR_OP_LAYERNORM && out == 0;
    default:
        return false;
    }
}

/* True when scope is (inside) a call of def name: a path component
 * "name.N" ("conv_bn_relu.1", "block.2.conv_bn_relu.1"). */
static bool in_def(const char *scope, const char *name)
{
    size_t len = strlen(name);
    for (const char *s = scope; s && (s = strstr(s, name)); s++) {
        if (s != scope && s[-1] != '.')
            continue;
        const char *d = s + len;
        if (*d != '.' || d[1] < '0' || d[1] > '9')
            continue;
        for (d++; *d >= '0' && *d <= '9'; d++)
            ;
        if (*d == 0 || *d == '.')
            return true;
    }
    return false;
}

typedef struct rc {
    ir_graph *g;
    int nvals, nnodes;  /* before the pass */
    const char *defs;   /* comma-separated def names, or NULL: any */
    bool *chosen;       /* per value: backward reads a copy instead */
    int *copy;          /* per value: its copy in backward, or -1 */
} rc;

static bool wanted(const rc *r, const ir_node *n)
{
    if (!r->defs)
        return true;
    if (!n->scope)
        return false;
    char *list = kl_xstrdup(r->defs);
    bool hit = false;
    for (char *save = NULL, *d = strtok_r(list, ",", &save); d && !hit; d = strtok_r(NULL, ",", &save))
        hit = in_def(n->scope, d);
    free(list);
    return hit;
}

/* Backward keeps u anyway: a declaration, a constant, or a value some
 * backward or update node reads (and that is not being recomputed). */
static bool kept_in_backward(const rc *r, int u)
{
    const ir_value *v = ir_val(r->g, u);
    if (v->def < 0 || ir_nd(r->g, v->def)->op == IR_OP_CONST)
        return true;
    if (u < r->nvals && r->chosen[u])
        return false;
    for (int k = 0; k < v->uses.n; k++)
        if (ir_nd(r->g, v->uses.v[k].node)->phase != IR_PHASE_FORWARD)
            return true;
    return false;
}

/* The value backward reads for u: u, or its copy (made on demand). */
static int copy_of(rc *r, int u, bool force)
{
    ir_graph *g = r->g;
    if (u >= r->nvals)
        return u;
    if (r->copy[u] >= 0)
        return r->copy[u];
    const ir_value *v = ir_val(g, u);
    if (!force && (kept_in_backward(r, u) || !cheap(g, ir_nd(g, v->def), v->def_out) || !wanted(r, ir_nd(g, v->def))))
        return u;
    int node = v->def, out = v->def_out;
    const ir_node *n = ir_nd(g, node);
    int args[8], nin = n->in.n;
    kl_check(nin <= (int)KL_ARRAY_LEN(args));
    for (int k = 0; k < nin; k++)
        args[k] = n->in.v[k];
    ir_op op = n->op;
    int nout = n->out.n;
    if (op == IR_OP_BATCHNORM) {
        /* x, gamma, beta as they were; mean and invstd as it saved them. */
        op = IR_OP_BATCHNORM_APPLY;
        args[3] = n->out.v[1];
        args[4] = n->out.v[2];
        nout = 1;
    }
    for (int k = 0; k < nin; k++)
        args[k] = copy_of(r, args[k], false);
    /* The operands' copies may have grown the node table. */
    n = ir_nd(g, node);
    v = ir_val(g, u);
    ir_type types[4];
    char *names[4];
    for (int k = 0; k < nout; k++) {
        types[k] = ir_val(g, n->out.v[k])->type;
        char *base = kl_xasprintf("%s.recomputed", ir_val(g, n->out.v[k])->name);
        names[k] = ir_unique_name(g, base);
        free(base);
    }
    ir_attrs attrs = {0};
    if (op == n->op)
        ir_attrs_copy(&attrs, &n->attrs);
    kl_loc loc = n->loc;
    char *scope = n->scope ? kl_xstrdup(n->scope) : NULL;
    ir_node *c = ir_add_node(g, op, args, nin, &attrs, types, (const char *const *)names, loc);
    ir_attrs_free(&attrs);
    for (int k = 0; k < nout; k++)
        free(names[k]);
    c->phase = IR_PHASE_BACKWARD;
    c->scope = scope;
    r->copy[u] = c->out.v[out];
    return r->copy[u];
}

/* Puts each copy right before the first node that reads it (its own
 * operands' copies before it). A backward view of a copy (a reshape
 * autodiff put early) waits for its own first reader too (lazy), so the
 * copy is made where its data is first used. */
static void place(ir_graph *g, int first_copy, const bool *lazy, int *order, int *n, bool *done, int node)
{
    if (done[node])
        return;
    const ir_node *nd = ir_nd(g, node);
    for (int k = 0; k < nd->in.n; k++) {
        int d = ir_val(g, nd->in.v[k])->def;
        if (d >= first_copy || (d >= 0 && lazy[d]))
            place(g, first_copy, lazy, order, n, done, d);
    }
    done[node] = true;
    order[(*n)++] = node;
}

/* Recomputes the values marked in chosen; returns how many. */
static int apply(ir_graph *g, const bool *chosen_in, const char *defs)
{
    rc r = {g, g->values.n, g->nodes.n, defs, NULL, NULL};
    r.chosen = kl_xcalloc((size_t)r.nvals + 1, sizeof *r.chosen);
    r.copy = kl_xmalloc(sizeof *r.copy * (size_t)(r.nvals + 1));
    memcpy(r.chosen, chosen_in, sizeof *r.chosen * (size_t)r.nvals);
    for (int v = 0; v < r.nvals; v++)
        r.copy[v] = -1;
    int count = 0;
    for (int v = 0; v < r.nvals; v++) {
        if (!r.chosen[v])
            continue;
        int c = copy_of(&r, v, true);
        /* Backward reads the copy. */
        const ir_value *val = ir_val(g, v);
        for (int k = val->uses.n - 1; k >= 0; k--) {
            ir_use use = val->uses.v[k];
            ir_node *n = ir_nd(g, use.node);
            if (use.node < r.nnodes && n->phase == IR_PHASE_BACKWARD)
                ir_set_operand(g, n, use.operand, c);
            val = ir_val(g, v);
        }
        count++;
    }
    int total = g->nodes.n;
    int *order = kl_xmalloc(sizeof *order * (size_t)(total + 1)), n = 0;
    bool *done = kl_xcalloc((size_t)total + 1, sizeof *done);
    bool *lazy = kl_xcalloc((size_t)total + 1, sizeof *lazy);
    for (int i = 0; i < r.nnodes; i++) {
        const ir_node *nd = ir_nd(g, i);
        if (nd->dead || nd->phase != IR_PHASE_BACKWARD || !ir_op_is_view(nd->op) || nd->in.n < 1)
            continue;
        int d = ir_val(g, nd->in.v[0])->def;
        lazy[i] = d >= r.nnodes || (d >= 0 && lazy[d]);
    }
    for (int i = 0; i < r.nnodes; i++)
        if (!lazy[i])
            place(g, r.nnodes, lazy, order, &n, done, i);
    for (int i = 0; i < total; i++)
        place(g, r.nnodes, lazy, order, &n, done, i); /* what nothing reads */
    free(lazy);
    ir_reorder(g, order);
    free(order);
    free(done);
    free(r.chosen);
    free(r.copy);
    return count;
}

/* Forward values that backward reads and that may be recomputed, largest
 * first. */
static int candidates(const ir_graph *g, const char *defs, int *out)
{
    rc r = {(ir_graph *)g, g->values.n, g->nodes.n, defs, NULL, NULL};
    int n = 0;
    for (int v = 0; v < g->values.n; v++) {
        const ir_value *val = ir_val(g, v);
        if (val->kind != IR_VAL_TEMP || val->def < 0)
            continue;
        const ir_node *d = ir_nd(g, val->def);
        if (!cheap(g, d, val->def_out) || !wanted(&r, d) || ir_op_is_view(d->op))
            continue;
        bool backward = false;
        for (int k = 0; k < val->uses.n && !backward; k++)
            backward = ir_nd(g, val->uses.v[k].node)->phase == IR_PHASE_BACKWARD;
        if (backward)
            out[n++] = v;
    }
    /* By bytes, largest first (insertion sort: few). */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ir_type_bytes(&ir_val(g, out[j])->type) > ir_type_bytes(&ir_val(g, out[j - 1])->type); j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

/* The first backward node reading v (by position), or -1. */
static int first_backward_reader(const ir_graph *g, int v)
{
    const ir_value *val = ir_val(g, v);
    int first = -1;
    for (int k = 0; k < val->uses.n; k++) {
        int m = val->uses.v[k].node;
        if (ir_nd(g, m)->phase == IR_PHASE_BACKWARD && (first < 0 || m < first))
            first = m;
    }
    return first;
}

/* Marks the copies rule's values (recompute = copies, the default, and
 * with auto): a forward value backward reads that is a permuted or
 * transposed copy (or a view or a cast of one: bf16's GEMM operand) of a
 * value backward reads anyway, after the copy's first reader. Backward makes the copy
 * again (one pass over it, the same bits) and the forward's dies after
 * its forward readers: the multi-head attention's output, read by the
 * attention backward, is not kept a second time with its heads merged
 * for the projection's weight gradient. */
static void mark_copies(const ir_graph *g, bool *chosen)
{
    for (int v = 0; v < g->values.n; v++) {
        const ir_value *val = ir_val(g, v);
        int first = val->kind == IR_VAL_TEMP && val->def >= 0 ? first_backward_reader(g, v) : -1;
        if (first < 0 || ir_nd(g, val->def)->phase != IR_PHASE_FORWARD)
            continue;
        int base = v, hops = 0;
        while (hops++ < 8 && ir_val(g, base)->def >= 0 &&
               (ir_op_is_view(ir_nd(g, ir_val(g, base)->def)->op) || ir_nd(g, ir_val(g, base)->def)->op == IR_OP_CAST))
            base = ir_nd(g, ir_val(g, base)->def)->in.v[0];
        const ir_value *b = ir_val(g, base);
        if (b->kind != IR_VAL_TEMP || b->def < 0)
            continue;
        const ir_node *d = ir_nd(g, b->def);
        if ((d->op != IR_OP_PERMUTE && d->op != IR_OP_TRANSPOSE) || d->phase != IR_PHASE_FORWARD)
            continue;
        /* The base itself read by backward only through v's views. */
        if (base != v && first_backward_reader(g, base) >= 0)
            continue;
        const ir_value *src = ir_val(g, d->in.v[0]);
        bool later = false;
        for (int k = 0; k < src->uses.n && !later; k++) {
            int m = src->uses.v[k].node;
            later = ir_nd(g, m)->phase == IR_PHASE_BACKWARD && m > first;
        }
        if (later && src->kind == IR_VAL_TEMP)
            chosen[v] = true;
    }
}

/* The arena of the plan with the values in chosen recomputed, measured
 * by the compile function's hook (the stages after this pass). */
static int64_t measure(const ir_graph *g, const bool *chosen, const pass_ctx *cx)
{
    ir_graph *c = ir_graph_clone(g);
    apply(c, chosen, NULL);
    int64_t arena = cx->measure_arena(cx->measure_arg, c);
    ir_graph_free(c);
    return arena;
}

static int64_t persistent_bytes(const ir_graph *g)
{
    int64_t sum = 0;
    for (int i = 0; i < g->decls.n; i++)
        if (ir_is_persistent(ir_val(g, g->decls.v[i])))
            sum += ir_type_bytes(&ir_val(g, g->decls.v[i])->type);
    return sum;
}

int pass_recompute(ir_graph *g, const pass_ctx *cx)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    char *spec = kl_xstrdup(cfg.recompute ? cfg.recompute : "none");
    int64_t limit = cfg.memory_limit;
    kl_train_config_free(&cfg);
    int rc = 0;
    bool any_backward = false;
    for (int i = 0; i < g->nodes.n; i++)
        any_backward |= !ir_nd(g, i)->dead && ir_nd(g, i)->phase == IR_PHASE_BACKWARD;
    if (!strcmp(spec, "none") || !any_backward)
        goto out;
    if (!strcmp(spec, "copies")) {
        bool *chosen = kl_xcalloc((size_t)g->values.n + 1, sizeof *chosen);
        mark_copies(g, chosen);
        apply(g, chosen, NULL);
        free(chosen);
        goto out;
    }
    bool automatic = !strcmp(spec, "auto");
    const char *defs = automatic ? NULL : spec;
    if (defs) {
        /* Every def named must be called somewhere. */
        char *list = kl_xstrdup(defs);
        for (char *save = NULL, *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
            bool called = false;
            for (int i = 0; i < g->nodes.n && !called; i++)
                called = ir_nd(g, i)->scope && in_def(ir_nd(g, i)->scope, d);
            if (!called) {
                /* At the name in the list when it was written there. */
                ir_attr *a = ir_attrs_find(&g->train, "recompute");
                kl_loc loc = a ? a->loc : (kl_loc){0, 0};
                for (int k = 0; a && a->val.kind == IR_ATTR_LIST && k < a->val.nitems; k++)
                    if (a->val.items[k].s && !strcmp(a->val.items[k].s, d) && a->val.items[k].loc.line > 0)
                        loc = a->val.items[k].loc;
                pass_error(g, loc, "recompute names '%s', but the model calls no def of that name", d);
                rc = -1;
            }
        }
        free(list);
        if (rc)
            goto out;
    }
    int *cand = kl_xmalloc(sizeof *cand * (size_t)(g->values.n + 1));
    int n = candidates(g, defs, cand);
    bool *chosen = kl_xcalloc((size_t)g->values.n + 1, sizeof *chosen);
    if (automatic)
        mark_copies(g, chosen);
    if (automatic) {
        int64_t fixed = persistent_bytes(g), best = measure(g, chosen, cx);
        for (int i = 0; i < n && !(limit > 0 && fixed + best <= limit); i++) {
            chosen[cand[i]] = true;
            int64_t a = measure(g, chosen, cx);
            if (a >= 0 && a < best)
                best = a;
            else
                chosen[cand[i]] = false;
        }
    } else {
        for (int i = 0; i < n; i++)
            chosen[cand[i]] = true;
    }
    apply(g, chosen, defs);
    free(chosen);
    free(cand);
out:
    free(spec);
    return rc;
}
