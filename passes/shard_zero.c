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
 *           skips the same steps. With tensor parallelism a bucket holds
 *           split params or replicated ones, not both, and the sum goes
 *           on over the group (pass_tp_norm_share, pass_tp_norm_sum).
 *           With pipeline stages a bucket holds one stage's updates and
 *           its nodes carry that _stage (the squared norm's partial sums
 *           cross the stages as update-phase transfers; zero3's gathers
 *           carry their reader's stage: shard_zero3.c).
 *
 * bf16/fp16: the update phase reads fp32 gradients (the precision pass
 * casts them) and fp32 params (the master weights); the params'
 * low-precision copies (NAME.lowp) stay whole and the shard_gather
 * (copies = 1) fills them from the same all-gathered fp32 master slices,
 * rounded once (a bucket holds at most 15 params then).
 * Refused with the reason: f64 params. Each zero1 state records the member state it is
 * a slice of ("members": names, "counts": their elements) so that a
 * checkpoint holds the usual full state (driver/train_ranks.c). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "shard_zero.h"

/* A bucket of params with 16-bit copies: its shard_gather writes both
 * (at most 31 operands). */
#define ZERO_LOWP_MEMBERS 15

typedef KL_VEC(int) zero_vals;

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

static bool has_lowp_operand(const ir_graph *g, const ir_node *u)
{
    for (int k = 4; k < u->in.n; k++)
        if (is_lowp(g, u->in.v[k]))
            return true;
    return false;
}

static kl_loc u0loc(ir_node **members) { return members[0]->loc; }

/* Slice v records the states it is a slice of, operand k of each member
 * update ("members": names, "counts": their elements), so that a
 * checkpoint holds the usual full state (driver/train_ranks.c). */
static void set_members(ir_graph *g, int v, ir_node **members, int n, int k, int stage)
{
    kl_buf names = {0};
    int64_t counts[ZERO_MAX_MEMBERS];
    for (int i = 0; i < n; i++) {
        const ir_value *old = ir_val(g, members[i]->in.v[k]);
        kl_buf_printf(&names, "%s%s", i ? "," : "", old->name);
        counts[i] = ir_type_numel(&old->type);
    }
    ir_attrs *sa = &ir_val(g, v)->attrs;
    ir_attrs_set_str(sa, "members", names.s ? names.s : "");
    ir_attrs_set_ints(sa, "counts", counts, n);
    kl_buf_free(&names);
    /* zero3: the params are gone from the graph, so the slice names
     * their shapes (a checkpoint's full values have them). */
    for (int i = 0; stage == 3 && i < n; i++)
        zero3_set_shape(g, v, i, members[i]->in.v[0]);
}

static void set_phase(ir_graph *g, int from, ir_phase ph)
{
    for (int k = from; k < g->nodes.n; k++)
        ir_nd(g, k)->phase = ph;
}

/* zero2: the backward-phase gradient that update operand v (a gradient,
 * or its accumulator) is made of; an accumulator's grad_accumulate goes
 * (*acc_steps: its steps) and the accumulator is pushed on dead_accs. */
static int backward_grad(ir_graph *g, int v, int64_t *acc_steps, zero_vals *dead_accs)
{
    const ir_value *x = ir_val(g, v);
    if (strcmp(ir_attr_str(&x->attrs, "role", ""), "grad_acc"))
        return v;
    for (int u = 0; u < x->uses.n; u++) {
        ir_node *w = ir_nd(g, x->uses.v[u].node);
        if (w->dead || w->op != IR_OP_GRAD_ACCUMULATE || x->uses.v[u].operand != 0)
            continue;
        int d = w->in.v[1];
        *acc_steps = ir_attr_int(&w->attrs, "steps", 1);
        ir_kill_node(g, w);
        kl_vec_push(*dead_accs, v);
        return d;
    }
    kl_panic("shard zero2: accumulator %s has no grad_accumulate", x->name);
}

/* One bucket: the gradients' slice, the master slice, the update of the
 * slices, the gathers. zero2 (stage 2): the reduce-scatter (and, with
 * accumulate > 1, the sliced accumulator's grad_accumulate) in the
 * backward phase, recorded in *placed for the move after the last
 * gradient's producer. */
static void zero_bucket(ir_graph *g, ir_node **members, int n, int ranks, int stage, int no, int *sq_total,
                        zero_vals *dead_accs, zero_vals *placed, zero3_bucket *z3)
{
    int params[ZERO_MAX_MEMBERS + 1], grads[ZERO_MAX_MEMBERS];
    int64_t total = 0, acc_steps = 0;
    for (int i = 0; i < n; i++) {
        params[i + 1] = members[i]->in.v[0];
        grads[i] = members[i]->in.v[1];
        if (stage >= 2)
            grads[i] = backward_grad(g, grads[i], &acc_steps, dead_accs);
        total += ir_type_numel(&ir_val(g, params[i + 1])->type);
    }
    int64_t s = (total + ranks - 1) / ranks;
    char *base = kl_xasprintf("zero%d.%d", stage, no);
    ir_attrs ra = {0};
    ir_attrs_set_int(&ra, "ranks", ranks);
    /* The gradients' slice. */
    int b0 = g->nodes.n;
    for (int i = 0; i < n; i++)
        if (ir_val(g, grads[i])->type.dtype != IR_F32) {
            /* bf16/fp16 with accumulate > 1: a micro-batch's 16-bit
             * gradient, summed across the ranks in f32 as the fp32
             * accumulator would sum it. */
            ir_attrs a = {0};
            ir_attrs_set_str(&a, "to", "f32");
            grads[i] = ir_emit(g, IR_OP_CAST, &grads[i], 1, &a, NULL);
            ir_attrs_free(&a);
        }
    char *gname = kl_xasprintf("%s.grads", base);
    int cat = flat_concat(g, grads, n, total, gname);
    char *sname = kl_xasprintf("%s.grad", base);
    int gs = ir_emit(g, IR_OP_REDUCE_SCATTER, &cat, 1, &ra, sname);
    if (acc_steps) {
        /* Each micro-batch's slice summed into this rank's slice of the
         * accumulator (the first one overwrites it). */
        char *aname = kl_xasprintf("%s.grad_acc", base);
        int acc = declare_shard(g, aname, s, "grad_acc");
        free(aname);
        set_members(g, acc, members, n, 1, stage);
        ir_attrs sa = {0};
        ir_attrs_set_int(&sa, "steps", acc_steps);
        int aargs[2] = {acc, gs};
        ir_emit(g, IR_OP_GRAD_ACCUMULATE, aargs, 2, &sa, NULL);
        ir_attrs_free(&sa);
        gs = acc;
    }
    if (stage >= 2) {
        set_phase(g, b0, IR_PHASE_BACKWARD);
        for (int k = b0; k < g->nodes.n; k++)
            kl_vec_push(*placed, k);
        kl_vec_push(*placed, -1);
    }
    int u0n = g->nodes.n;
    /* The master slice, from the params (zero3: the params' only
     * storage, initialised with this rank's slice of their inits). */
    char *mname = kl_xasprintf("%s.master", base);
    params[0] = declare_shard(g, mname, s, stage == 3 ? "zero3_master" : "zero_master");
    if (stage == 3) {
        set_members(g, params[0], members, n, 0, stage);
        zero3_set_init(g, params[0], params + 1, n);
    } else {
        /* No results, and more operands than ir_emit infers: added as
         * they are (the verifier checks their shape rule). */
        ir_add_node(g, IR_OP_SHARD_COPY, params, n + 1, &ra, NULL, NULL, u0loc(members));
    }
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
            for (int i = 0; i < n; i++)
                lowp[i + 1] = members[i]->in.v[k];
            continue;
        }
        const char *member = ir_val(g, u0->in.v[k])->name, *dot = strrchr(member, '.');
        char *name = kl_xasprintf("%s.%s", base, dot ? dot + 1 : member);
        args[nupd] = declare_shard(g, name, s, "optimizer_state");
        free(name);
        set_members(g, args[nupd++], members, n, k, stage);
        for (int i = 0; i < n; i++)
            olds[i][nold] = members[i]->in.v[k];
        nold++;
    }
    if (stage == 3) {
        /* The params go (shard_zero3.c gathers them where they are
         * read); the 16-bit copies are sliced as the masters are, the
         * update writes this rank's slice. */
        z3->n = n;
        z3->master = params[0];
        z3->lowp_slice = -1;
        for (int i = 0; i < n; i++) {
            z3->params[i] = params[i + 1];
            z3->lowp[i] = has_lowp ? lowp[i + 1] : -1;
        }
        if (has_lowp) {
            char *lname = kl_xasprintf("%s.lowp", mname);
            ir_type lt = {ir_val(g, lowp[1])->type.dtype, 1, {s}};
            z3->lowp_slice = ir_declare(g, IR_VAL_STATE, lname, &lt, (kl_loc){0, 0});
            free(lname);
            ir_attrs_set_str(&ir_val(g, z3->lowp_slice)->attrs, "role", "lowp");
            zero3_set_init(g, z3->lowp_slice, params + 1, n);
            args[nupd++] = z3->lowp_slice;
        }
        has_lowp = false;
    }
    ir_emit(g, u0->op, args, nupd, &u0->attrs, NULL);
    ir_nd(g, g->nodes.n - 1)->loc = u0->loc;
    if (stage == 3) {
        /* Nothing gathered after the update. */
    } else if (has_lowp) {
        /* One all-gather fills the params and their copies. */
        int both[2 * ZERO_LOWP_MEMBERS + 1];
        kl_check(n <= ZERO_LOWP_MEMBERS);
        memcpy(both, params, sizeof(int) * (size_t)(n + 1));
        memcpy(both + n + 1, lowp + 1, sizeof(int) * (size_t)n);
        ir_attrs ga;
        ir_attrs_copy(&ga, &ra);
        ir_attrs_set_int(&ga, "copies", 1);
        ir_add_node(g, IR_OP_SHARD_GATHER, both, 2 * n + 1, &ga, NULL, NULL, u0loc(members));
        ir_attrs_free(&ga);
    } else {
        /* ir_add_node sets no defaults; the text format's reader does. */
        ir_attrs ga;
        ir_attrs_copy(&ga, &ra);
        ir_attrs_set_int(&ga, "copies", 0);
        ir_add_node(g, IR_OP_SHARD_GATHER, params, n + 1, &ga, NULL, NULL, u0loc(members));
        ir_attrs_free(&ga);
    }
    for (int i = 0; i < n; i++)
        ir_kill_node(g, members[i]);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nold; k++)
            ir_undeclare(g, olds[i][k]);
    /* This slice's part of the squared norm. */
    if (sq_total) {
        int sq = ir_emit1(g, IR_OP_SUM, ir_emit2(g, IR_OP_MUL, gs, gs, NULL), NULL);
        sq = pass_tp_norm_share(g, sq, params[1]);
        *sq_total = *sq_total < 0 ? sq : ir_emit2(g, IR_OP_ADD, *sq_total, sq, NULL);
    }
    set_phase(g, stage >= 2 ? u0n : b0, IR_PHASE_UPDATE);
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

/* Dead code left by the rewiring (the whole gradients' squared norms),
 * so that nothing in the update phase reads a whole gradient or an old
 * accumulator any more. */
static void remove_dead(ir_graph *g, int first)
{
    for (int i = first - 1; i >= 0; i--) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_UPDATE || n->out.n == 0)
            continue;
        if (!ir_node_used(g, n))
            ir_kill_node(g, n);
    }
}

/* zero2: each bucket's backward nodes (runs in placed, ended by -1) moved
 * to just after the last producer of the gradients they read, so that the
 * schedule (program order among the ready nodes) reduce-scatters a bucket
 * as soon as its gradients are complete and the whole gradients' arena
 * lifetimes end there. */
static void place_early(ir_graph *g, const zero_vals *placed)
{
    int n = g->nodes.n;
    int *after = kl_xmalloc(sizeof(int) * (size_t)(n + 1)), *moved = kl_xcalloc((size_t)n + 1, sizeof(int));
    int *order = kl_xmalloc(sizeof(int) * (size_t)(n + 1)), on = 0;
    for (int k = 0; k < n; k++)
        after[k] = -1;
    /* after[anchor] = the first index in placed of a run anchored there. */
    int *next_run = kl_xmalloc(sizeof(int) * (size_t)(placed->n + 1));
    for (int r = 0; r < placed->n;) {
        int anchor = -1, end = r;
        while (placed->v[end] >= 0)
            end++;
        for (int k = r; k < end; k++) {
            const ir_node *x = ir_nd(g, placed->v[k]);
            moved[placed->v[k]] = 1;
            for (int j = 0; j < x->in.n; j++) {
                int d = ir_val(g, x->in.v[j])->def;
                if (d >= 0 && ir_nd(g, d)->phase == IR_PHASE_BACKWARD && !moved[d] && d > anchor)
                    anchor = d;
            }
        }
        next_run[r] = -1;
        if (anchor >= 0) {
            /* Runs anchored at the same node keep their order. */
            int *at = &after[anchor];
            while (*at >= 0)
                at = &next_run[*at];
            *at = r;
        }
        r = end + 1;
    }
    for (int k = 0; k < n; k++) {
        if (!moved[k])
            order[on++] = k;
        for (int r = moved[k] ? -1 : after[k]; r >= 0; r = next_run[r])
            for (int q = r; placed->v[q] >= 0; q++)
                order[on++] = placed->v[q];
    }
    /* A run without a backward anchor stays where it is. */
    for (int r = 0; r < placed->n;) {
        int end = r;
        while (placed->v[end] >= 0)
            end++;
        bool put = false;
        for (int q = 0; q < on && !put; q++)
            put = order[q] == placed->v[r];
        for (int q = r; q < end && !put; q++)
            order[on++] = placed->v[q];
        r = end + 1;
    }
    kl_check(on == n);
    ir_reorder(g, order);
    free(after);
    free(moved);
    free(order);
    free(next_run);
}

int pass_shard_zero(ir_graph *g, int ranks, int64_t bucket_bytes, int stage)
{
    int first = g->nodes.n;
    KL_VEC(ir_node *) ups = {0};
    /* Pipeline stages: a bucket holds one stage's updates (its
     * data-parallel ranks slice them; the other stages never hold them)
     * and its nodes run there (_stage). */
    int *node_stage = kl_xmalloc(sizeof(int) * (size_t)(first + 1));
    bool staged = pass_pipeline_assign(g, node_stage) > 0;
    for (int i = 0; i < first && !staged; i++)
        node_stage[i] = -1;
    int rc = 0;
    for (int i = 0; i < first && !rc; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_UPDATE || (n->op != IR_OP_ADAM_UPDATE && n->op != IR_OP_SGD_UPDATE))
            continue;
        const ir_value *p = ir_val(g, n->in.v[0]), *d = ir_val(g, n->in.v[1]);
        if (p->type.dtype != IR_F32 || d->type.dtype != IR_F32) {
            pass_error(g, p->loc, "shard = zero%d partitions f32 params and gradients; %s is %s (gradient %s)", stage,
                       p->name, ir_dtype_name(p->type.dtype), ir_dtype_name(d->type.dtype));
            rc = -1;
        }
        kl_vec_push(ups, n);
    }
    /* zero2: buckets in backward's order (the last param's gradient is
     * the first one complete), as DDP's. */
    if (stage >= 2)
        for (int i = 0, j = ups.n - 1; i < j; i++, j--) {
            ir_node *t = ups.v[i];
            ups.v[i] = ups.v[j];
            ups.v[j] = t;
        }
    /* The clipping norm and the fp16 check: their squared norm is
     * replaced by the slices'. */
    int old_sq = zero_old_sqnorm(g), new_sq = -1;
    int no = 0;
    zero_vals dead_accs = {0}, placed = {0};
    KL_VEC(zero3_bucket) z3 = {0};
    for (int i = 0; i < ups.n && !rc; i++) {
        if (!ups.v[i])
            continue;
        ir_node *members[ZERO_MAX_MEMBERS];
        int m = 0;
        int64_t bytes = 0;
        int most = has_lowp_operand(g, ups.v[i]) ? ZERO_LOWP_MEMBERS : ZERO_MAX_MEMBERS;
        for (int j = i; j < ups.n && m < most; j++) {
            if (!ups.v[j] || node_stage[ups.v[j]->id] != node_stage[ups.v[i]->id] ||
                !same_update(ups.v[i], ups.v[j]) ||
                pass_tp_is_split(g, ups.v[i]->in.v[0]) != pass_tp_is_split(g, ups.v[j]->in.v[0]))
                continue;
            int64_t b = ir_type_bytes(&ir_val(g, ups.v[j]->in.v[0])->type);
            if (m > 0 && (bucket_bytes == 0 || bytes + b > bucket_bytes))
                break;
            members[m++] = ups.v[j];
            bytes += b;
            if (j != i)
                ups.v[j] = NULL;
        }
        int st = node_stage[ups.v[i]->id], mark = g->nodes.n;
        ups.v[i] = NULL;
        zero3_bucket b = {0};
        zero_bucket(g, members, m, ranks, stage, no++, old_sq >= 0 ? &new_sq : NULL, &dead_accs, &placed, &b);
        pass_pipeline_mark(g, mark, st);
        if (stage == 3)
            kl_vec_push(z3, b);
    }
    free(ups.v);
    free(node_stage);
    if (!rc && old_sq >= 0) {
        ir_attrs a = {0};
        ir_attrs_set_str(&a, "reduce", "sum");
        ir_attrs_set_int(&a, "ranks", ranks);
        char *name = kl_xasprintf("zero%d.grad_sqnorm", stage);
        int sum = ir_emit(g, IR_OP_ALL_REDUCE, &new_sq, 1, &a, name);
        free(name);
        ir_attrs_free(&a);
        ir_nd(g, g->nodes.n - 1)->phase = IR_PHASE_UPDATE;
        sum = pass_tp_norm_sum(g, sum);
        ir_nd(g, g->nodes.n - 1)->phase = IR_PHASE_UPDATE;
        const ir_value *ov = ir_val(g, old_sq);
        for (int u = ov->uses.n - 1; u >= 0; u--) {
            ir_use use = ov->uses.v[u];
            if (use.node < first)
                ir_set_operand(g, ir_nd(g, use.node), use.operand, sum);
        }
    }
    if (!rc) {
        remove_dead(g, first);
        for (int i = 0; i < dead_accs.n; i++)
            ir_undeclare(g, dead_accs.v[i]);
        if (placed.n)
            place_early(g, &placed);
        if (stage == 3)
            rc = pass_zero3_gathers(g, z3.v, z3.n, ranks);
    }
    free(z3.v);
    free(dead_accs.v);
    free(placed.v);
    if (rc)
        return rc;
    ir_compact(g);
    ir_toposort(g);
    return 0;
}
