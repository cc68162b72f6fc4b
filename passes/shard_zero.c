/* shard, zero1 (passes/shard.c calls it): the optimizer state partitioned.
 *
 * requires: optimizer, accumulate (the update nodes and the values they
 *           read: the gradients, or their accumulators)
 * provides: the update nodes grouped in buckets (one optimizer, the same
 *           hyper-parameters, fp32 params, up to the bucket setting's bytes
 *           and 30 params); per bucket, with S = ceil(sum of the params'
 *           elements / N):
 *             reduce_scatter of the bucket's gradients (flattened, one
 *               after the other, padded with zeros to N S) -> this rank's
 *               S summed elements;
 *             shard_copy: the persistent f32[S] zero1.K.master = this
 *               rank's slice of the params (so it follows any write to
 *               them: init, resume);
 *             one update of the master slice with the slice of the
 *               gradient and the optimizer state zero1.K.adam_m (...),
 *               f32[S] each, which replaces the params' own (their
 *               declarations go);
 *             shard_gather: every rank's master slice gathered into the
 *               params.
 *           Clipping and the fp16 inf/NaN check: the squared norm of the
 *           gradients is the all-reduce of the slices' squared norms
 *           (padding adds 0), so every rank clips by the global norm and
 *           skips the same steps.
 *
 * bf16/fp16: the update phase reads fp32 gradients (the precision pass
 * casts them) and fp32 params (the master weights); the params'
 * low-precision copies (NAME.lowp) stay whole and a second shard_gather
 * fills them from the same updated master slices, rounded once.
 * Refused with the reason: f64 params. Each zero1 state records the member state it is
 * a slice of ("members": names, "counts": their elements) so that a
 * checkpoint holds the usual full state (driver/train_ranks.c). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ZERO_MAX_MEMBERS 30

/* The flattened gradients of a bucket, one after the other (a bucket of
 * one: the gradient itself; reduce_scatter flattens). */
static int flat_concat(ir_graph *g, const int *vals, int n, int64_t total, const char *name)
{
    if (n == 1)
        return vals[0];
    int flat[ZERO_MAX_MEMBERS];
    for (int i = 0; i < n; i++) {
        int64_t m = ir_type_numel(&ir_val(g, vals[i])->type);
        ir_attrs a = {0};
        ir_attrs_set_ints(&a, "shape", &m, 1);
        flat[i] = ir_emit(g, IR_OP_RESHAPE, &vals[i], 1, &a, NULL);
        ir_attrs_free(&a);
    }
    ir_type ct = {IR_F32, 1, {total}};
    ir_attrs ca = {0};
    ir_attrs_set_int(&ca, "axis", 0);
    char *cname = ir_unique_name(g, name);
    const char *cnames[1] = {cname};
    ir_node *cn = ir_add_node(g, IR_OP_CONCAT, flat, n, &ca, &ct, cnames, (kl_loc){0, 0});
    free(cname);
    ir_attrs_free(&ca);
    return cn->out.v[0];
}

static int declare_shard(ir_graph *g, const char *name, int64_t s, const char *role)
{
    ir_type t = {IR_F32, 1, {s}};
    int v = ir_declare(g, IR_VAL_STATE, name, &t, (kl_loc){0, 0});
    ir_attrs_set_str(&ir_val(g, v)->attrs, "init", "zeros");
    ir_attrs_set_str(&ir_val(g, v)->attrs, "role", role);
    return v;
}

/* Whether two update nodes can share one update (same op, attributes
 * and state operands). */
static bool same_update(const ir_node *a, const ir_node *b)
{
    if (a->op != b->op || a->in.n != b->in.n || a->attrs.n != b->attrs.n)
        return false;
    for (int i = 0; i < a->attrs.n; i++) {
        const char *k = a->attrs.v[i].key;
        if (ir_attr_float(&a->attrs, k, 0) != ir_attr_float(&b->attrs, k, 0))
            return false;
    }
    return true;
}

static bool is_lowp(const ir_graph *g, int v) { return !strcmp(ir_attr_str(&ir_val(g, v)->attrs, "role", ""), "lowp"); }

static kl_loc u0loc(ir_node **members) { return members[0]->loc; }

static void zero1_bucket(ir_graph *g, ir_node **members, int n, int ranks, int no, int *sq_total)
{
    int params[ZERO_MAX_MEMBERS + 1], grads[ZERO_MAX_MEMBERS];
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        params[i + 1] = members[i]->in.v[0];
        grads[i] = members[i]->in.v[1];
        total += ir_type_numel(&ir_val(g, params[i + 1])->type);
    }
    int64_t s = (total + ranks - 1) / ranks;
    char *base = kl_xasprintf("zero1.%d", no);
    ir_attrs ra = {0};
    ir_attrs_set_int(&ra, "ranks", ranks);
    /* The gradients' slice. */
    char *gname = kl_xasprintf("%s.grads", base);
    int cat = flat_concat(g, grads, n, total, gname);
    char *sname = kl_xasprintf("%s.grad", base);
    int gs = ir_emit(g, IR_OP_REDUCE_SCATTER, &cat, 1, &ra, sname);
    /* The master slice, from the params. */
    char *mname = kl_xasprintf("%s.master", base);
    params[0] = declare_shard(g, mname, s, "zero_master");
    /* No results, and more operands than ir_emit infers: added as they
     * are (the verifier checks their shape rule). */
    ir_add_node(g, IR_OP_SHARD_COPY, params, n + 1, &ra, NULL, NULL, u0loc(members));
    /* The update of the slice; the state slices replace the params'. */
    const ir_node *u0 = members[0];
    int args[8];
    int nargs = u0->in.n;
    kl_check(nargs <= 8);
    args[0] = params[0];
    args[1] = gs;
    args[2] = u0->in.v[2];
    args[3] = u0->in.v[3];
    int olds[ZERO_MAX_MEMBERS][4], nold = 0, nupd = 4;
    /* bf16/fp16: the params' low-precision copies (role lowp, the last
     * operand) stay whole; every rank's updated master slice is gathered
     * into them as into the params. */
    int lowp[ZERO_MAX_MEMBERS + 1];
    bool has_lowp = false;
    for (int k = 4; k < nargs; k++) {
        if (is_lowp(g, u0->in.v[k])) {
            has_lowp = true;
            lowp[0] = params[0];
            for (int i = 0; i < n; i++)
                lowp[i + 1] = members[i]->in.v[k];
            continue;
        }
        const char *member = ir_val(g, u0->in.v[k])->name, *dot = strrchr(member, '.');
        char *name = kl_xasprintf("%s.%s", base, dot ? dot + 1 : member);
        args[nupd] = declare_shard(g, name, s, "optimizer_state");
        free(name);
        ir_attrs *sa = &ir_val(g, args[nupd++])->attrs;
        kl_buf names = {0};
        int64_t counts[ZERO_MAX_MEMBERS];
        for (int i = 0; i < n; i++) {
            const ir_value *old = ir_val(g, members[i]->in.v[k]);
            kl_buf_printf(&names, "%s%s", i ? "," : "", old->name);
            counts[i] = ir_type_numel(&old->type);
            olds[i][nold] = old->id;
        }
        nold++;
        ir_attrs_set_str(sa, "members", names.s ? names.s : "");
        ir_attrs_set_ints(sa, "counts", counts, n);
        kl_buf_free(&names);
    }
    ir_emit(g, u0->op, args, nupd, &u0->attrs, NULL);
    ir_nd(g, g->nodes.n - 1)->loc = u0->loc;
    ir_add_node(g, IR_OP_SHARD_GATHER, params, n + 1, &ra, NULL, NULL, u0loc(members));
    if (has_lowp)
        ir_add_node(g, IR_OP_SHARD_GATHER, lowp, n + 1, &ra, NULL, NULL, u0loc(members));
    for (int i = 0; i < n; i++)
        ir_kill_node(g, members[i]);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nold; k++)
            ir_undeclare(g, olds[i][k]);
    /* This slice's part of the squared norm. */
    if (sq_total) {
        int sq = ir_emit1(g, IR_OP_SUM, ir_emit2(g, IR_OP_MUL, gs, gs, NULL), NULL);
        *sq_total = *sq_total < 0 ? sq : ir_emit2(g, IR_OP_ADD, *sq_total, sq, NULL);
    }
    ir_attrs_free(&ra);
    free(base);
    free(gname);
    free(sname);
    free(mname);
}

/* The squared norm of the whole gradients that clipping (grad_norm =
 * sqrt(sq) x multiplier) and the fp16 inf/NaN check (grads_finite =
 * isfinite(sq)) read, or -1 when neither is there. It is replaced by the
 * all-reduced sum of the slices' squared norms: every rank clips by the
 * global norm, and when any rank's gradients overflow every rank sees an
 * inf or NaN, skips the step and backs off the same loss scale. */
static int zero_old_sqnorm(const ir_graph *g)
{
    int norm = ir_find_value(g, "grad_norm"), finite = ir_find_value(g, "grads_finite");
    if (norm >= 0) {
        const ir_node *mul = ir_nd(g, ir_val(g, norm)->def);
        const ir_node *sqrt = ir_nd(g, ir_val(g, mul->in.v[0])->def);
        kl_check(sqrt->op == IR_OP_SQRT);
        return sqrt->in.v[0];
    }
    if (finite >= 0) {
        const ir_node *f = ir_nd(g, ir_val(g, finite)->def);
        kl_check(f->op == IR_OP_ISFINITE);
        return f->in.v[0];
    }
    return -1;
}

int pass_shard_zero1(ir_graph *g, int ranks, int64_t bucket_bytes)
{
    int first = g->nodes.n;
    KL_VEC(ir_node *) ups = {0};
    int rc = 0;
    for (int i = 0; i < first && !rc; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_UPDATE || (n->op != IR_OP_ADAM_UPDATE && n->op != IR_OP_SGD_UPDATE))
            continue;
        const ir_value *p = ir_val(g, n->in.v[0]), *d = ir_val(g, n->in.v[1]);
        if (p->type.dtype != IR_F32 || d->type.dtype != IR_F32) {
            pass_error(g, p->loc, "shard = zero1 partitions f32 params and gradients; %s is %s (gradient %s)", p->name,
                       ir_dtype_name(p->type.dtype), ir_dtype_name(d->type.dtype));
            rc = -1;
        }
        kl_vec_push(ups, n);
    }
    /* The clipping norm: its squared norm is replaced by the slices'. */
    int old_sq = zero_old_sqnorm(g), new_sq = -1;
    int no = 0;
    for (int i = 0; i < ups.n && !rc; i++) {
        if (!ups.v[i])
            continue;
        ir_node *members[ZERO_MAX_MEMBERS];
        int m = 0;
        int64_t bytes = 0;
        for (int j = i; j < ups.n && m < ZERO_MAX_MEMBERS; j++) {
            if (!ups.v[j] || !same_update(ups.v[i], ups.v[j]))
                continue;
            int64_t b = ir_type_bytes(&ir_val(g, ups.v[j]->in.v[0])->type);
            if (m > 0 && (bucket_bytes == 0 || bytes + b > bucket_bytes))
                break;
            members[m++] = ups.v[j];
            bytes += b;
            if (j != i)
                ups.v[j] = NULL;
        }
        ups.v[i] = NULL;
        zero1_bucket(g, members, m, ranks, no++, old_sq >= 0 ? &new_sq : NULL);
    }
    free(ups.v);
    if (rc)
        return rc;
    if (old_sq >= 0) {
        ir_attrs a = {0};
        ir_attrs_set_str(&a, "reduce", "sum");
        ir_attrs_set_int(&a, "ranks", ranks);
        int sum = ir_emit(g, IR_OP_ALL_REDUCE, &new_sq, 1, &a, "zero1.grad_sqnorm");
        ir_attrs_free(&a);
        const ir_value *ov = ir_val(g, old_sq);
        for (int u = ov->uses.n - 1; u >= 0; u--) {
            ir_use use = ov->uses.v[u];
            if (use.node < first)
                ir_set_operand(g, ir_nd(g, use.node), use.operand, sum);
        }
    }
    for (int k = first; k < g->nodes.n; k++)
        ir_nd(g, k)->phase = IR_PHASE_UPDATE;
    ir_compact(g);
    ir_toposort(g);
    return 0;
}
