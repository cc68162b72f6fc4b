/* Pipeline parallelism at training time (pipeline_parallel = P): each of
 * P ranks runs one stage of the training plan the compiler cut
 * (passes/pipeline_stages.c; every node's stage: pass_pipeline_assign),
 * with the accumulation steps as micro-batches.
 *
 * Every rank compiles the whole plan, with one memory plan, and runs its
 * stage's steps only (kl_exec_run_filtered). A buffer one stage writes
 * and another reads crosses between them at the writer's place in the
 * plan's order: the writer sends it after the step (MPI, point to point,
 * non-blocking), the reader receives it there (waiting at most
 * comm_timeout). Activations cross forward, their gradients backward; a
 * param or state one stage updates and another reads (a tied embedding)
 * is sent after the update. Because both ranks meet each transfer at the
 * same place of the same plan, the pairs match by construction.
 *
 * The schedule: gpipe runs every micro-batch's forward, then every
 * backward; 1f1b runs P - 1 - s forwards on stage s, then one forward and
 * one backward in turn, then the remaining backwards: at most P - s
 * micro-batches in flight on stage s. A micro-batch in flight keeps its
 * saved activations (the buffers forward writes and this stage's
 * backward reads, inputs included) in a slot of host memory between its
 * forward and its backward: slots x that many bytes per stage, the
 * schedule's memory. Backward runs in micro-batch order, so the
 * gradients accumulate in the order of one rank's and the losses and
 * params equal one rank's with the same global batch.
 *
 * Before evaluation and checkpoints every rank gets each param and state
 * from the stage that updates it (train_pipeline_settle), so the
 * evaluation runs whole on every rank and rank 0 writes the same
 * checkpoint as one rank: a run saved at P = 2 resumes at P = 1.
 *
 * With a world of P x D ranks, rank r is stage r mod P of data-parallel
 * replica r / P: each stage's D ranks sum their gradients (the shard
 * pass's all_reduces, in buckets of one stage's values) over t->comm,
 * the stage's data-parallel group.
 *
 * Refused with the reason (not built): interleaved and zero_bubble
 * schedules, pipeline x tensor parallel, ZeRO and sync_batchnorm with
 * data-parallel stages, fp16's loss scaling, a GPU, and the executable's
 * uses other than training. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "train_loop.h"
#include "passes/passes.h"
#include "runtime/exec/backend_cuda.h"

/* A buffer crossing from stage `from` to `to` after step `step` (step -1:
 * after the update phase, a persistent value). */
typedef struct pipe_xfer {
    int step, buf, from, to;
} pipe_xfer;

struct train_pipe {
    int P, stage, m, slots;
    kl_pipe_schedule sched;
    kl_comm *c;       /* the pipeline group: rank = stage */
    bool *run;        /* per step: this stage's */
    int *stage_of;    /* per step */
    int *at;          /* per step: its first transfer in xfers (steps + 1 entries) */
    KL_VEC(pipe_xfer) xfers;
    KL_VEC(pipe_xfer) syncs; /* after the update */
    KL_VEC(int) stash;       /* this stage's saved buffers */
    int64_t stash_bytes;     /* per micro-batch */
    char *slot_mem;          /* slots x stash_bytes */
    int loss_stage, loss_phase, report_stage, report_phase;
    int64_t sent_bytes, recv_bytes;
};

/* Settings this build does not run across stages: the reason, or NULL. */
static const char *not_built(const trainer *t, const kl_backend *be)
{
    const kl_train_config *c = &t->cfg;
    if (c->pipeline_schedule == KL_PIPE_INTERLEAVED)
        return "pipeline_schedule = interleaved is not built (gpipe and 1f1b are)";
    if (c->pipeline_schedule == KL_PIPE_ZERO_BUBBLE)
        return "pipeline_schedule = zero_bubble is not built (gpipe and 1f1b are)";
    if (c->tensor_parallel > 1)
        return "pipeline_parallel with tensor_parallel is not built";
    if (c->precision == KL_PREC_FP16)
        return "pipeline_parallel with precision = fp16 (loss scaling's check spans the stages) is not built";
    if (t->opt.eval_only || t->opt.generate || t->opt.predict)
        return "--eval-only, --generate and --predict run on one rank: pipeline_parallel applies to training";
    if (be && kl_backend_is_cuda(be))
        return "pipeline_parallel runs on the CPU backend in this build (--device cpu)";
    return NULL;
}

int train_pipeline_check(trainer *t)
{
    int P = t->cfg.pipeline_parallel;
    t->pp = 1;
    if (P <= 1)
        return 0;
    const char *why = not_built(t, NULL);
    if (why) {
        kl_error("%s: pipeline_parallel = %d (schedule %s): %s\n"
                 "---> use pipeline_schedule = gpipe or 1f1b, or train with pipeline_parallel = 1",
                 t->model, P, kl_pipe_schedule_name(t->cfg.pipeline_schedule), why);
        return -1;
    }
    if (t->world % P) {
        kl_error("%s: pipeline_parallel = %d does not divide the world of %d rank%s (the world is stages x "
                 "data-parallel ranks)\n---> launch a multiple of %d ranks (mpirun -np %d ...)",
                 t->model, P, t->world, t->world == 1 ? "" : "s", P, P);
        return -1;
    }
    if (t->world > P && t->cfg.shard != KL_SHARD_NONE && t->cfg.shard != KL_SHARD_DP) {
        kl_error("%s: pipeline_parallel = %d with shard = %s on %d data-parallel ranks is not built\n"
                 "---> use shard = dp with stages", t->model, P,
                 t->cfg.shard == KL_SHARD_ZERO1 ? "zero1" : t->cfg.shard == KL_SHARD_ZERO2 ? "zero2" : "zero3", t->world / P);
        return -1;
    }
    if (t->world > P && t->cfg.sync_batchnorm) {
        kl_error("%s: pipeline_parallel = %d with sync_batchnorm = true on %d data-parallel ranks is not built",
                 t->model, P, t->world / P);
        return -1;
    }
    t->comm = kl_comm_split_pp(t->comm, P);
    t->pp = P;
    t->stage = kl_comm_rank(kl_comm_pp(t->comm));
    t->rank = kl_comm_rank(t->comm);
    t->world = kl_comm_world(t->comm);
    if (t->stage) {
        free(t->cfg.tensorboard);
        t->cfg.tensorboard = NULL;
    }
    return 0;
}

/* The buffers step st reads and writes (real buffers, views followed). */
static int step_access(const kl_plan *p, const kl_step *st, int *bufs, bool *reads, bool *writes)
{
    int n = 0;
    if (st->kind == KL_STEP_GEMM) {
        const kl_gemm *g = &st->gemm;
        bufs[n] = g->a, reads[n] = true, writes[n++] = false;
        bufs[n] = g->b, reads[n] = true, writes[n++] = false;
        bufs[n] = g->c, reads[n] = g->beta != 0 || g->accumulate, writes[n++] = true;
    } else if (st->kind == KL_STEP_COLLECTIVE) {
        bufs[n] = st->args[0], reads[n] = true, writes[n++] = false;
        bufs[n] = st->args[1], reads[n] = false, writes[n++] = true;
    } else {
        for (int k = 0; k < st->nargs; k++, n++) {
            bufs[n] = st->args[k];
            reads[n] = (st->rw[k] & KL_ARG_READ) && !(st->rw[k] & KL_ARG_WRITE_FIRST);
            writes[n] = (st->rw[k] & (KL_ARG_WRITE | KL_ARG_WRITE_FIRST)) != 0;
        }
    }
    for (int k = 0; k < n; k++)
        bufs[k] = bufs[k] >= 0 ? plan_real_buffer(p, bufs[k]) : -1;
    return n;
}

static void add_xfer(train_pipe *q, int step, int buf, int from, int to)
{
    for (int i = 0; i < q->xfers.n; i++)
        if (q->xfers.v[i].step == step && q->xfers.v[i].buf == buf && q->xfers.v[i].to == to)
            return;
    pipe_xfer x = {step, buf, from, to};
    kl_vec_push(q->xfers, x);
}

/* The transfers, the saved buffers and the persistent values' owners,
 * from the plan's steps in order (the same on every rank). */
static void analyse(trainer *t, train_pipe *q)
{
    const kl_plan *p = t->train->plan;
    const ir_graph *g = t->train->g;
    int ns = p->steps.n, nb = p->buffers.n;
    int *node_stage = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    pass_pipeline_assign(g, node_stage);
    q->run = kl_xcalloc((size_t)ns + 1, sizeof *q->run);
    q->stage_of = kl_xcalloc((size_t)ns + 1, sizeof *q->stage_of);
    q->at = kl_xcalloc((size_t)ns + 2, sizeof *q->at);
    for (int i = 0; i < ns; i++) {
        q->stage_of[i] = node_stage[p->steps.v[i].node];
        q->run[i] = q->stage_of[i] == q->stage || p->steps.v[i].phase == IR_PHASE_STARTUP;
    }
    free(node_stage);
    int *writer = kl_xmalloc(sizeof(int) * (size_t)(nb + 1));
    int *owner = kl_xmalloc(sizeof(int) * (size_t)(nb + 1));
    bool *saved = kl_xcalloc((size_t)nb + 1, 1);
    bool *read_by = kl_xcalloc((size_t)nb * (size_t)q->P + 1, 1);
    for (int b = 0; b < nb; b++)
        writer[b] = owner[b] = -1;
    for (int i = 0; i < ns; i++) {
        const kl_step *st = &p->steps.v[i];
        int bufs[IR_KERNEL_MAX_BUFS + 4], n;
        bool rd[IR_KERNEL_MAX_BUFS + 4], wr[IR_KERNEL_MAX_BUFS + 4];
        n = step_access(p, st, bufs, rd, wr);
        int s = q->stage_of[i];
        for (int k = 0; k < n; k++) {
            int b = bufs[k];
            if (b < 0 || !rd[k] || st->phase == IR_PHASE_STARTUP)
                continue;
            read_by[(size_t)b * (size_t)q->P + (size_t)s] = true;
            int w = writer[b];
            if (w >= 0 && p->steps.v[w].phase != IR_PHASE_STARTUP && q->stage_of[w] != s) {
                /* Written by another stage: it crosses after the writer. */
                add_xfer(q, w, b, q->stage_of[w], s);
            }
            /* Saved for backward: forward made it (or the host fed it). */
            bool from_forward = w >= 0 ? p->steps.v[w].phase == IR_PHASE_FORWARD : p->buffers.v[b].pinned;
            if (st->phase == IR_PHASE_BACKWARD && s == q->stage && from_forward &&
                p->buffers.v[b].region == KL_REGION_ARENA)
                saved[b] = true;
        }
        for (int k = 0; k < n; k++) {
            if (bufs[k] < 0 || !wr[k] || st->phase == IR_PHASE_STARTUP)
                continue;
            writer[bufs[k]] = i;
            if (p->buffers.v[bufs[k]].region == KL_REGION_PERSISTENT)
                owner[bufs[k]] = s;
        }
    }
    /* The transfers were added at their readers; sorted by writer step
     * (stable: the order they were met in), so each step's are together. */
    for (int i = 1; i < q->xfers.n; i++)
        for (int j = i; j > 0 && q->xfers.v[j - 1].step > q->xfers.v[j].step; j--) {
            pipe_xfer x = q->xfers.v[j];
            q->xfers.v[j] = q->xfers.v[j - 1];
            q->xfers.v[j - 1] = x;
        }
    for (int i = 0, k = 0; i <= ns; i++) {
        while (k < q->xfers.n && q->xfers.v[k].step < i)
            k++;
        q->at[i] = k;
    }
    for (int b = 0; b < nb; b++) {
        if (p->buffers.v[b].region == KL_REGION_PERSISTENT && owner[b] >= 0)
            for (int s = 0; s < q->P; s++)
                if (s != owner[b] && read_by[(size_t)b * (size_t)q->P + (size_t)s]) {
                    pipe_xfer x = {-1, b, owner[b], s};
                    kl_vec_push(q->syncs, x);
                }
        if (saved[b]) {
            kl_vec_push(q->stash, b);
            q->stash_bytes += p->buffers.v[b].bytes;
        }
    }
    /* The persistent values' owners, for settle: kept in writer[]. */
    free(writer);
    free(saved);
    free(read_by);
    /* The loss and the first report: the stage and phase of their step. */
    q->loss_stage = q->report_stage = -1;
    for (int i = 0; i < ns; i++) {
        int bufs[IR_KERNEL_MAX_BUFS + 4], n;
        bool rd[IR_KERNEL_MAX_BUFS + 4], wr[IR_KERNEL_MAX_BUFS + 4];
        n = step_access(p, &p->steps.v[i], bufs, rd, wr);
        for (int k = 0; k < n; k++) {
            if (!wr[k] || bufs[k] < 0)
                continue;
            if (g->loss >= 0 && bufs[k] == plan_real_buffer(p, p->value_buf[g->loss]))
                q->loss_stage = q->stage_of[i], q->loss_phase = p->steps.v[i].phase;
            if (g->reports.n && bufs[k] == plan_real_buffer(p, p->value_buf[g->reports.v[0].value]))
                q->report_stage = q->stage_of[i], q->report_phase = p->steps.v[i].phase;
        }
    }
    free(owner);
}

int train_pipeline_prepare(trainer *t)
{
    if (t->pp <= 1)
        return 0;
    const char *why = not_built(t, t->s->be);
    if (why) {
        kl_error("%s: pipeline_parallel = %d: %s", t->model, t->pp, why);
        return -1;
    }
    train_pipe *q = kl_xcalloc(1, sizeof *q);
    t->pipe = q;
    q->P = t->pp;
    q->stage = t->stage;
    q->c = kl_comm_pp(t->comm);
    q->m = t->cfg.accumulate > 1 ? (int)t->cfg.accumulate : 1;
    q->sched = t->cfg.pipeline_schedule;
    q->slots = q->sched == KL_PIPE_GPIPE ? q->m : (q->P - q->stage < q->m ? q->P - q->stage : q->m);
    if (pass_pipeline_count(t->train->g) != q->P) {
        kl_error("%s: the training plan has %d stages, but pipeline_parallel = %d", t->model,
                 pass_pipeline_count(t->train->g), q->P);
        return -1;
    }
    analyse(t, q);
    /* A collective's result may still be on the communication thread at
     * its step's place: none crosses (buckets are one stage's). */
    for (int i = 0; i < q->xfers.n; i++)
        if (t->train->plan->steps.v[q->xfers.v[i].step].kind == KL_STEP_COLLECTIVE) {
            kl_error("%s: pipeline_parallel = %d: a collective's result (step %d) crosses to another stage", t->model,
                     q->P, q->xfers.v[i].step);
            return -1;
        }
    q->slot_mem = kl_xmalloc((size_t)(q->stash_bytes * q->slots) + 1);
    return 0;
}

/* At step i's place: this stage sends what it wrote there and receives
 * what another stage wrote there. */
static void at_step(void *ctx, int i)
{
    trainer *t = ctx;
    train_pipe *q = t->pipe;
    kl_exec *e = t->train;
    for (int k = q->at[i]; k < q->at[i + 1]; k++) {
        const pipe_xfer *x = &q->xfers.v[k];
        size_t bytes = (size_t)e->plan->buffers.v[x->buf].bytes;
        const char *what = e->plan->buffers.v[x->buf].value >= 0 ? ir_val(e->g, e->plan->buffers.v[x->buf].value)->name
                                                                  : "a scratch buffer";
        if (x->from == q->stage) {
            kl_comm_send(q->c, e->ptrs[x->buf], bytes, x->to, k, what);
            q->sent_bytes += (int64_t)bytes;
        } else if (x->to == q->stage) {
            kl_comm_recv(q->c, e->ptrs[x->buf], bytes, x->from, k, what);
            q->recv_bytes += (int64_t)bytes;
        }
    }
}

static void stash(train_pipe *q, kl_exec *e, int k, bool save)
{
    char *at = q->slot_mem + (size_t)(k % q->slots) * (size_t)q->stash_bytes;
    for (int i = 0; i < q->stash.n; i++) {
        int b = q->stash.v[i];
        size_t n = (size_t)e->plan->buffers.v[b].bytes;
        if (save)
            memcpy(at, e->ptrs[b], n);
        else
            memcpy(e->ptrs[b], at, n);
        at += n;
    }
}

/* The loss and report of a micro-batch whose phase ph just ran here. */
static void read_results(trainer *t, train_loop *lp, int ph, double *sums)
{
    train_pipe *q = t->pipe;
    if (q->loss_stage == q->stage && q->loss_phase == ph)
        sums[0] += kl_exec_scalar(t->train, t->train->g->loss);
    if (lp->metric_count && q->report_stage == q->stage && q->report_phase == ph)
        sums[1] += kl_exec_scalar(t->train, t->train->g->reports.v[0].value);
}

static int forward(trainer *t, train_loop *lp, int k, double *sums)
{
    train_pipe *q = t->pipe;
    double w0 = kl_now();
    const kl_batch *b = kl_loader_next(lp->loader);
    if (t->trace)
        kl_trace_event(t->trace, "next batch", "data", KL_TRACE_DATA, w0, kl_now());
    if (!b)
        return -1;
    train_feed(t->train, &t->tb, b);
    kl_loader_release(lp->loader, b);
    lp->args.step = lp->step * q->m + k;
    kl_exec_filter f = {q->run, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_FORWARD, &lp->args, &f);
    read_results(t, lp, IR_PHASE_FORWARD, sums);
    stash(q, t->train, k, true);
    return 0;
}

static void backward(trainer *t, train_loop *lp, int k, double *sums)
{
    train_pipe *q = t->pipe;
    stash(q, t->train, k, false);
    lp->args.step = lp->step * q->m + k;
    kl_exec_filter f = {q->run, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_BACKWARD, &lp->args, &f);
    read_results(t, lp, IR_PHASE_BACKWARD, sums);
}

/* The params and state another stage reads, from the stage that updated
 * them (after every update), or every one of them to every stage
 * (settle: all). */
static void sync_persistent(trainer *t)
{
    train_pipe *q = t->pipe;
    kl_exec *e = t->train;
    for (int i = 0; i < q->syncs.n; i++) {
        const pipe_xfer *x = &q->syncs.v[i];
        size_t bytes = (size_t)e->plan->buffers.v[x->buf].bytes;
        const char *what = ir_val(e->g, e->plan->buffers.v[x->buf].value)->name;
        int tag = q->xfers.n + i;
        if (x->from == q->stage)
            kl_comm_send(q->c, e->ptrs[x->buf], bytes, x->to, tag, what);
        else if (x->to == q->stage)
            kl_comm_recv(q->c, e->ptrs[x->buf], bytes, x->from, tag, what);
    }
}

int train_pipeline_step(trainer *t, train_loop *lp, double *sums)
{
    train_pipe *q = t->pipe;
    int m = q->m, s = q->stage, P = q->P;
    int warm = q->sched == KL_PIPE_GPIPE ? m : (P - 1 - s < m ? P - 1 - s : m);
    int f = 0, b = 0;
    for (; f < warm; f++)
        if (forward(t, lp, f, sums))
            return -1;
    while (b < m) {
        if (f < m && forward(t, lp, f++, sums))
            return -1;
        backward(t, lp, b++, sums);
    }
    kl_exec_filter fl = {q->run, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_UPDATE, &lp->args, &fl);
    sync_persistent(t);
    /* The last stage's loss, the preemption flag of any stage: on every
     * stage (the first prints). */
    kl_comm_all_reduce(q->c, sums, 3, IR_F64, KL_REDUCE_SUM, "the loss and metric sums of the stages");
    kl_comm_send_wait(q->c);
    return 0;
}

void train_pipeline_settle(trainer *t)
{
    train_pipe *q = t->pipe;
    if (!q)
        return;
    kl_exec *e = t->train;
    const kl_plan *p = e->plan;
    /* Every persistent buffer a step writes, from the stage that writes it. */
    for (int b = 0; b < p->buffers.n; b++) {
        const kl_buffer *kb = &p->buffers.v[b];
        if (kb->region != KL_REGION_PERSISTENT || kb->value < 0)
            continue;
        int owner = -1;
        for (int i = 0; i < p->steps.n && owner < 0; i++) {
            int bufs[IR_KERNEL_MAX_BUFS + 4], n;
            bool rd[IR_KERNEL_MAX_BUFS + 4], wr[IR_KERNEL_MAX_BUFS + 4];
            if (p->steps.v[i].phase == IR_PHASE_STARTUP)
                continue;
            n = step_access(p, &p->steps.v[i], bufs, rd, wr);
            for (int k = 0; k < n; k++)
                if (wr[k] && bufs[k] == b)
                    owner = q->stage_of[i];
        }
        if (owner < 0)
            continue;
        bool even = kb->bytes % 4 == 0;
        kl_comm_broadcast(q->c, e->ptrs[b], kb->bytes / (even ? 4 : 2), even ? IR_F32 : IR_BF16, owner,
                          ir_val(e->g, kb->value)->name);
    }
}

void train_pipeline_print_start(const trainer *t)
{
    train_pipe *q = t->pipe;
    if (!q)
        return;
    int64_t mine[3] = {q->stash_bytes, q->slots, (int64_t)q->stash.n}, *all = kl_xmalloc(sizeof mine * (size_t)q->P);
    kl_comm_gather_startup(q->c, mine, sizeof mine, all, "the stages' saved activations");
    if (t->opt.quiet) {
        free(all);
        return;
    }
    int n[3] = {0, 0, 0};
    for (int i = 0; i < q->xfers.n; i++) {
        ir_phase ph = t->train->plan->steps.v[q->xfers.v[i].step].phase;
        n[ph == IR_PHASE_FORWARD ? 0 : ph == IR_PHASE_BACKWARD ? 1 : 2]++;
    }
    printf("pipeline: %d stages (rank = stage), schedule %s, %d micro-batch%s; transfers: %d forward and %d backward "
           "per micro-batch, %d in the update and %d after it\n",
           q->P, kl_pipe_schedule_name(q->sched), q->m, q->m == 1 ? "" : "es", n[0], n[1], n[2], q->syncs.n);
    for (int s = 0; s < q->P; s++) {
        char a[32], b[32];
        kl_format_bytes(a, sizeof a, all[3 * s]);
        kl_format_bytes(b, sizeof b, all[3 * s] * all[3 * s + 1]);
        printf("pipeline: stage %d: saved activations %s per micro-batch (%lld buffers) x %lld in flight = %s\n", s, a,
               (long long)all[3 * s + 2], (long long)all[3 * s + 1], b);
    }
    free(all);
}

void train_pipeline_free(trainer *t)
{
    train_pipe *q = t->pipe;
    if (!q)
        return;
    free(q->run);
    free(q->stage_of);
    free(q->at);
    kl_vec_free(q->xfers);
    kl_vec_free(q->syncs);
    kl_vec_free(q->stash);
    free(q->slot_mem);
    free(q);
    t->pipe = NULL;
}
