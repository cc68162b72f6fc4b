/* Building the plan from a fused, scheduled graph: one step per fusion
 * group (a generated kernel, or a GEMM for a matmul), buffers for the
 * values that live in memory, and arena offsets.
 *
 * Constants are folded into the kernels that read them; reshape and
 * flatten are views of their operand's buffer. Memory planning (liveness,
 * in-place results, offsets) is codegen/memplan.c. */
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "memplan.h"
#include "plan.h"
#include "plan_build.h"

void plan_free(kl_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->kernels.n; i++) {
        free(p->kernels.v[i].name);
        free(p->kernels.v[i].what);
        free(p->kernels.v[i].c_src);
        kir_cuda_free(&p->kernels.v[i].cuda);
    }
    kl_vec_free(p->kernels);
    kl_vec_free(p->buffers);
    kl_vec_free(p->steps);
    free(p->value_buf);
    free(p);
}

int plan_real_buffer(const kl_plan *p, int buf)
{
    while (p->buffers.v[buf].region == KL_REGION_VIEW)
        buf = p->buffers.v[buf].view_of;
    return buf;
}

int plan_step_buffers(const kl_step *st, int *bufs)
{
    if (st->kind != KL_STEP_GEMM) {
        memcpy(bufs, st->args, sizeof(int) * (size_t)st->nargs);
        return st->nargs;
    }
    const kl_gemm_epilogue *e = &st->gemm.epi;
    int n = 0;
    bufs[n++] = st->gemm.a;
    bufs[n++] = st->gemm.b;
    bufs[n++] = st->gemm.c;
    if (e->kind != KL_LT_NONE) {
        bufs[n++] = e->d;
        if (e->bias >= 0)
            bufs[n++] = e->bias;
        if (e->aux >= 0)
            bufs[n++] = e->aux;
    }
    return n;
}

/* A scratch buffer (not an IR value); its kernel-side id is -2 - index. */
int plan_scratch(kl_plan *p, ir_dtype dt, int64_t numel)
{
    kl_buffer b = {.value = -1, .dtype = dt, .numel = numel, .region = KL_REGION_ARENA, .view_of = -1};
    b.bytes = numel * ir_dtype_size(dt);
    kl_vec_push(p->buffers, b);
    return p->buffers.n - 1;
}

int plan_scratch_id(int buf)
{
    return -2 - buf;
}

/* The buffer of value v, made on first request. */
int plan_buffer_of(kl_plan *p, int v)
{
    if (v <= -2)
        return -2 - v;
    if (p->value_buf[v] >= 0)
        return p->value_buf[v];
    const ir_graph *g = p->g;
    const ir_value *val = ir_val(g, v);
    kl_buffer b = {.value = v, .dtype = val->type.dtype, .numel = ir_type_numel(&val->type)};
    b.bytes = b.numel * ir_dtype_size(b.dtype);
    b.view_of = -1;
    if (ir_is_persistent(val)) {
        b.region = KL_REGION_PERSISTENT;
    } else if (val->def >= 0 && ir_op_is_view(ir_nd(g, val->def)->op)) {
        b.region = KL_REGION_VIEW;
        b.view_of = plan_buffer_of(p, ir_nd(g, val->def)->in.v[0]);
    } else {
        b.region = KL_REGION_ARENA;
    }
    kl_vec_push(p->buffers, b);
    p->value_buf[v] = p->buffers.n - 1;
    return p->buffers.n - 1;
}

static int add_kernel(kl_plan *p, kir_kernel *k, const cg_attn_native *attn)
{
    char *c_src = kir_finish(k);
    for (int i = 0; i < p->kernels.n; i++)
        if (!strcmp(p->kernels.v[i].name, k->name)) {
            free(c_src);
            return i;
        }
    kl_kernel_src s = {kl_xstrdup(k->name), kl_xstrdup(k->what), c_src, {0}, *attn};
    kir_emit_cuda(k, &s.cuda);
    if (attn->kind != CG_ATTN_NONE) /* the tiled kernel where it fits */
        cg_cuda_attention(attn, k->name, &s.cuda);
    kl_vec_push(p->kernels, s);
    return p->kernels.n - 1;
}

/* Results written over operands that die here (plan_inplace_pairs):
 * the result's buffer becomes a view of the operand's, and the kernel
 * prints the two without restrict. This runs before add_kernel names the
 * kernel after a hash of its source. */
static void make_inplace(kl_plan *p, const cg_group *grp, kir_kernel *k)
{
    int pairs[32][2];
    int n = plan_inplace_pairs(p, grp, k, pairs, 32);
    for (int i = 0; i < n; i++) {
        kir_buf *in = &k->bufs[pairs[i][0]], *out = &k->bufs[pairs[i][1]];
        int base = plan_buffer_of(p, in->value), result = plan_buffer_of(p, out->value);
        kl_buffer *ob = &p->buffers.v[result];
        ob->region = KL_REGION_VIEW;
        ob->view_of = base;
        ob->inplace = true;
        in->aliased = out->aliased = true;
    }
}

static void add_collective_step(kl_plan *p, const ir_node *n)
{
    /* Every collective is one step of the operand and the result (the
     * runtime: session.c). */
    if (n->op == IR_OP_SHARD_COPY || n->op == IR_OP_SHARD_GATHER) {
        /* The shard, then the values it is a slice of, all in place. */
        kl_step s = {.kind = KL_STEP_COLLECTIVE, .phase = n->phase, .node = n->id, .nargs = n->in.n};
        kl_check(n->in.n <= IR_KERNEL_MAX_BUFS);
        for (int i = 0; i < n->in.n; i++) {
            s.args[i] = plan_buffer_of(p, n->in.v[i]);
            s.rw[i] = ir_op_mutates(n->op, i) ? KL_ARG_WRITE : KL_ARG_READ;
            s.bytes += ir_type_bytes(&ir_val(p->g, n->in.v[i])->type);
        }
        kl_vec_push(p->steps, s);
        return;
    }
    kl_step s = {.kind = KL_STEP_COLLECTIVE, .phase = n->phase, .node = n->id, .nargs = 2};
    s.args[0] = plan_buffer_of(p, n->in.v[0]);
    s.args[1] = plan_buffer_of(p, n->out.v[0]);
    s.rw[0] = KL_ARG_READ;
    s.rw[1] = KL_ARG_WRITE | KL_ARG_WRITE_FIRST;
    s.bytes = ir_type_bytes(&ir_val(p->g, n->in.v[0])->type) + ir_type_bytes(&ir_val(p->g, n->out.v[0])->type);
    kl_vec_push(p->steps, s);
}

static void describe_group(kl_buf *b, const cg_group *grp)
{
    for (int i = 0; i < grp->n; i++)
        kl_buf_printf(b, "%s%s", i ? " + " : "", ir_op_name(ir_nd(grp->g, grp->nodes[i])->op));
}

/* The node that decides a group's kernel template: its one node that is
 * not elementwise, or the first node. */
static const ir_node *anchor_of(const cg_group *grp)
{
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(grp->g, grp->nodes[i]);
        if (!ir_op_is_pointwise(n->op) && ir_ops[n->op].kclass != IR_KC_SOURCE)
            return n;
    }
    return ir_nd(grp->g, grp->nodes[0]);
}

static void add_kernel_step(kl_plan *p, const cg_group *grp)
{
    plan_add_kernel_step_with(p, grp, NULL, NULL);
}

void plan_add_kernel_step_with(kl_plan *p, const cg_group *grp, plan_kernel_builder custom, void *arg)
{
    const ir_graph *g = p->g;
    kl_buf what = {0};
    describe_group(&what, grp);
    int vals[64], nv = 0;
    for (int i = 0; i < grp->n && nv < 60; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        for (int k = 0; k < n->in.n && nv < 60; k++)
            vals[nv++] = n->in.v[k];
        for (int k = 0; k < n->out.n && nv < 60; k++)
            vals[nv++] = n->out.v[k];
    }
    kir_kernel *k = kir_new(what.s, cg_compute_type(g, vals, nv));
    kl_buf_free(&what);
    cg_builder b = {.grp = grp, .k = k, .ncached = g->values.n};
    b.cached = kl_xmalloc(sizeof(int) * (size_t)(g->values.n + 1));
    b.cached_ids = kl_xmalloc(sizeof(int) * (size_t)(g->values.n + 1));
    memset(b.cached, 0xff, sizeof(int) * (size_t)g->values.n); /* every entry -1 */
    const ir_node *anchor = anchor_of(grp);
    if (custom) {
        custom(&b, arg);
        goto built;
    }
    switch (ir_ops[anchor->op].kclass) {
    case IR_KC_SOURCE:
    case IR_KC_ELEMWISE:
    case IR_KC_RANDOM:
        cg_build_elementwise(&b);
        break;
    case IR_KC_MOVE:
        if (ir_op_is_pointwise(anchor->op))
            cg_build_elementwise(&b);
        else
            cg_build_move(&b, anchor);
        break;
    case IR_KC_UPDATE:
        /* Every update of the group, one after the other in one kernel. */
        for (int i = 0; i < grp->n; i++)
            cg_build_update(&b, ir_nd(g, grp->nodes[i]));
        break;
    case IR_KC_REDUCE:
        if (cg_epilogue_sums(grp)) /* a GEMM epilogue with bias gradients */
            cg_build_epilogue_sums(&b);
        else
            cg_build_reduce(&b, anchor);
        break;
    case IR_KC_NORM:
        cg_build_norm(&b, anchor);
        break;
    case IR_KC_POOL:
        cg_build_pool(&b, anchor);
        break;
    case IR_KC_ATTN:
        cg_build_attention(&b, anchor);
        break;
    default:
        kl_panic("no kernel template for %s (%s)", ir_op_name(anchor->op), ir_kernel_class_name(ir_ops[anchor->op].kclass));
    }
built:
    free(b.cached);
    free(b.cached_ids);
    /* A group may hold forward and backward nodes (softmax + cross-entropy
     * with its gradient): it runs with the latest, unless a node of an
     * earlier phase outside the group reads what it computes (a
     * synchronised batch norm's normalisation reads the inverse standard
     * deviation that its gradient's nodes share): then with that
     * reader, so that a run of one phase alone (a pipeline stage's
     * forward pass) has it; its backward members read only what is
     * computed by then. (Start-up and update kernels never hold nodes
     * of another phase: fusion.c.) */
    ir_phase phase = IR_PHASE_FORWARD;
    for (int i = 0; i < grp->n; i++)
        if (ir_nd(g, grp->nodes[i])->phase > phase)
            phase = ir_nd(g, grp->nodes[i])->phase;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *m = ir_nd(g, grp->nodes[i]);
        for (int o = 0; o < m->out.n; o++) {
            const ir_value *v = ir_val(g, m->out.v[o]);
            for (int u = 0; u < v->uses.n; u++) {
                const ir_node *r = ir_nd(g, v->uses.v[u].node);
                bool inside = false;
                for (int j = 0; j < grp->n && !inside; j++)
                    inside = grp->nodes[j] == r->id;
                if (!inside && !r->dead && phase == IR_PHASE_BACKWARD && r->phase == IR_PHASE_FORWARD)
                    phase = IR_PHASE_FORWARD;
            }
        }
    }
    kl_step s = {.kind = KL_STEP_KERNEL, .phase = phase, .node = grp->nodes[0]};
    for (int i = 0; i < k->nbufs; i++) {
        kl_check(s.nargs < (int)KL_ARRAY_LEN(s.args));
        s.rw[s.nargs] = (uint8_t)plan_kernel_arg_use(k, i);
        s.args[s.nargs++] = plan_buffer_of(p, k->bufs[i].value);
        s.bytes += k->bufs[i].numel * ir_dtype_size(k->bufs[i].dtype) * ((k->bufs[i].read ? 1 : 0) + (k->bufs[i].written ? 1 : 0));
    }
    if (!custom && p->planned)
        make_inplace(p, grp, k);
    cg_attn_native attn = {.kind = CG_ATTN_NONE};
    if (!custom && ir_ops[anchor->op].kclass == IR_KC_ATTN)
        cg_attention_native(grp, k, &attn);
    s.kernel = add_kernel(p, k, &attn);
    kir_free(k);
    kl_vec_push(p->steps, s);
}

static void push_gemm(kl_plan *p, const ir_node *n, const kl_gemm *m)
{
    kl_step s = {.kind = KL_STEP_GEMM, .phase = n->phase, .gemm = *m, .node = n->id};
    int64_t na = m->stride_a ? m->batch : 1, nb = m->stride_b ? m->batch : 1;
    s.bytes = (na * m->m * m->k + nb * m->k * m->n) * ir_dtype_size(m->dtype) +
              m->batch * m->m * m->n * ir_dtype_size(m->out_dtype);
    s.flops = 2.0 * (double)m->m * (double)m->n * (double)m->k * (double)m->batch;
    kl_vec_push(p->steps, s);
}

/* t's batch dimensions (all but the last two), right-aligned to nb
 * dimensions with 1 where t has fewer. */
static void batch_dims(const ir_type *t, int nb, int64_t *d)
{
    int lead = nb - (t->rank - 2);
    for (int i = 0; i < nb; i++)
        d[i] = i < lead ? 1 : t->dim[i - lead];
}

/* Whether operand dims d cover dims c from i on entirely, or not at all. */
static int64_t inner_items(const int64_t *d, const int64_t *c, int i, int nb, bool *ok)
{
    bool all = true, none = true;
    int64_t items = 1;
    for (int j = i; j < nb; j++) {
        all &= d[j] == c[j];
        none &= d[j] == 1;
        items *= d[j];
    }
    *ok = all || none;
    return items;
}

/* A matmul whose operands' batch dimensions broadcast against each other
 * ([2, 1] against [1, 3]): the innermost batch dimensions that each
 * operand has entirely or not at all run as one strided batched GEMM, and
 * one such GEMM runs per index of the dimensions outside them. */
static void add_broadcast_gemms(kl_plan *p, const ir_node *n, const kl_gemm *base)
{
    const ir_graph *g = p->g;
    const ir_type *a = &ir_val(g, n->in.v[0])->type, *bt = &ir_val(g, n->in.v[1])->type;
    const ir_type *c = &ir_val(g, n->out.v[0])->type;
    int nb = c->rank - 2;
    int64_t da[IR_MAX_RANK], db[IR_MAX_RANK], dc[IR_MAX_RANK];
    batch_dims(a, nb, da);
    batch_dims(bt, nb, db);
    batch_dims(c, nb, dc);
    int split = nb;
    int64_t ia = 1, ib = 1, ic = 1;
    for (int i = nb - 1; i >= 0; i--) {
        bool oka, okb;
        int64_t xa = inner_items(da, dc, i, nb, &oka), xb = inner_items(db, dc, i, nb, &okb);
        if (!oka || !okb)
            break;
        split = i, ia = xa, ib = xb, ic *= dc[i];
    }
    int64_t outer = 1;
    for (int i = 0; i < split; i++)
        outer *= dc[i];
    int64_t ma = base->m * base->k, mb = base->k * base->n, mc = base->m * base->n;
    for (int64_t o = 0; o < outer; o++) {
        kl_gemm m = *base;
        m.batch = ic;
        m.stride_a = ia == 1 ? 0 : ma;
        m.stride_b = ib == 1 ? 0 : mb;
        m.stride_c = mc;
        /* The item offsets of o's index in each operand (row-major over the
         * outer dimensions, 0 along a broadcast one). */
        int64_t rest = o, sa = ia, sb = ib;
        for (int i = split - 1; i >= 0; i--) {
            int64_t idx = rest % dc[i];
            rest /= dc[i];
            m.off_a += (da[i] == 1 ? 0 : idx) * sa * ma;
            m.off_b += (db[i] == 1 ? 0 : idx) * sb * mb;
            sa *= da[i];
            sb *= db[i];
        }
        m.off_c = o * ic * mc;
        push_gemm(p, n, &m);
    }
}

static void add_gemm_step(kl_plan *p, const ir_node *n)
{
    const ir_graph *g = p->g;
    const ir_type *a = &ir_val(g, n->in.v[0])->type, *bt = &ir_val(g, n->in.v[1])->type;
    const ir_type *c = &ir_val(g, n->out.v[0])->type;
    kl_gemm m = {.dtype = a->dtype, .out_dtype = c->dtype, .alpha = 1, .beta = 0};
    m.ta = (int)ir_attr_int(&n->attrs, "transpose_a", 0);
    m.tb = (int)ir_attr_int(&n->attrs, "transpose_b", 0);
    m.m = c->dim[c->rank - 2];
    m.n = c->dim[c->rank - 1];
    m.k = a->dim[a->rank - (m.ta ? 2 : 1)];
    int64_t batch = ir_type_numel(c) / (m.m * m.n);
    int64_t abatch = ir_type_numel(a) / (m.m * m.k), bbatch = ir_type_numel(bt) / (m.k * m.n);
    m.a = plan_buffer_of(p, n->in.v[0]);
    m.b = plan_buffer_of(p, n->in.v[1]);
    m.c = plan_buffer_of(p, n->out.v[0]);
    if (bbatch == 1 && !m.ta && batch > 1 && abatch == batch) {
        /* Rows of every batch item against one matrix: one tall GEMM. */
        m.m *= batch;
        batch = 1;
    }
    m.batch = batch;
    if (batch > 1) {
        if ((abatch != batch && abatch != 1) || (bbatch != batch && bbatch != 1)) {
            add_broadcast_gemms(p, n, &m);
            return;
        }
        m.stride_a = abatch == 1 ? 0 : m.m * m.k;
        m.stride_b = bbatch == 1 ? 0 : m.k * m.n;
        m.stride_c = m.m * m.n;
    }
    push_gemm(p, n, &m);
}

static void pin(kl_plan *p, int v)
{
    int b = plan_buffer_of(p, v);
    p->buffers.v[b].pinned = true;
}

/* A constant read as a buffer (by a GEMM or an output): a fill kernel. */
static void materialize_consts(kl_plan *p)
{
    const ir_graph *g = p->g;
    for (int v = 0; v < g->values.n; v++) {
        const ir_value *val = ir_val(g, v);
        if (p->value_buf[v] < 0 || val->def < 0 || ir_nd(g, val->def)->op != IR_OP_CONST)
            continue;
        int node = val->def;
        cg_group grp = {g, &node, 1};
        /* Prepend: constants are ready before any step reads them. */
        int before = p->steps.n;
        add_kernel_step(p, &grp);
        kl_step s = p->steps.v[before];
        /* Read at start-up: filled once, then kept (per-step readers too). */
        bool startup = false;
        for (int u = 0; u < val->uses.n; u++)
            startup |= ir_nd(g, val->uses.v[u].node)->phase == IR_PHASE_STARTUP;
        if (startup) {
            s.phase = IR_PHASE_STARTUP;
            pin(p, v);
        }
        memmove(&p->steps.v[1], &p->steps.v[0], sizeof(kl_step) * (size_t)before);
        p->steps.v[0] = s;
    }
}

bool plan_memplan_enabled(void)
{
    const char *e = getenv("KILN_MEMPLAN");
    return !e || strcmp(e, "0");
}

kl_plan *plan_lower(const ir_graph *g, const kl_plan_opts *o)
{
    kl_plan *p = kl_xcalloc(1, sizeof *p);
    p->g = g;
    p->planned = !(o && o->unplanned) && plan_memplan_enabled();
    p->nvalues = g->values.n;
    p->value_buf = kl_xmalloc(sizeof(int) * (size_t)(g->values.n + 1));
    for (int i = 0; i < g->values.n; i++)
        p->value_buf[i] = -1;
    /* Every declared value and every output gets a buffer, used or not,
     * so the runtime can feed inputs and read results; those it writes or
     * reads between runs are pinned (live over the whole step). */
    for (int i = 0; i < g->decls.n; i++) {
        plan_buffer_of(p, g->decls.v[i]);
        if (ir_val(g, g->decls.v[i])->kind == IR_VAL_INPUT)
            pin(p, g->decls.v[i]);
    }
    if (g->loss >= 0)
        pin(p, g->loss);
    for (int i = 0; i < g->reports.n; i++)
        pin(p, g->reports.v[i].value);
    for (int i = 0; i < g->outputs.n; i++)
        pin(p, g->outputs.v[i].value);
    for (int i = 0; o && i < o->nkeep; i++)
        pin(p, o->keep[i]);
    /* Start-up values that the steps read stay live through every step
     * (and no step writes over them in place). */
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_STARTUP)
            continue;
        for (int k = 0; k < n->out.n; k++) {
            const ir_value *v = ir_val(g, n->out.v[k]);
            bool per_step = false;
            for (int u = 0; u < v->uses.n && !per_step; u++)
                per_step = ir_nd(g, v->uses.v[u].node)->phase != IR_PHASE_STARTUP;
            if (per_step)
                pin(p, v->id);
        }
    }

    int *members = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    bool *done = kl_xcalloc((size_t)g->nodes.n + 1, 1);
    /* next[i]: the next live node of node i's group, or -1. */
    int *next = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    int ngroups = 0;
    for (int i = 0; i < g->nodes.n; i++)
        if (ir_nd(g, i)->group >= ngroups)
            ngroups = ir_nd(g, i)->group + 1;
    int *last = kl_xmalloc(sizeof(int) * (size_t)(ngroups + 1));
    for (int i = 0; i < ngroups; i++)
        last[i] = -1;
    for (int i = g->nodes.n - 1; i >= 0; i--) {
        const ir_node *n = ir_nd(g, i);
        next[i] = -1;
        if (n->group >= 0 && !n->dead) {
            next[i] = last[n->group];
            last[n->group] = i;
        }
    }
    free(last);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || done[i])
            continue;
        if (ir_op_is_view(n->op)) {
            plan_buffer_of(p, n->out.v[0]);
            continue;
        }
        if (n->op == IR_OP_CONST && n->group < 0)
            continue;
        /* The group: this node and every later node with its group id
         * (the schedule keeps a group's nodes together). */
        int cnt = 0;
        members[cnt++] = i, done[i] = true;
        for (int j = n->group >= 0 ? next[i] : -1; j >= 0; j = next[j])
            if (!done[j])
                members[cnt++] = j, done[j] = true;
        /* A collective is a step of its own: the communicator's call. */
        if (ir_ops[n->op].kclass == IR_KC_COLLECTIVE) {
            kl_check(cnt == 1);
            add_collective_step(p, n);
            continue;
        }
        /* GEMM-like anchors: the library call, then the rest of the group
         * (bias, activation) as one elementwise kernel over its result. */
        int lib = -1, gemm_step = -1;
        for (int k = 0; k < cnt; k++) {
            ir_op op = ir_nd(g, members[k])->op;
            if (op == IR_OP_MATMUL || ir_ops[op].kclass == IR_KC_CONV)
                lib = k;
        }
        if (lib >= 0) {
            const ir_node *a = ir_nd(g, members[lib]);
            cg_group one = {g, &members[lib], 1};
            if (a->op == IR_OP_MATMUL) {
                int before = p->steps.n;
                add_gemm_step(p, a);
                gemm_step = p->steps.n == before + 1 ? before : -1; /* one GEMM, not per broadcast item */
            } else
                plan_add_conv_steps(p, &one, a);
            memmove(&members[lib], &members[lib + 1], sizeof(int) * (size_t)(cnt - lib - 1));
            cnt--;
            if (cnt == 0)
                continue;
        }
        cg_group grp = {g, members, cnt};
        add_kernel_step(p, &grp);
        if (gemm_step >= 0)
            plan_match_lt_epilogue(p, gemm_step, p->steps.n - 1, &grp);
    }
    free(members);
    free(done);
    free(next);
    materialize_consts(p);
    return p;
}

char *plan_c_source(const kl_plan *p)
{
    kl_buf b = {0};
    kl_buf_puts(&b, kir_c_prelude());
    for (int i = 0; i < p->kernels.n; i++) {
        kl_buf_puts(&b, p->kernels.v[i].c_src);
        kl_buf_putc(&b, '\n');
    }
    return kl_buf_take(&b);
}

char *plan_cuda_source(const kl_plan *p)
{
    unsigned needs = 0;
    for (int i = 0; i < p->kernels.n; i++)
        needs |= p->kernels.v[i].cuda.needs;
    kl_buf b = {0};
    for (int i = 0; i < p->kernels.n; i++) {
        const kir_cuda *c = &p->kernels.v[i].cuda;
        kl_buf_puts(&b, "/* launches:");
        for (int l = 0; l < c->nlaunches; l++) {
            const kir_cuda_launch *L = &c->launches[l];
            if (L->map == KIR_CUDA_FLAT)
                kl_buf_printf(&b, " %s (flat, %lld units%s)", L->fn, (long long)L->units, L->vector > 1 ? ", vectorised" : "");
            else
                kl_buf_printf(&b, " %s (a block per outer iteration: %lld, block loops up to %lld)", L->fn, (long long)L->units,
                              (long long)L->inner);
        }
        kl_buf_puts(&b, " */\n");
        kl_buf_puts(&b, c->src);
        kl_buf_putc(&b, '\n');
    }
    char *body = kl_buf_take(&b);
    char *all = kir_cuda_program(body ? body : "", needs);
    free(body);
    return all;
}

char *plan_steps_text(const kl_plan *p)
{
    kl_buf b = {0};
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *s = &p->steps.v[i];
        const ir_node *n = ir_nd(p->g, s->node);
        kl_buf_printf(&b, "%4d %-8s %s", i, ir_phase_name(s->phase),
                      s->kind == KL_STEP_GEMM         ? "matmul"
                      : s->kind == KL_STEP_COLLECTIVE ? ir_op_name(n->op)
                                                      : p->kernels.v[s->kernel].what);
        if (n->loc.line > 0)
            kl_buf_printf(&b, " @%d:%d", n->loc.line, n->loc.col);
        if (s->kind == KL_STEP_GEMM && s->gemm.epi.kind != KL_LT_NONE)
            kl_buf_printf(&b, " [cuBLASLt epilogue %s]", plan_lt_epi_name(s->gemm.epi.kind));
        if (s->lt_covered)
            kl_buf_puts(&b, " [in the GEMM's epilogue on the GPU]");
        kl_buf_putc(&b, '\n');
    }
    return kl_buf_take(&b);
}

char *plan_step_label(const kl_plan *p, const kl_step *s)
{
    const ir_node *n = ir_nd(p->g, s->node);
    kl_buf b = {0};
    if (s->kind == KL_STEP_GEMM)
        kl_buf_puts(&b, "matmul");
    else if (s->kind == KL_STEP_COLLECTIVE)
        kl_buf_puts(&b, ir_op_name(n->op));
    else
        kl_buf_puts(&b, p->kernels.v[s->kernel].what);
    if (n->loc.line > 0)
        kl_buf_printf(&b, " @%d:%d", n->loc.line, n->loc.col);
    if (n->scope)
        kl_buf_printf(&b, " in %s", n->scope);
    if (n->phase != IR_PHASE_FORWARD)
        kl_buf_printf(&b, " (%s)", ir_phase_name(n->phase));
    return kl_buf_take(&b);
}
