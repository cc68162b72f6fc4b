/* The cost model of kiln plan: see plan_cost.h for the formulas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_cost.h"
#include "passes/passes.h"

double kl_attention_flops(const kl_kernel_src *k)
{
    const cg_attn_native *a = &k->attn;
    if (a->kind == CG_ATTN_NONE)
        return 0;
    double pair = 2.0 * (double)a->batch * (double)a->tq * (double)a->tk * (a->causal ? 0.5 : 1.0);
    double d = (double)a->d, dv = (double)a->dv;
    switch (a->kind) {
    case CG_ATTN_FORWARD: /* S = Q K^T, O = P V */
        return pair * (d + dv);
    case CG_ATTN_GRAD_Q: /* S again, dP = dO V^T, dQ = dS K */
        return pair * (d + dv + d);
    case CG_ATTN_GRAD_KV: /* S again, dV = P^T dO, dP, dK = dS^T Q */
        return pair * (d + dv + dv + d);
    default:
        return 0;
    }
}

static double dtype_peak(const kl_cluster *c, ir_dtype dt)
{
    if (dt == IR_BF16)
        return c->dev.bf16;
    if (dt == IR_F16)
        return c->dev.fp16;
    if (dt == IR_F64)
        return c->dev.fp64;
    return c->dev.fp32;
}

enum { CLS_COMPUTE, CLS_MEMORY, CLS_LAUNCH };

/* A kernel's or GEMM's seconds on one device; *cls: what bounds it. */
static double step_seconds(const kl_plan *p, const kl_step *st, const kl_cluster *c, const kl_calib *calib,
                           int64_t micro, double *flops, int *cls)
{
    const kl_cost_eff *e = &c->eff;
    double bytes = (double)st->bytes, f = 0, peak = 0, eff = 1;
    if (st->kind == KL_STEP_GEMM) {
        f = st->flops, peak = dtype_peak(c, st->gemm.dtype), eff = e->gemm;
    } else {
        const kl_kernel_src *k = &p->kernels.v[st->kernel];
        f = kl_attention_flops(k);
        if (f > 0)
            peak = dtype_peak(c, k->attn.bf16[0] ? IR_BF16 : IR_F32), eff = e->attention;
    }
    *flops = f;
    double tc = f > 0 && peak > 0 ? f / (peak * eff) : 0;
    /* A GEMM streams its operands near the full bandwidth; generated
     * kernels at eff.kernel of it. */
    double tm = bytes / (c->dev.mem_bw * (st->kind == KL_STEP_GEMM ? 1.0 : e->kernel));
    double t = tc > tm ? tc : tm;
    *cls = tc > tm ? CLS_COMPUTE : CLS_MEMORY;
    double launch = e->launch_s, measured = kl_calib_seconds(calib, p, st);
    if (calib) {
        /* Measured on this CPU: the step's key timed, else the timed
         * kernels' bandwidth; dispatch is in the context factor. */
        double bw = kl_calib_kernel_bw(calib);
        if (measured >= 0)
            t = measured;
        else if (st->kind == KL_STEP_KERNEL && bw > 0 && bytes / bw > tc)
            t = bytes / bw;
        t *= kl_calib_factor(calib, micro);
        launch = 0;
    }
    if (launch > t)
        *cls = CLS_LAUNCH;
    return t + launch;
}

/* The link a group of n ranks uses: across nodes or within one. */
typedef struct link {
    double bw, lat;
    bool inter;
} link;

static link pick_link(const kl_cluster *c, bool inter)
{
    link l = {inter ? c->inter_bw : c->intra_bw, inter ? c->inter_lat : c->intra_lat, inter};
    if (inter && c->intra_bw < l.bw)
        l.bw = c->intra_bw;
    l.bw *= c->eff.link;
    return l;
}

/* Seconds of a collective of S bytes over n ranks, and the bytes one
 * rank sends. */
static double collective_seconds(ir_op op, double S, int n, link l, double *sent)
{
    if (n <= 1) {
        *sent = 0;
        return 0;
    }
    double nn = (double)n, share = (nn - 1) / nn;
    if (op == IR_OP_ALL_REDUCE) {
        double ring = 2 * (nn - 1) * l.lat + 2 * share * S / l.bw;
        double tree = 2 * ceil(log2(nn)) * l.lat + 2 * S / l.bw;
        *sent = 2 * share * S;
        return ring < tree ? ring : tree;
    }
    if (op == IR_OP_RANK_BROADCAST) {
        *sent = S;
        return ceil(log2(nn)) * l.lat + S / l.bw;
    }
    *sent = share * S; /* reduce_scatter, all_gather */
    return (nn - 1) * l.lat + share * S / l.bw;
}

static int root_buf(const kl_plan *p, int b)
{
    for (int guard = 0; b >= 0 && p->buffers.v[b].region == KL_REGION_VIEW && guard < 64; guard++)
        b = p->buffers.v[b].view_of;
    return b;
}

/* The buffers step st touches (views followed); returns the count. */
static int step_bufs(const kl_plan *p, const kl_step *st, int *out, bool *writes)
{
    int n = 0;
    if (st->kind == KL_STEP_GEMM) {
        const kl_gemm *g = &st->gemm;
        int b[] = {g->a, g->b, g->c, g->epi.bias, g->epi.aux, g->epi.d};
        bool w[] = {false, false, true, g->epi.kind != KL_LT_NONE, g->epi.kind != KL_LT_NONE, true};
        for (int i = 0; i < 6; i++)
            if (b[i] >= 0 && (i < 3 || g->epi.kind != KL_LT_NONE))
                out[n] = root_buf(p, b[i]), writes[n++] = w[i];
    } else {
        for (int i = 0; i < st->nargs && n < IR_KERNEL_MAX_BUFS + 6; i++)
            if (st->args[i] >= 0)
                out[n] = root_buf(p, st->args[i]), writes[n++] = (st->rw[i] & (KL_ARG_WRITE | KL_ARG_WRITE_FIRST)) != 0;
    }
    return n;
}

/* One stage's pass over the plan: its compute clock, the collective
 * channel and each buffer's pending collective. */
typedef struct sim {
    double t, chan;
    double cpu;     /* the rank's busy time: steps, collectives and transfers (not its waits) */
    double *busy;   /* per buffer: when the collective on it ends */
    double cls[3];
    double intra, inter, exp_intra, exp_inter, intra_bytes, inter_bytes, flops;
} sim;

typedef struct model {
    const kl_plan *p;
    const kl_cluster *c;
    const kl_layout *L;
    const kl_calib *calib;
    int *stage;       /* per step */
    int *writer_stage;/* per buffer, scratch */
    link tp, dp;
    link *cut;        /* per cut s -> s + 1 */
    bool overlap;     /* data-parallel collectives hide behind compute */
} model;

static void wait_for(sim *s, double until, bool inter)
{
    if (until <= s->t)
        return;
    if (inter)
        s->exp_inter += until - s->t;
    else
        s->exp_intra += until - s->t;
    s->t = until;
}

/* One run of the plan's steps on stage `stage` (every step when the plan
 * is not cut), with the update phase when `update`. */
static void run_pass(const model *m, int stage, bool update, sim *s)
{
    const kl_plan *p = m->p;
    const ir_graph *g = p->g;
    int bufs[IR_KERNEL_MAX_BUFS + 8];
    bool writes[IR_KERNEL_MAX_BUFS + 8];
    for (int i = 0; i < p->buffers.n; i++)
        m->writer_stage[i] = -1;
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *st = &p->steps.v[i];
        if (st->phase == IR_PHASE_STARTUP || (st->phase == IR_PHASE_UPDATE && !update))
            continue;
        int nb = step_bufs(p, st, bufs, writes);
        if (m->stage[i] != stage) {
            /* Another stage's step: what it writes lives there. */
            for (int k = 0; k < nb; k++)
                if (writes[k])
                    m->writer_stage[bufs[k]] = m->stage[i];
            continue;
        }
        /* A buffer another stage wrote arrives (alpha + bytes / bw). */
        for (int k = 0; k < nb; k++) {
            int b = bufs[k], from = m->writer_stage[b];
            if (writes[k] || from < 0 || from == stage || p->buffers.v[b].region == KL_REGION_PERSISTENT)
                continue;
            int cut = from < stage ? stage - 1 : stage;
            link l = m->cut[cut];
            double bytes = (double)p->buffers.v[b].bytes, dt = l.lat + bytes / l.bw;
            if (l.inter)
                s->inter += dt, s->exp_inter += dt, s->inter_bytes += bytes;
            else
                s->intra += dt, s->exp_intra += dt, s->intra_bytes += bytes;
            s->t += dt;
            s->cpu += dt;
            m->writer_stage[b] = stage;
        }
        /* Steps touching a pending collective's memory wait for it. */
        for (int k = 0; k < nb; k++)
            wait_for(s, s->busy[bufs[k]], m->dp.inter);
        if (st->kind == KL_STEP_COLLECTIVE) {
            const ir_node *n = ir_nd(g, st->node);
            const char *group = ir_attr_str(&n->attrs, "group", NULL);
            bool tp = group && !strcmp(group, "tp");
            int ranks = tp ? m->L->T : m->L->D;
            link l = tp ? m->tp : m->dp;
            /* The message: what a gather writes (the whole), what the
             * others read (their operand). shard_copy takes this rank's
             * slice of the params: a copy in memory, no message. */
            double S = 0, sent = 0, dt;
            bool gather = n->op == IR_OP_ALL_GATHER || n->op == IR_OP_SHARD_GATHER;
            for (int a = 0; a < st->nargs; a++) {
                bool w = (st->rw[a] & (KL_ARG_WRITE | KL_ARG_WRITE_FIRST)) != 0;
                if (st->args[a] >= 0 && w == gather && (gather || S == 0))
                    S += (double)p->buffers.v[st->args[a]].bytes;
            }
            if (n->op == IR_OP_SHARD_COPY) {
                dt = (double)st->bytes / (m->c->dev.mem_bw * m->c->eff.kernel);
                s->t += dt;
                s->cpu += dt;
                s->cls[CLS_MEMORY] += dt;
                continue;
            }
            dt = collective_seconds(gather ? IR_OP_ALL_GATHER : n->op, S, ranks, l, &sent);
            s->cpu += dt;
            if (l.inter)
                s->inter += dt, s->inter_bytes += sent;
            else
                s->intra += dt, s->intra_bytes += sent;
            if (m->overlap && !tp) {
                double start = s->chan > s->t ? s->chan : s->t;
                s->chan = start + dt;
                for (int k = 0; k < nb; k++)
                    s->busy[bufs[k]] = s->chan;
            } else {
                wait_for(s, s->chan, l.inter);
                s->t += dt;
                if (l.inter)
                    s->exp_inter += dt;
                else
                    s->exp_intra += dt;
            }
        } else if (!(st->lt_covered && m->c->dev.gpu)) {
            double f = 0;
            int cls = CLS_MEMORY;
            double dt = step_seconds(p, st, m->c, m->calib, m->L->micro, &f, &cls);
            s->t += dt;
            s->cpu += dt;
            s->cls[cls] += dt;
            s->flops += f;
        }
        for (int k = 0; k < nb; k++)
            if (writes[k])
                m->writer_stage[bufs[k]] = stage;
    }
    /* The run ends when its collectives do. */
    wait_for(s, s->chan, m->dp.inter);
}

/* Whether ranks a and b sit on different nodes. */
static bool across(const kl_cluster *c, int a, int b)
{
    return a / c->per_node != b / c->per_node;
}

static void sim_reset(sim *s, double *busy, int nbuf)
{
    memset(s, 0, sizeof *s);
    s->busy = busy;
    for (int i = 0; i < nbuf; i++)
        busy[i] = 0;
}

/* acc += k x, field by field. */
static void sim_scale_add(sim *acc, const sim *x, double k)
{
    acc->t += k * x->t;
    acc->cpu += k * x->cpu;
    for (int i = 0; i < 3; i++)
        acc->cls[i] += k * x->cls[i];
    acc->intra += k * x->intra, acc->inter += k * x->inter;
    acc->exp_intra += k * x->exp_intra, acc->exp_inter += k * x->exp_inter;
    acc->intra_bytes += k * x->intra_bytes, acc->inter_bytes += k * x->inter_bytes;
    acc->flops += k * x->flops;
}

void kl_plan_cost(const kl_plan *p, const kl_cluster *c, const kl_calib *calib, const kl_layout *L, kl_cost *out)
{
    memset(out, 0, sizeof *out);
    const ir_graph *g = p->g;
    int P = L->P > 1 ? L->P : 1, world = L->T * P * L->D;
    model m = {.p = p, .c = c, .L = L, .calib = calib};
    m.stage = kl_xcalloc((size_t)p->steps.n + 1, sizeof *m.stage);
    if (P > 1) {
        int *ns = kl_xmalloc(sizeof(int) * ((size_t)g->nodes.n + 1));
        for (int i = 0; i < g->nodes.n; i++)
            ns[i] = 0;
        pass_pipeline_assign(g, ns);
        /* The rank a step runs on: interleaved cuts P v stages, stage k
         * on rank k mod P (its chunks are that rank's work, and what
         * crosses between two of its stages' ranks crosses their link). */
        for (int i = 0; i < p->steps.n; i++) {
            int nd = p->steps.v[i].node;
            m.stage[i] = nd >= 0 && nd < g->nodes.n && ns[nd] >= 0 ? ns[nd] % P : 0;
        }
        free(ns);
    }
    m.writer_stage = kl_xmalloc(sizeof(int) * ((size_t)p->buffers.n + 1));
    /* CPU ranks run their collectives on a communication thread (MPI
     * over shared memory: the copies and the sums are the CPU's work):
     * it hides them behind compute only on a core no rank's compute
     * thread holds; with as many ranks as cores or more, the thread
     * takes its time from the rank's own core, as if in line. */
    /* With pipeline stages the training executable runs every collective
     * in program order on the main thread (driver/train_pipeline.c): no
     * overlap there. */
    m.overlap = L->overlap && L->P <= 1 && (c->dev.gpu || c->cores <= 0 || world < c->cores);
    /* Placement: rank r is stage r mod P of data-parallel replica r / P
     * (tensor-parallel groups: T consecutive ranks); a group spans nodes
     * when its ranks do. */
    m.tp = pick_link(c, L->T > c->per_node);
    m.dp = pick_link(c, L->D > 1 && world > c->per_node);
    m.cut = kl_xcalloc((size_t)P, sizeof *m.cut);
    for (int s = 0; s + 1 < P; s++) {
        bool inter = false;
        for (int d = 0; d < L->D; d++)
            inter |= across(c, d * P + s, d * P + s + 1);
        m.cut[s] = pick_link(c, inter);
    }
    double *busy = kl_xmalloc(sizeof(double) * ((size_t)p->buffers.n + 1));
    int64_t mb = L->accumulate > 1 ? L->accumulate : 1;
    /* Per stage: one micro-batch without the update (body), and the last
     * one with it. Step = (m - 1) max_s body_s + sum_s body_s + max_s
     * (last_s - body_s); with one stage, (m - 1) body + last. */
    double max_body = 0, sum_body = 0, max_extra = 0, stages_cpu = 0;
    sim total = {0}, worst_body = {0}, worst_extra = {0};
    for (int s = 0; s < P; s++) {
        sim body, last;
        sim_reset(&body, busy, p->buffers.n);
        run_pass(&m, s, false, &body);
        sim_reset(&last, busy, p->buffers.n);
        run_pass(&m, s, true, &last);
        sum_body += body.t;
        if (body.t >= max_body)
            max_body = body.t, worst_body = body;
        sim extra = last;
        sim_scale_add(&extra, &body, -1);
        stages_cpu += (double)mb * body.cpu + extra.cpu;
        if (s == 0 || extra.t > max_extra)
            max_extra = extra.t, worst_extra = extra;
    }
    /* The busiest stage's counts, m micro-batches of them. */
    sim_scale_add(&total, &worst_body, (double)mb);
    sim_scale_add(&total, &worst_extra, 1);
    /* The host's loop per micro-batch (every stage runs it). */
    double host = c->eff.micro_s;
    /* The other stages' passes of the fill and drain: whole in gpipe and
     * 1f1b; zero_bubble (ZB-H1) defers weight gradients into them, about
     * a third of a pass each (forward, input gradient, weight gradient),
     * so (P - 1) / 3 passes stay exposed: 3m + P - 1 thirds in all. */
    /* interleaved (v stages per rank, Megatron's interleaved 1F1B) fills
     * and drains with chunks of 1/v of a rank's work: 1/v of the exposed
     * passes, (P - 1) / (vm + P - 1); its v times as many transfers are
     * in the stages' bodies (every cut crosses between two ranks' links). */
    bool zb = P > 1 && L->schedule && !strcmp(L->schedule, "zero_bubble");
    bool il = P > 1 && L->schedule && !strcmp(L->schedule, "interleaved");
    int vs = il ? pass_pipeline_count(g) / P : 1;
    vs = vs > 1 ? vs : 1;
    double fill = zb ? (sum_body - max_body) / 3 : (sum_body - max_body) / vs;
    out->critical_s = (double)(mb - 1) * (max_body + host) + max_body + fill + max_extra + host;
    /* More ranks than cores (CPU ranks under mpirun --oversubscribe):
     * the cores run every rank's busy time, and a rank that waits (a
     * pipeline's bubble, a collective's peer) yields its core to the
     * others, so the step is at least all ranks' busy time over the
     * cores, and at least the critical path. */
    double ranks_cpu = (double)(L->T * L->D) * (stages_cpu + (double)P * (double)mb * host);
    out->cores_s = c->cores > 0 && world > c->cores ? ranks_cpu / c->cores : 0;
    out->step_s = out->critical_s > out->cores_s ? out->critical_s : out->cores_s;
    out->compute_s = total.cls[CLS_COMPUTE];
    out->memory_s = total.cls[CLS_MEMORY];
    out->launch_s = total.cls[CLS_LAUNCH] + host * (double)mb;
    out->intra_s = total.intra, out->inter_s = total.inter;
    out->exposed_intra_s = total.exp_intra, out->exposed_inter_s = total.exp_inter;
    out->intra_bytes = total.intra_bytes, out->inter_bytes = total.inter_bytes;
    out->flops = total.flops;
    out->bubble = P <= 1 ? 0
                  : zb   ? (double)(P - 1) / (double)(3 * mb + P - 1)
                  : il   ? (double)(P - 1) / (double)(vs * mb + P - 1)
                         : (double)(P - 1) / (double)(mb + P - 1);
    const char *names[] = {"compute", "memory", "launch", "intra-node", "inter-node"};
    double v[] = {out->compute_s, out->memory_s, out->launch_s, out->exposed_intra_s, out->exposed_inter_s};
    int best = 0;
    for (int i = 1; i < 5; i++)
        if (v[i] > v[best])
            best = i;
    out->bound = out->cores_s > out->critical_s ? "cores" : names[best];
    /* Every time is a sum of finite, non-negative terms (a link read
     * past the cut table once gave NaN). */
    kl_check(isfinite(out->step_s) && out->step_s >= 0);
    free(busy);
    free(m.cut);
    free(m.writer_stage);
    free(m.stage);
}
