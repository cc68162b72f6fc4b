/* Sessions and execs: binding plans to memory and running them. */
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "runtime/observe/trace.h"
#include "runtime/data/data.h"
#include "runtime/observe/nvtx.h"
#include "overlap.h"
#include "tp.h"
#include "zero3.h"

kl_session *kl_session_new(kl_backend *be, uint64_t seed)
{
    kl_session *s = kl_xcalloc(1, sizeof *s);
    s->be = be;
    s->seed = seed;
    return s;
}

void kl_session_free(kl_session *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->persist.n; i++) {
        s->be->ops->free(s->be, s->persist.v[i].ptr);
        free(s->persist.v[i].name);
        free(s->persist.v[i].role);
    }
    kl_vec_free(s->persist);
    kl_comm_thread_stop(s->comm_thread);
    free(s);
}

kl_persist *kl_session_find(kl_session *s, const char *name)
{
    for (int i = 0; i < s->persist.n; i++)
        if (!strcmp(s->persist.v[i].name, name))
            return &s->persist.v[i];
    return NULL;
}

/* The session's memory for persistent value v, made and initialised on
 * first use. */
static void *persistent_ptr(kl_session *s, const ir_value *v)
{
    kl_persist *p = kl_session_find(s, v->name);
    if (p) {
        if (!ir_type_eq(&p->type, &v->type))
            kl_panic("persistent value %s changes type between plans", v->name);
        return p->ptr;
    }
    size_t bytes = (size_t)ir_type_bytes(&v->type);
    void *host = kl_xcalloc(1, bytes ? bytes : 1);
    ir_attr *init = ir_attrs_find(&v->attrs, "init");
    const char *from = init && init->val.kind == IR_ATTR_CALL && !strcmp(init->val.s, "copy") && init->val.args
                           ? ir_attr_str(init->val.args, "from", NULL) : NULL;
    if (from) {
        /* A low-precision copy of a param: its master's values, rounded. */
        kl_persist *m = kl_session_find(s, from);
        if (!m || ir_type_numel(&m->type) != ir_type_numel(&v->type))
            kl_panic("%s copies %s, which the session does not hold", v->name, from);
        size_t mb = (size_t)ir_type_bytes(&m->type);
        void *mh = kl_xmalloc(mb);
        s->be->ops->copy_out(s->be, mh, m->ptr, mb);
        for (int64_t i = 0; i < ir_type_numel(&v->type); i++)
            kl_store_as(v->type.dtype, host, i, kl_load_as(m->type.dtype, mh, i));
        free(mh);
    } else if (ir_attrs_find(&v->attrs, "params")) {
        /* A zero3 slice (passes/shard_zero3.c): this rank's share of the
         * params' inits. */
        kl_zero3_init(v, s->seed, s->comm ? kl_comm_rank(s->comm) : 0, host);
    } else if (ir_attrs_find(&v->attrs, "tp_axis")) {
        /* A tensor-parallel slice: this rank's share of the full param. */
        kl_comm *tp = kl_comm_tp(s->comm);
        kl_tp_init(v, s->seed, tp ? kl_comm_rank(tp) : 0, host);
    } else {
        kl_init_values(v, s->seed, host);
    }
    const char *role = v->kind == IR_VAL_PARAM ? "param" : ir_attr_str(&v->attrs, "role", "state");
    kl_persist np = {kl_xstrdup(v->name), v->type, s->be->ops->alloc(s->be, bytes), kl_xstrdup(role)};
    s->be->ops->copy_in(s->be, np.ptr, host, bytes);
    free(host);
    kl_vec_push(s->persist, np);
    return np.ptr;
}

static kl_exec *exec_new(kl_session *s, ir_graph *g, kl_plan *plan, kl_exec *host);
static void bind_buffers(kl_exec *e);
static void run_collective(kl_exec *e, int step, const void *src);

/* The communicator of collective n: the session's, or its
 * tensor-parallel group for group = "tp" (passes/shard_tp.c). */
static kl_comm *node_comm(kl_comm *c, const ir_node *n)
{
    const char *group = ir_attr_str(&n->attrs, "group", NULL);
    return group && !strcmp(group, "tp") ? kl_comm_tp(c) : c;
}

/* A plan's collectives need the backend's (MPI on the CPU, NCCL on the
 * GPU), in a world of the size they were compiled for. */
static int check_collectives(const kl_session *s, const kl_plan *p)
{
    for (int i = 0; i < p->steps.n; i++) {
        if (p->steps.v[i].kind != KL_STEP_COLLECTIVE)
            continue;
        const ir_node *n = ir_nd(p->g, p->steps.v[i].node);
        kl_comm *c = node_comm(s->comm, n);
        int world = c ? kl_comm_world(c) : 1;
        int64_t ranks = ir_attr_int(&n->attrs, "ranks", 1);
        if (!s->be->ops->collective) {
            kl_error("%s: collectives (%s) on the %s backend need NCCL, which this build lacks (no nccl.h when it was "
                     "built)\n---> run with --device cpu, or rebuild with NCCL's headers",
                     p->g->name, ir_op_name(n->op), s->be->ops->name);
            return -1;
        }
        if (ranks != world) {
            kl_error("%s: the plan was compiled for %lld ranks (%s), but this run has %d", p->g->name, (long long)ranks,
                     ir_op_name(n->op), world);
            return -1;
        }
    }
    return 0;
}

/* The overlap of e's collectives, when the session asks for it and they
 * communicate: more than one rank, and MPI lets a second thread call it
 * (MPI_THREAD_SERIALIZED; else they run in program order, as asked by
 * overlap = off). */
static int start_overlap(kl_exec *e)
{
    kl_session *s = e->s;
    bool any = false;
    for (int i = 0; i < e->plan->steps.n && !any; i++)
        any = e->plan->steps.v[i].kind == KL_STEP_COLLECTIVE;
    if (!any || !s->overlap || !s->comm || kl_comm_world(s->comm) < 2)
        return 0;
    /* A device backend's collectives run on its communication stream:
     * the overlap orders them, no thread needed. */
    if (s->be->ops->collective_wait) {
        e->overlap = kl_overlap_new(e, NULL, run_collective);
        return 0;
    }
    if (!kl_comm_serialized(s->comm))
        return 0;
    if (!s->comm_thread && !(s->comm_thread = kl_comm_thread_start()))
        return -1;
    e->overlap = kl_overlap_new(e, s->comm_thread, run_collective);
    return 0;
}

kl_exec *kl_exec_new(kl_session *s, ir_graph *g, kl_plan *plan)
{
    return exec_new(s, g, plan, NULL);
}

kl_exec *kl_exec_new_sharing(kl_session *s, ir_graph *g, kl_plan *plan, kl_exec *host)
{
    return exec_new(s, g, plan, host);
}

static kl_exec *exec_new(kl_session *s, ir_graph *g, kl_plan *plan, kl_exec *host)
{
    if (plan->g != g)
        kl_panic("an exec's plan is not the plan of its graph");
    kl_exec *e = kl_xcalloc(1, sizeof *e);
    e->s = s;
    e->g = g;
    e->plan = plan;
    if (check_collectives(s, plan)) {
        kl_exec_free(e);
        return NULL;
    }
    if (s->be->ops->prepare(s->be, e->plan)) {
        kl_exec_free(e);
        return NULL;
    }
    kl_plan *p = e->plan;
    e->arena_host = e;
    if (host && host->arena && p->arena_bytes <= host->plan->arena_bytes) {
        e->arena = host->arena;
        e->arena_shared = true;
        e->arena_host = host->arena_host;
    } else {
        e->arena = s->be->ops->alloc(s->be, (size_t)(p->arena_bytes ? p->arena_bytes : 256));
    }
    e->ptrs = kl_xcalloc((size_t)p->buffers.n + 1, sizeof(void *));
    e->args = kl_xcalloc((size_t)p->steps.n + 1, sizeof(void **));
    for (int i = 0; i < p->steps.n; i++)
        if (p->steps.v[i].kind == KL_STEP_KERNEL)
            e->args[i] = kl_xcalloc((size_t)p->steps.v[i].nargs + 1, sizeof(void *));
    bind_buffers(e);
    if (start_overlap(e)) {
        kl_exec_free(e);
        return NULL;
    }
    e->lt_done = kl_xcalloc((size_t)p->steps.n + 1, sizeof(bool));
    return e;
}

/* Each buffer's pointer (the arena's at its offset, or the session's
 * persistent value; a view its base's) and each kernel step's
 * arguments. */
static void bind_buffers(kl_exec *e)
{
    kl_plan *p = e->plan;
    for (int i = 0; i < p->buffers.n; i++) {
        kl_buffer *b = &p->buffers.v[i];
        if (b->region == KL_REGION_ARENA)
            e->ptrs[i] = (char *)e->arena + b->offset;
        else if (b->region == KL_REGION_PERSISTENT)
            e->ptrs[i] = persistent_ptr(e->s, ir_val(e->g, b->value));
    }
    for (int i = 0; i < p->buffers.n; i++)
        if (p->buffers.v[i].region == KL_REGION_VIEW)
            e->ptrs[i] = e->ptrs[plan_real_buffer(p, i)];
    for (int i = 0; i < p->steps.n; i++)
        for (int k = 0; e->args[i] && k < p->steps.v[i].nargs; k++)
            e->args[i][k] = e->ptrs[p->steps.v[i].args[k]];
}

void kl_exec_rebind_arena(kl_exec *e)
{
    if (e->arena_shared || e->arena_user)
        kl_panic("an exec's arena is placed again after it ran or while another exec shares it");
    e->s->be->ops->free(e->s->be, e->arena);
    e->arena = e->s->be->ops->alloc(e->s->be, (size_t)(e->plan->arena_bytes ? e->plan->arena_bytes : 256));
    bind_buffers(e);
}

void kl_exec_free(kl_exec *e)
{
    if (!e)
        return;
    kl_overlap_free(e->overlap);
    if (e->args)
        for (int i = 0; i < e->plan->steps.n; i++)
            free(e->args[i]);
    free(e->args);
    free(e->lt_done);
    free(e->ptrs);
    free(e->step_seconds);
    for (int i = 0; e->labels && i < e->plan->steps.n; i++)
        free(e->labels[i]);
    free(e->labels);
    free(e->step_runs);
    free(e->step_hidden);
    for (int i = 0; i < e->ngraphs; i++)
        if (e->graphs[i].graph)
            e->s->be->ops->graph_free(e->s->be, e->graphs[i].graph);
    if (e->arena && !e->arena_shared)
        e->s->be->ops->free(e->s->be, e->arena);
    plan_free(e->plan);
    ir_graph_free(e->g);
    free(e);
}

/* shard_copy and shard_gather (ops.def), on host memory: the f32 shard
 * x[0] (m elements) and the values x[1..] (their plan buffers args[1..])
 * it is this rank's slice of (flattened, one after the other, padded with
 * zeros). */
static void run_shard_host(kl_exec *e, const kl_step *st, const ir_node *n, void *const *x, int64_t m)
{
    kl_comm *c = e->s->comm;
    int rank = c ? kl_comm_rank(c) : 0, world = c ? kl_comm_world(c) : 1;
    float *shard = x[0];
    int64_t total = m * world;
    float *full = NULL;
    if (n->op == IR_OP_SHARD_GATHER) {
        full = kl_xmalloc((size_t)total * sizeof *full);
        if (c)
            kl_comm_all_gather(c, shard, m, full, IR_F32, ir_val(e->g, n->in.v[0])->name);
        else
            memcpy(full, shard, (size_t)m * sizeof *full);
    }
    /* copies (shard_gather): the second half of the values gets the
     * first half's elements again. */
    int k = ir_attr_int(&n->attrs, "copies", 0) ? (st->nargs - 1) / 2 : st->nargs - 1;
    int64_t at = 0, lo = (int64_t)rank * m, hi = lo + m;
    for (int i = 1; i < st->nargs; i++) {
        if (i == k + 1)
            at = 0;
        const kl_buffer *xb = &e->plan->buffers.v[st->args[i]];
        for (int64_t j = 0; j < xb->numel; j++, at++) {
            if (full)
                kl_store_as(xb->dtype, x[i], j, full[at]);
            else if (at >= lo && at < hi)
                shard[at - lo] = (float)kl_load_as(xb->dtype, x[i], j);
        }
    }
    if (!full)
        for (int64_t k = at > lo ? at - lo : 0; k < m; k++)
            shard[k] = 0;
    free(full);
}

/* shard_copy and shard_gather: in place on the CPU; a device backend's
 * operands go through host memory, the gather's all_gather through MPI
 * (correct, but a copy each way in every zero1/zero2 update on the GPU:
 * device kernels and NCCL's all_gather for them are not built yet). */
static void run_shard(kl_exec *e, const kl_step *st, const ir_node *n)
{
    kl_backend *be = e->s->be;
    int64_t m = e->plan->buffers.v[st->args[0]].numel;
    void *x[IR_KERNEL_MAX_BUFS];
    bool host = !strcmp(be->ops->name, "cpu");
    for (int i = 0; i < st->nargs; i++) {
        const kl_buffer *b = &e->plan->buffers.v[st->args[i]];
        x[i] = host ? e->ptrs[st->args[i]] : kl_xmalloc((size_t)b->bytes + 1);
        if (!host) {
            be->ops->collective_wait(be);
            be->ops->copy_out(be, x[i], e->ptrs[st->args[i]], (size_t)b->bytes);
        }
    }
    run_shard_host(e, st, n, x, m);
    for (int i = 0; !host && i < st->nargs; i++) {
        be->ops->copy_in(be, e->ptrs[st->args[i]], x[i], (size_t)e->plan->buffers.v[st->args[i]].bytes);
        free(x[i]);
    }
}

/* The collectives, by the backend (backend.h: MPI on host memory, NCCL on
 * the GPU's). src: what the collective reads in place of its operand (the
 * communication thread's staged copy). */
static void run_collective(kl_exec *e, int step, const void *src)
{
    const kl_step *st = &e->plan->steps.v[step];
    const kl_buffer *in = &e->plan->buffers.v[st->args[0]];
    const ir_node *n = ir_nd(e->g, st->node);
    kl_coll k = {.comm = node_comm(e->s->comm, n), .in = src, .out = e->ptrs[st->args[1]], .count = in->numel,
                 .dt = in->dtype, .what = ir_val(e->g, n->in.v[0])->name};
    switch (n->op) {
    case IR_OP_ALL_REDUCE:
        k.kind = KL_COLL_ALL_REDUCE;
        k.op = strcmp(ir_attr_str(&n->attrs, "reduce", "sum"), "max") ? KL_REDUCE_SUM : KL_REDUCE_MAX;
        break;
    case IR_OP_RANK_BROADCAST:
        k.kind = KL_COLL_BROADCAST;
        k.root = (int)ir_attr_int(&n->attrs, "root", 0);
        break;
    case IR_OP_REDUCE_SCATTER:
        k.kind = KL_COLL_REDUCE_SCATTER;
        break;
    case IR_OP_ALL_GATHER:
        k.kind = KL_COLL_ALL_GATHER;
        break;
    case IR_OP_SHARD_COPY:
    case IR_OP_SHARD_GATHER:
        run_shard(e, st, n);
        return;
    default:
        kl_panic("run_collective: %s is not a collective", ir_op_name(n->op));
    }
    e->s->be->ops->collective(e->s->be, &k);
}

/* A GEMM step: with its epilogue in the library's store where the
 * backend takes it (the kernel step after it is then skipped). */
static void run_gemm_step(kl_exec *e, int i)
{
    kl_backend *be = e->s->be;
    const kl_gemm *g = &e->plan->steps.v[i].gemm;
    void *a = e->ptrs[g->a], *b = e->ptrs[g->b], *c = e->ptrs[g->c];
    bool done = false;
    if (g->epi.kind != KL_LT_NONE && be->ops->gemm_epilogue) {
        kl_epi_ptrs x = {e->ptrs[g->epi.d], g->epi.bias >= 0 ? e->ptrs[g->epi.bias] : NULL,
                         g->epi.aux >= 0 ? e->ptrs[g->epi.aux] : NULL};
        done = be->ops->gemm_epilogue(be, g, a, b, c, &x);
    }
    if (!done)
        be->ops->gemm(be, g, a, b, c);
    if (i + 1 < e->plan->steps.n)
        e->lt_done[i + 1] = done;
}

/* Runs step i; false when it had nothing to do (its GEMM's epilogue did
 * its work). */
static bool run_step(kl_exec *e, int i, const kl_kargs *args)
{
    kl_backend *be = e->s->be;
    kl_plan *p = e->plan;
    kl_step *st = &p->steps.v[i];
    if (st->kind == KL_STEP_KERNEL) {
        if (st->lt_covered && e->lt_done[i])
            return false;
        be->ops->launch(be, p, st->kernel, e->args[i], args);
    } else if (st->kind == KL_STEP_COLLECTIVE) {
        double t0 = kl_now();
        run_collective(e, i, e->ptrs[st->args[0]]);
        /* In program order: later steps see its result. */
        if (be->ops->collective_wait)
            be->ops->collective_wait(be);
        double secs = kl_now() - t0;
        e->comm_seconds += secs;
        e->comm_waited += secs;
        e->comm_calls++;
    } else
        run_gemm_step(e, i);
    return true;
}

static void make_labels(kl_exec *e)
{
    if (!e->labels) {
        e->labels = kl_xcalloc((size_t)e->plan->steps.n + 1, sizeof(char *));
        for (int i = 0; i < e->plan->steps.n; i++)
            e->labels[i] = plan_step_label(e->plan, &e->plan->steps.v[i]);
    }
}

/* NVTX (a profiler attached): a range per phase around its steps, and one
 * per step named by its ops and their model-file line. *phase: the open
 * phase range, -1 for none. */
static void nvtx_enter(kl_exec *e, int i, int *phase)
{
    int ph = (int)e->plan->steps.v[i].phase;
    if (ph != *phase) {
        if (*phase >= 0)
            kl_nvtx_pop();
        kl_nvtx_push(ir_phase_name((ir_phase)ph));
        *phase = ph;
    }
    make_labels(e);
    kl_nvtx_push(e->labels[i]);
}

/* With an overlap: waits for the pending collectives step i touches, and
 * posts step i when it is a collective (true: posted, not to be run). */
static bool overlap_step(kl_exec *e, int i)
{
    if (!e->overlap)
        return false;
    kl_overlap_before(e->overlap, i);
    if (e->plan->steps.v[i].kind != KL_STEP_COLLECTIVE)
        return false;
    kl_overlap_post(e->overlap, i);
    return true;
}

/* A filtered run (kl_exec_run_filtered): whether step i is this rank's,
 * and the hook after its place in the order. */
static bool filtered_out(const kl_exec *e, int i) { return e->filter && !e->filter->run[i]; }
static void filter_at(const kl_exec *e, int i)
{
    if (e->filter && e->filter->at)
        e->filter->at(e->filter->ctx, i);
}

/* Converted GEMM operands are kept within one run of the steps in their
 * order (backend.h gemm_reuse): not across runs, between which the host
 * writes inputs and checkpoints load, nor in a filtered run, whose
 * callbacks between steps may write buffers. */
static void gemm_reuse(const kl_exec *e, bool on)
{
    kl_backend *be = e->s->be;
    if (be->ops->gemm_reuse)
        be->ops->gemm_reuse(be, on && !e->filter);
}

static void run_steps(kl_exec *e, unsigned phase_mask, const kl_kargs *args)
{
    kl_plan *p = e->plan;
    bool nvtx = kl_nvtx_on();
    int phase = -1;
    gemm_reuse(e, true);
    for (int i = 0; i < p->steps.n; i++) {
        if (!(phase_mask & (1u << p->steps.v[i].phase)))
            continue;
        if (filtered_out(e, i)) {
            filter_at(e, i);
            continue;
        }
        if (nvtx)
            nvtx_enter(e, i, &phase);
        if (!overlap_step(e, i))
            run_step(e, i, args);
        if (nvtx)
            kl_nvtx_pop();
        filter_at(e, i);
    }
    if (e->overlap)
        kl_overlap_drain(e->overlap);
    gemm_reuse(e, false);
    if (phase >= 0)
        kl_nvtx_pop();
}

/* The start-up steps, when the arena does not hold this exec's start-up
 * values: before its first run, and after another exec sharing the arena
 * ran (its values overwrite these). Never recorded into a graph. */
static void ensure_startup(kl_exec *e, const kl_kargs *args)
{
    kl_exec *h = e->arena_host;
    if (h->arena_user == e)
        return;
    h->arena_user = e;
    run_steps(e, 1u << IR_PHASE_STARTUP, args);
}

/* Whether a device backend's run of e goes through host memory in the
 * middle (run_shard's copies out and back, which synchronise): such a
 * run cannot be recorded as a graph (a capture allows no host copy). */
static bool host_round_trip(const kl_exec *e)
{
    if (!strcmp(e->s->be->ops->name, "cpu"))
        return false;
    for (int i = 0; i < e->plan->steps.n; i++) {
        const kl_step *st = &e->plan->steps.v[i];
        if (st->kind != KL_STEP_COLLECTIVE)
            continue;
        ir_op op = ir_nd(e->g, st->node)->op;
        if (op == IR_OP_SHARD_COPY || op == IR_OP_SHARD_GATHER)
            return true;
    }
    return false;
}

/* The graph record of runs with this mask, or NULL when runs are not
 * recorded. */
static kl_exec_graph *graph_of(kl_exec *e, unsigned mask)
{
    if (e->s->no_graphs || !e->s->be->ops->capture_begin || host_round_trip(e))
        return NULL;
    for (int i = 0; i < e->ngraphs; i++)
        if (e->graphs[i].mask == mask)
            return &e->graphs[i];
    if (e->ngraphs == (int)KL_ARRAY_LEN(e->graphs))
        return NULL;
    kl_exec_graph *g = &e->graphs[e->ngraphs++];
    memset(g, 0, sizeof *g);
    g->mask = mask;
    return g;
}

static void run_timed(kl_exec *e, unsigned phase_mask, const kl_kargs *args);

void kl_exec_run(kl_exec *e, unsigned phase_mask, const kl_kargs *args)
{
    kl_backend *be = e->s->be;
    /* Kernels read step and seed from the device, so a graph replays with
     * the current ones. */
    if (be->ops->set_args)
        be->ops->set_args(be, args);
    ensure_startup(e, args);
    kl_exec_graph *gr = e->step_seconds ? NULL : graph_of(e, phase_mask);
    if (gr && gr->graph) {
        be->ops->graph_launch(be, gr->graph);
        return;
    }
    if (gr && !gr->failed && ++gr->runs > KL_GRAPH_WARMUP) {
        /* Recorded, not run: the replay runs it. */
        if (be->ops->capture_begin(be) == 0) {
            run_steps(e, phase_mask, args);
            gr->graph = be->ops->capture_end(be);
        }
        if (gr->graph) {
            be->ops->graph_launch(be, gr->graph);
            return;
        }
        gr->failed = true;
    }
    if (!e->step_seconds) {
        run_steps(e, phase_mask, args);
        return;
    }
    run_timed(e, phase_mask, args);
}

/* Profiling: every step timed (synchronised after each) and traced. */
static void run_timed(kl_exec *e, unsigned phase_mask, const kl_kargs *args)
{
    kl_plan *p = e->plan;
    bool nvtx = kl_nvtx_on();
    int phase = -1;
    gemm_reuse(e, true);
    for (int i = 0; i < p->steps.n; i++) {
        if (!(phase_mask & (1u << p->steps.v[i].phase)))
            continue;
        if (filtered_out(e, i)) {
            filter_at(e, i);
            continue;
        }
        if (nvtx)
            nvtx_enter(e, i, &phase);
        if (overlap_step(e, i)) {
            /* Timed and traced when it is waited for (overlap.c). */
            if (nvtx)
                kl_nvtx_pop();
            filter_at(e, i);
            continue;
        }
        double t0 = kl_now();
        if (!run_step(e, i, args)) {
            if (nvtx)
                kl_nvtx_pop();
            filter_at(e, i);
            continue; /* done by its GEMM's epilogue: not a row of the profile */
        }
        e->s->be->ops->sync(e->s->be);
        double t1 = kl_now();
        if (nvtx)
            kl_nvtx_pop();
        e->step_seconds[i] += t1 - t0;
        e->step_runs[i]++;
        if (e->trace)
            kl_trace_event(e->trace, e->labels[i], p->steps.v[i].kind == KL_STEP_GEMM         ? "gemm"
                           : p->steps.v[i].kind == KL_STEP_COLLECTIVE ? "collective"
                                                                      : "kernel",
                           KL_TRACE_KERNELS, t0, t1);
        filter_at(e, i);
    }
    if (e->overlap)
        kl_overlap_drain(e->overlap);
    gemm_reuse(e, false);
    if (phase >= 0)
        kl_nvtx_pop();
}

void kl_exec_run_filtered(kl_exec *e, unsigned phase_mask, const kl_kargs *args, const kl_exec_filter *f)
{
    kl_backend *be = e->s->be;
    if (be->ops->set_args)
        be->ops->set_args(be, args);
    ensure_startup(e, args);
    e->filter = f;
    if (!e->step_seconds)
        run_steps(e, phase_mask, args);
    else
        run_timed(e, phase_mask, args);
    e->filter = NULL;
}

void kl_exec_trace(kl_exec *e, kl_trace *t)
{
    kl_exec_profile(e);
    e->trace = t;
    make_labels(e);
}

void kl_exec_profile(kl_exec *e)
{
    if (!e->step_seconds) {
        e->step_seconds = kl_xcalloc((size_t)e->plan->steps.n + 1, sizeof(double));
        e->step_runs = kl_xcalloc((size_t)e->plan->steps.n + 1, sizeof(int64_t));
        e->step_hidden = kl_xcalloc((size_t)e->plan->steps.n + 1, sizeof(double));
    }
}

typedef struct prof_row {
    char *label;
    double seconds, bytes, flops;
    int64_t calls;
} prof_row;

static int by_time(const void *a, const void *b)
{
    double x = ((const prof_row *)a)->seconds, y = ((const prof_row *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

void kl_exec_print_profile(const kl_exec *e, FILE *out, int top)
{
    const kl_plan *p = e->plan;
    if (!e->step_seconds)
        return;
    prof_row *rows = kl_xcalloc((size_t)p->steps.n + 1, sizeof *rows);
    int n = 0;
    double total = 0;
    for (int i = 0; i < p->steps.n; i++) {
        if (!e->step_runs[i])
            continue;
        char *label = plan_step_label(p, &p->steps.v[i]);
        int r;
        for (r = 0; r < n && strcmp(rows[r].label, label); r++)
            ;
        if (r == n)
            rows[n++].label = label;
        else
            free(label);
        rows[r].seconds += e->step_seconds[i];
        rows[r].calls += e->step_runs[i];
        rows[r].bytes += (double)p->steps.v[i].bytes * (double)e->step_runs[i];
        rows[r].flops += p->steps.v[i].flops * (double)e->step_runs[i];
        total += e->step_seconds[i];
    }
    qsort(rows, (size_t)n, sizeof *rows, by_time);
    fprintf(out, "%-64s %7s %10s %6s %8s %8s\n", "step (ops @ line:col in def)", "calls", "ms/call", "share", "GB/s", "GFLOP/s");
    for (int r = 0; r < n; r++) {
        if (r < top) {
            double per = rows[r].seconds / (double)rows[r].calls;
            fprintf(out, "%-64.64s %7lld %10.4f %5.1f%% %8.2f", rows[r].label, (long long)rows[r].calls, 1e3 * per,
                    100 * rows[r].seconds / (total > 0 ? total : 1), rows[r].bytes / rows[r].seconds / 1e9);
            if (rows[r].flops > 0)
                fprintf(out, " %8.2f", rows[r].flops / rows[r].seconds / 1e9);
            fputc('\n', out);
        }
        free(rows[r].label);
    }
    fprintf(out, "total %.1f ms over %d distinct steps\n", 1e3 * total, n);
    if (e->comm_calls)
        fprintf(out, "collectives: %.1f ms over %lld calls (%s), %.1f ms exposed (waited for), %.1f ms (%.0f%%) hidden behind compute\n",
                1e3 * e->comm_seconds, (long long)e->comm_calls,
                e->overlap ? "on the communication thread, in the total above though they overlap compute" : "in program order",
                1e3 * e->comm_waited, 1e3 * (e->comm_seconds - e->comm_waited),
                e->comm_seconds > 0 ? 100 * (e->comm_seconds - e->comm_waited) / e->comm_seconds : 0.0);
    free(rows);
}

/* Between runs the runtime may touch only what the plan keeps there:
 * pinned values (inputs, the loss, reports, kept values) and persistent
 * ones; the memory of the others is reused within a run. */
static void check_pinned(const kl_exec *e, int v, int b)
{
    const kl_buffer *x = &e->plan->buffers.v[b];
    if (e->plan->planned && !x->pinned && e->plan->buffers.v[plan_real_buffer(e->plan, b)].region == KL_REGION_ARENA)
        kl_panic("%s is accessed between runs, but the memory plan reuses its memory (name it in kl_plan_opts.keep)",
                 ir_val(e->g, v)->name);
}

void kl_exec_write(kl_exec *e, int v, const void *host, size_t bytes)
{
    int b = e->plan->value_buf[v];
    kl_check(b >= 0 && (size_t)e->plan->buffers.v[b].bytes == bytes);
    check_pinned(e, v, b);
    e->s->be->ops->copy_in(e->s->be, e->ptrs[b], host, bytes);
}

void kl_exec_random_inputs(kl_exec *e, uint64_t seed)
{
    const ir_graph *g = e->g;
    int classes = 2;
    for (int i = 0; i < g->nodes.n; i++)
        if (ir_nd(g, i)->op == IR_OP_CROSS_ENTROPY && !ir_nd(g, i)->dead)
            classes = (int)ir_val(g, ir_nd(g, i)->in.v[0])->type.dim[1];
    uint64_t s = seed;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        int64_t n = ir_type_numel(&v->type);
        void *h = kl_xcalloc((size_t)ir_type_bytes(&v->type) + 1, 1);
        for (int64_t k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t r = s >> 33;
            double x = v->type.dtype == IR_U8 ? (double)(r % 256)
                       : ir_dtype_is_float(v->type.dtype) ? (double)r / 2147483648.0 * 2 - 1
                                                          : (double)(r % (uint64_t)classes);
            kl_store_as(v->type.dtype, h, k, x);
        }
        kl_exec_write(e, v->id, h, (size_t)ir_type_bytes(&v->type));
        free(h);
    }
}

void kl_exec_read(kl_exec *e, int v, void *host, size_t bytes)
{
    int b = e->plan->value_buf[v];
    kl_check(b >= 0 && (size_t)e->plan->buffers.v[b].bytes == bytes);
    check_pinned(e, v, b);
    e->s->be->ops->copy_out(e->s->be, host, e->ptrs[b], bytes);
}

double kl_exec_scalar(kl_exec *e, int v)
{
    ir_dtype dt = ir_val(e->g, v)->type.dtype;
    unsigned char buf[8];
    kl_exec_read(e, v, buf, (size_t)ir_dtype_size(dt));
    return kl_load_as(dt, buf, 0);
}
