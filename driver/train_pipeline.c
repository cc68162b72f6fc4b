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
 * backward (interleaved: below); 1f1b runs P - 1 - s forwards on stage s, then one forward and
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
 * the stage's data-parallel group. With tensor parallel (T x P x D,
 * tensor parallel innermost as Megatron: world rank w is tensor-parallel
 * rank w mod T of stage (w / T) mod P of replica w / (T P)) the stages
 * split the ranks of one tp index (train_tp_setup runs first), so each tp
 * index has its own pipeline and a stage's T ranks run its layers'
 * all_reduces over their tensor-parallel group. Collectives run in
 * program order with stages (no communication thread): a collective's
 * result that crosses (a stage's last row-split all_reduce, the input
 * gradient of its first column split) is complete at its place, and the
 * transfers' MPI calls never meet another thread's.
 *
 * fp16: the optimizer's check of the gradients for inf/NaN sums every
 * stage's squared gradients (update-phase transfers to the stage that
 * checks, whose verdict goes back with the update's scale); the verdict
 * itself reaches every stage with the step's loss (train_pipeline_step),
 * so each stage skips and backs off its loss scale alike.
 *
 * zero_bubble (ZB-H1, Qi et al. 2024) splits each stage's backward in
 * two passes: the input-gradient pass (B: every backward step a transfer
 * to another stage needs, and those steps' producers on the stage) and
 * the weight-gradient pass (W: the rest, which only accumulates the
 * stage's param gradients). B runs where 1f1b runs the whole backward,
 * so the gradient reaches the previous stage without waiting for this
 * stage's weight gradients; stage s runs W of the oldest micro-batch
 * once more than s are waiting, and the rest after its last B, in the
 * time it would otherwise wait (at most P micro-batches between forward
 * and weight gradient on any stage, as 1f1b's stage 0). Every transfer
 * happens in F and B passes, in 1f1b's order; a W pass only computes.
 * What a W step reads from outside its pass is copied at its place in
 * the B pass and put back right before it in the W pass (its W slot),
 * so a W pass sees the values the plan's order gives it; W passes run
 * in micro-batch order, so the gradients sum as one rank's and the
 * losses equal 1f1b's to the bit.
 *
 * interleaved (Megatron's interleaved 1F1B): the compiler cuts P v
 * stages (v = pipeline_virtual_stages, 2 unless set), stage k on rank k mod P, chunk k / P of
 * it. Each F and B pass runs one chunk's steps (its own filter) and
 * does the transfers of that stage only; the update runs every chunk of
 * the rank in the plan's order, where a value between two stages of the
 * rank (clip's norms) stays in place. Each chunk has its own
 * saved-activation slots; the host's inputs of a micro-batch are fed
 * at its first chunk's forward and put back for the later chunks'. A
 * forward or backward value between two stages of one rank is refused
 * (it would wait in the arena between passes).
 *
 * Measured (driver/train_pipeline_observe.c, train_pipeline_finish): each stage's busy time (its passes,
 * less their waits in receives) over the span from the step's start to
 * the last stage's last pass: the bubble fraction --profile prints next
 * to the schedule's theoretical one; --trace gets one track per stage
 * with its forward, input-gradient, weight-gradient and transfer spans.
 *
 * ZeRO inside the data-parallel group (passes/shard_zero.c): a bucket
 * holds one stage's updates, so each stage's D ranks partition its
 * optimizer state and master slices (zero2: its gradients; zero3: its
 * params, all-gathered on the stage that reads them, from its copy of
 * the slices when that is another stage: a tied embedding); the
 * clipping norm's and the fp16 check's squared norm is each stage's
 * slices' sum, added across the stages (update-phase transfers) and
 * all-reduced over the data-parallel group. A checkpoint settles the
 * stages first (each rank gets a stage's slices from the rank of that
 * stage in its own replica), then gathers the slices over the
 * data-parallel group (driver/train_ranks.c).
 *
 * Refused with the reason (not built): a GPU, the executable's uses other than
 * training, and interleaved with micro-batches that P does not divide. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "budget.h"
#include "train_loop.h"
#include "passes/passes.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/data/values.h"
#include "train_pipeline.h"

/* Settings this build does not run across stages: the reason, or NULL. */
static const char *not_built(const trainer *t, const kl_backend *be)
{
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
    if (t->opt.force_overflow_stage >= 0 && t->opt.force_overflow > 0 &&
        (P <= 1 || t->opt.force_overflow_stage >= P || t->cfg.precision != KL_PREC_FP16)) {
        kl_error("%s: --force-overflow %lld:%d poisons a stage's gradients: it needs precision = fp16 and a stage "
                 "below pipeline_parallel = %d", t->model, (long long)t->opt.force_overflow,
                 t->opt.force_overflow_stage, P > 1 ? P : 1);
        return -1;
    }
    if (P <= 1)
        return 0;
    const char *why = not_built(t, NULL);
    if (why) {
        kl_error("%s: pipeline_parallel = %d (schedule %s): %s\n"
                 "---> train with pipeline_parallel = 1",
                 t->model, P, kl_pipe_schedule_name(t->cfg.pipeline_schedule), why);
        return -1;
    }
    int m = t->cfg.accumulate > 1 ? (int)t->cfg.accumulate : 1;
    if (t->cfg.pipeline_schedule == KL_PIPE_INTERLEAVED && m % P) {
        kl_error("%s: pipeline_schedule = interleaved needs the micro-batches (accumulate = %d) to be a multiple of "
                 "pipeline_parallel = %d (each stage's micro-batches go in groups of P)\n---> use --accumulate %d",
                 t->model, m, P, (m + P - 1) / P * P);
        return -1;
    }
    if (t->world % P) {
        /* train_tp_setup ran: t->world is the world over tensor_parallel. */
        int T = t->tp > 1 ? t->tp : 1, N = t->world * T;
        char tp[48] = "";
        if (T > 1)
            snprintf(tp, sizeof tp, " x tensor_parallel = %d", T);
        kl_error("%s: pipeline_parallel = %d%s does not divide the world of %d rank%s (the world is stages x "
                 "%sdata-parallel ranks)\n---> launch a multiple of %d ranks (mpirun -np %d ...)",
                 t->model, P, tp, N, N == 1 ? "" : "s", T > 1 ? "tensor-parallel x " : "", P * T, P * T);
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
    } else {
        /* Kernels and collectives alike: a collective's operand and
         * result, or ZeRO's shard_copy and shard_gather (the slice, then
         * the values it is a slice of; each operand read or written as
         * its flags say). */
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
static void analyse(const kl_plan *p, int finite_value, train_pipe *q)
{
    const ir_graph *g = p->g;
    int ns = p->steps.n, nb = p->buffers.n;
    int *node_stage = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    pass_pipeline_assign(g, node_stage);
    q->run = kl_xcalloc((size_t)ns + 1, sizeof *q->run);
    q->stage_of = kl_xcalloc((size_t)ns + 1, sizeof *q->stage_of);
    q->at = kl_xcalloc((size_t)ns + 2, sizeof *q->at);
    for (int c = 0; c < q->v; c++)
        q->ch[c].run = q->v > 1 ? kl_xcalloc((size_t)ns + 1, sizeof *q->ch[c].run) : q->run;
    for (int i = 0; i < ns; i++) {
        int s = q->stage_of[i] = node_stage[p->steps.v[i].node];
        bool startup = p->steps.v[i].phase == IR_PHASE_STARTUP;
        q->run[i] = s % q->P == q->stage || startup;
        for (int c = 0; c < q->v && q->v > 1; c++)
            q->ch[c].run[i] = s == c * q->P + q->stage || startup;
    }
    free(node_stage);
    int *writer = kl_xmalloc(sizeof(int) * (size_t)(nb + 1));
    int *owner = kl_xmalloc(sizeof(int) * (size_t)(nb + 1));
    unsigned char *saved = kl_xcalloc((size_t)nb + 1, 1); /* a bit per chunk */
    bool *read_by = kl_xcalloc((size_t)nb * (size_t)q->S + 1, 1);
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
            read_by[(size_t)b * (size_t)q->S + (size_t)s] = true;
            int w = writer[b];
            if (w >= 0 && p->steps.v[w].phase != IR_PHASE_STARTUP && q->stage_of[w] != s) {
                /* Written by another stage: it crosses after the writer. */
                add_xfer(q, w, b, q->stage_of[w], s);
            }
            /* Saved for backward: forward made it (or the host fed it). */
            bool from_forward = w >= 0 ? p->steps.v[w].phase == IR_PHASE_FORWARD : p->buffers.v[b].pinned;
            if (st->phase == IR_PHASE_BACKWARD && s % q->P == q->stage && from_forward &&
                p->buffers.v[b].region == KL_REGION_ARENA)
                saved[b] |= (unsigned char)(1u << (s / q->P));
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
            for (int s = 0; s < q->S; s++)
                if (s != owner[b] && read_by[(size_t)b * (size_t)q->S + (size_t)s]) {
                    pipe_xfer x = {-1, b, owner[b], s};
                    kl_vec_push(q->syncs, x);
                }
        for (int c = 0; c < q->v; c++)
            if (saved[b] & (1u << c)) {
                kl_vec_push(q->ch[c].stash, b);
                q->ch[c].stash_bytes += p->buffers.v[b].bytes;
            }
    }
    for (int b = 0; b < nb; b++)
        if (p->buffers.v[b].region == KL_REGION_PERSISTENT) {
            q->persist_bytes += p->buffers.v[b].bytes;
            bool read_here = false;
            for (int c = 0; c < q->v; c++)
                read_here |= read_by[(size_t)b * (size_t)q->S + (size_t)(c * q->P + q->stage)];
            if ((owner[b] >= 0 && owner[b] % q->P == q->stage) || (owner[b] < 0 && read_here))
                q->own_bytes += p->buffers.v[b].bytes;
        }
    /* The persistent values' owners, for settle: kept in writer[]. */
    free(writer);
    free(saved);
    free(read_by);
    /* The loss and the first report: the stage and phase of their step. */
    q->loss_stage = q->report_stage = q->finite_stage = -1;
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
            if (finite_value >= 0 && bufs[k] == plan_real_buffer(p, p->value_buf[finite_value]))
                q->finite_stage = q->stage_of[i];
        }
    }
    free(owner);
}

/* zero_bubble: which backward steps are W steps (on every stage: none
 * writes what crosses to another stage or what a B step of its stage
 * reads), this stage's W copies (what its W steps read that the W pass
 * does not make: forward's values, B's, the host's and other stages'),
 * and what its update reads from B. */
static void analyse_zb(const kl_plan *p, train_pipe *q)
{
    int ns = p->steps.n, nb = p->buffers.n;
    bool *is_b = kl_xcalloc((size_t)ns + 1, 1);
    for (int k = 0; k < q->xfers.n; k++)
        if (p->steps.v[q->xfers.v[k].step].phase == IR_PHASE_BACKWARD)
            is_b[q->xfers.v[k].step] = true;
    /* Producers: (reader, writer) pairs of one stage's backward steps, in
     * reader order; walked backwards, a B step makes its producers B. */
    KL_VEC(int) edges = {0};
    int *writer = kl_xmalloc(sizeof(int) * (size_t)(nb + 1));
    for (int b = 0; b < nb; b++)
        writer[b] = -1;
    int bufs[IR_KERNEL_MAX_BUFS + 4], n;
    bool rd[IR_KERNEL_MAX_BUFS + 4], wr[IR_KERNEL_MAX_BUFS + 4];
    for (int i = 0; i < ns; i++) {
        const kl_step *st = &p->steps.v[i];
        if (st->phase == IR_PHASE_STARTUP)
            continue;
        n = step_access(p, st, bufs, rd, wr);
        for (int k = 0; k < n; k++) {
            int w = bufs[k] >= 0 && rd[k] ? writer[bufs[k]] : -1;
            if (st->phase == IR_PHASE_BACKWARD && w >= 0 && p->steps.v[w].phase == IR_PHASE_BACKWARD &&
                q->stage_of[w] == q->stage_of[i]) {
                kl_vec_push(edges, i);
                kl_vec_push(edges, w);
            }
        }
        for (int k = 0; k < n; k++)
            if (bufs[k] >= 0 && wr[k])
                writer[bufs[k]] = i;
    }
    for (int e = edges.n - 2; e >= 0; e -= 2)
        if (is_b[edges.v[e]])
            is_b[edges.v[e + 1]] = true;
    kl_vec_free(edges);
    q->is_w = kl_xcalloc((size_t)ns + 1, 1);
    q->run_b = kl_xcalloc((size_t)ns + 1, 1);
    q->run_w = kl_xcalloc((size_t)ns + 1, 1);
    for (int i = 0; i < ns; i++) {
        q->is_w[i] = p->steps.v[i].phase == IR_PHASE_BACKWARD && !is_b[i];
        q->run_b[i] = q->run[i] && !q->is_w[i];
        q->run_w[i] = q->run[i] && q->is_w[i];
        if (q->run[i] && p->steps.v[i].phase == IR_PHASE_BACKWARD)
            q->is_w[i] ? q->nw++ : q->nb_steps++;
    }
    free(is_b);
    if (!q->nb_steps) {
        /* No step of this stage's backward is needed elsewhere (stage 0's):
         * it runs whole where 1f1b runs it, with nothing to copy. */
        memcpy(q->run_b, q->run, (size_t)ns * sizeof *q->run);
        memset(q->run_w, 0, (size_t)ns * sizeof *q->run_w);
        q->nb_steps = q->nw, q->nw = 0;
    }
    /* The W copies, in step order: a buffer a W step of this stage reads,
     * last written by a forward or backward step that is not this stage's
     * W step (or fed by the host), once per write. Values from before
     * the micro-batch (state, constants) are not copied. */
    int *copied = kl_xmalloc(sizeof(int) * (size_t)(nb + 1));
    for (int b = 0; b < nb; b++)
        writer[b] = -1, copied[b] = -2;
    q->cap_at = kl_xcalloc((size_t)ns + 2, sizeof *q->cap_at);
    q->next_bw = kl_xmalloc(sizeof(int) * (size_t)(ns + 1));
    q->first_bw = -1;
    for (int i = ns - 1, next = -1; i >= 0; i--) {
        q->next_bw[i] = next;
        if (p->steps.v[i].phase == IR_PHASE_BACKWARD)
            next = q->first_bw = i;
    }
    bool *ucopied = kl_xcalloc((size_t)nb + 1, 1);
    for (int i = 0; i < ns; i++) {
        const kl_step *st = &p->steps.v[i];
        q->cap_at[i] = q->wcap.n;
        if (st->phase == IR_PHASE_STARTUP)
            continue;
        n = step_access(p, st, bufs, rd, wr);
        for (int k = 0; k < n; k++) {
            int b = bufs[k];
            if (b < 0 || !rd[k] || p->buffers.v[b].region != KL_REGION_ARENA)
                continue;
            int w = writer[b];
            bool outside = w >= 0 ? (p->steps.v[w].phase == IR_PHASE_FORWARD ||
                                     p->steps.v[w].phase == IR_PHASE_BACKWARD) && !q->run_w[w]
                                  : p->buffers.v[b].pinned;
            if (q->run_w[i] && outside && copied[b] != w) {
                copied[b] = w;
                pipe_cap c = {i, b, q->wbytes};
                kl_vec_push(q->wcap, c);
                q->wbytes += p->buffers.v[b].bytes;
            }
            /* The update reads what B (or another stage) made. */
            if (q->run[i] && st->phase == IR_PHASE_UPDATE && w >= 0 && p->steps.v[w].phase == IR_PHASE_BACKWARD &&
                !q->run_w[w] && !ucopied[b]) {
                ucopied[b] = true;
                kl_vec_push(q->ucap, b);
                q->ubytes += p->buffers.v[b].bytes;
            }
        }
        for (int k = 0; k < n; k++)
            if (bufs[k] >= 0 && wr[k])
                writer[bufs[k]] = i;
    }
    q->cap_at[ns] = q->wcap.n;
    free(ucopied);
    free(copied);
    free(writer);
    /* At most wdefer W passes wait after a B pass: stage s's, so that
     * every stage holds at most P micro-batches (1f1b's P - s between F
     * and B, s more between B and W). */
    q->wdefer = q->stage < q->m - 1 ? q->stage : q->m - 1;
    q->wslots = q->wdefer + 1;
}

/* interleaved (Megatron's interleaved 1F1B, Narayanan et al. 2021):
 * stage s's v chunks take the micro-batches in groups of P, chunk after
 * chunk (forward k: chunk (k mod P v) / P, micro-batch (k / (P v)) P +
 * k mod P; backward: the chunks in reverse); (P - s - 1) 2 + (v - 1) P
 * forwards first (all when m = P), then one forward and one backward in
 * turn, then the rest of the backwards. With m a multiple of P every
 * chunk takes its micro-batches in order, and the order never waits on
 * itself (a receive's send comes earlier on its rank). */
static pipe_op interleaved_op(int P, int v, int k, bool forward)
{
    int c = (k % (P * v)) / P;
    return (pipe_op){forward ? SPAN_F : SPAN_BW, (k / (P * v)) * P + k % P, forward ? c : v - 1 - c};
}

static int schedule_interleaved(int P, int v, int m, int s, pipe_op *ops)
{
    int total = m * v, n = 0;
    int warm = m == P ? total : (P - s - 1) * 2 + (v - 1) * P;
    warm = warm < total ? warm : total;
    for (int k = 0; k < warm; k++)
        ops[n++] = interleaved_op(P, v, k, true);
    for (int k = 0; k < total - warm; k++) {
        ops[n++] = interleaved_op(P, v, k + warm, true);
        ops[n++] = interleaved_op(P, v, k, false);
    }
    for (int k = total - warm; k < total; k++)
        ops[n++] = interleaved_op(P, v, k, false);
    return n;
}

/* Stage s's passes in order, into ops (3m at most); split: its backward
 * in B and W passes (zero_bubble, where the stage has W steps). gpipe:
 * every forward, then every backward; 1f1b: P - 1 - s forwards, then a
 * forward and a backward in turn, then the rest of the backwards;
 * zero_bubble: 1f1b's order of F and B, with W of the oldest micro-batch
 * once more than s wait (ZB-H1), the rest after the last B;
 * interleaved: schedule_interleaved's order over the rank's chunks.
 * At most 3 m v passes. */
int train_pipe_schedule(kl_pipe_schedule sched, int P, int v, int m, int s, bool split, pipe_op *ops)
{
    if (sched == KL_PIPE_INTERLEAVED)
        return schedule_interleaved(P, v, m, s, ops);
    int warm = sched == KL_PIPE_GPIPE ? m : (P - 1 - s < m ? P - 1 - s : m);
    int wdefer = s < m - 1 ? s : m - 1, n = 0, f = 0, b = 0, w = 0;
    for (; f < warm; f++)
        ops[n++] = (pipe_op){SPAN_F, f, 0};
    while (b < m) {
        if (f < m)
            ops[n++] = (pipe_op){SPAN_F, f++, 0};
        ops[n++] = (pipe_op){split ? SPAN_B : SPAN_BW, b++, 0};
        while (split && b - w > wdefer)
            ops[n++] = (pipe_op){SPAN_W, w++, 0};
    }
    while (split && w < m)
        ops[n++] = (pipe_op){SPAN_W, w++, 0};
    return n;
}

/* Everything this rank's memory depends on: the steps, transfers and
 * saved buffers (analyse); each chunk's slots, the most micro-batches
 * between its forward and its backward in this rank's order;
 * interleaved's inputs; zero_bubble's W copies. Allocates none of the
 * host memory it sizes. */
static void analyse_memory(const kl_plan *p, int finite_value, train_pipe *q)
{
    analyse(p, finite_value, q);
    pipe_op *ops = kl_xmalloc(sizeof *ops * (size_t)(3 * q->m * q->v));
    /* (interleaved with micro-batches P does not divide is refused:
     * train_pipeline_check; kiln plan --all sizes it without slots) */
    bool schedulable = q->sched != KL_PIPE_INTERLEAVED || q->m % q->P == 0;
    int n = schedulable ? train_pipe_schedule(q->sched, q->P, q->v, q->m, q->stage, false, ops) : 0,
        in[KL_PIPE_VIRTUAL_MAX] = {0};
    for (int i = 0; i < n; i++) {
        pipe_chunk *c = &q->ch[ops[i].chunk];
        in[ops[i].chunk] += ops[i].kind == SPAN_F ? 1 : -1;
        c->slots = in[ops[i].chunk] > c->slots ? in[ops[i].chunk] : c->slots;
    }
    free(ops);
    const ir_graph *g = p->g;
    for (int i = 0; i < g->decls.n && q->v > 1; i++) {
        int v = g->decls.v[i];
        if (ir_val(g, v)->kind != IR_VAL_INPUT || p->value_buf[v] < 0)
            continue;
        int b = plan_real_buffer(p, p->value_buf[v]);
        kl_vec_push(q->in_bufs, b);
        q->in_bytes += p->buffers.v[b].bytes;
    }
    if (q->sched == KL_PIPE_ZERO_BUBBLE)
        analyse_zb(p, q);
}

/* The host memory the rank holds between passes: the saved activations
 * of its micro-batches in flight, interleaved's inputs, zero_bubble's W
 * copies and the update's copies. */
static int64_t held_bytes(const train_pipe *q)
{
    int64_t n = q->in_bytes * q->m + q->wbytes * q->wslots + q->ubytes;
    for (int c = 0; c < q->v; c++)
        n += q->ch[c].stash_bytes * q->ch[c].slots;
    return n;
}

/* This rank's arena: the buffers its stages' steps touch and those it
 * sends or receives (at the writer's step), placed again, so that a rank
 * holds its stages' activations, not the whole model's. The passes run
 * this rank's steps in the plan's order as before, and what crosses
 * between passes (the saved activations, the W copies, the update's
 * copies) is live in the whole plan from its writer to its reader, both
 * this rank's, or pinned: the ranges it had, less the other stages'
 * steps. Returns the arena's bytes; p's offsets are this rank's. */
static int64_t place_arena(kl_plan *p, const train_pipe *q)
{
    kl_touch *x = kl_xmalloc(sizeof *x * (size_t)(q->xfers.n + 1));
    int n = 0;
    for (int i = 0; i < q->xfers.n; i++)
        if (q->xfers.v[i].from % q->P == q->stage || q->xfers.v[i].to % q->P == q->stage)
            x[n++] = (kl_touch){q->xfers.v[i].step, q->xfers.v[i].buf};
    plan_memory_of(p, q->run, x, n);
    free(x);
    return p->arena_bytes;
}

static void pipe_free(train_pipe *q);

void kl_pipeline_rank_needs(kl_plan *p, int P, int64_t *arena, int64_t *need)
{
    kl_train_config cfg;
    kl_train_read(&p->g->train, &cfg);
    int S = pass_pipeline_count(p->g), m = cfg.accumulate > 1 ? (int)cfg.accumulate : 1;
    kl_pipe_schedule sched = cfg.pipeline_schedule;
    kl_train_config_free(&cfg);
    if (S < P || S % P || S / P > KL_PIPE_VIRTUAL_MAX)
        kl_panic("kl_pipeline_rank_needs: a plan of %d stages on %d ranks", S, P);
    *arena = *need = 0;
    for (int r = 0; r < P; r++) {
        train_pipe *q = kl_xcalloc(1, sizeof *q);
        q->P = P, q->stage = r, q->S = S, q->m = m, q->sched = sched, q->v = S / P;
        analyse_memory(p, -1, q);
        int64_t a = place_arena(p, q), n = a + held_bytes(q);
        *arena = a > *arena ? a : *arena;
        *need = n > *need ? n : *need;
        pipe_free(q);
    }
    plan_memory(p);
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
    q->v = q->sched == KL_PIPE_INTERLEAVED ? t->cfg.pipeline_virtual : 1;
    q->S = q->P * q->v;
    q->vs = -1;
    if (pass_pipeline_count(t->train->g) != q->S) {
        kl_error("%s: the training plan has %d stages, but pipeline_parallel = %d makes %d", t->model,
                 pass_pipeline_count(t->train->g), q->P, q->S);
        return -1;
    }
    analyse_memory(t->train->plan, t->finite_value, q);
    q->whole_arena = t->train->plan->arena_bytes;
    place_arena(t->train->plan, q);
    kl_exec_rebind_arena(t->train);
    /* A value one of this rank's stages sends to another of its stages in
     * forward or backward would wait in the arena between their passes,
     * where other passes reuse its memory (in the update, which runs the
     * rank's stages in the plan's order, it stays). */
    for (int i = 0; i < q->xfers.n; i++) {
        const pipe_xfer *x = &q->xfers.v[i];
        if (x->from % q->P == x->to % q->P && t->train->plan->steps.v[x->step].phase != IR_PHASE_UPDATE) {
            int val = t->train->plan->buffers.v[x->buf].value;
            kl_error("%s: pipeline_schedule = interleaved: %s crosses from stage %d to stage %d, both on rank %d: "
                     "not built (only neighbouring stages may exchange activations and gradients)\n"
                     "---> use pipeline_schedule = 1f1b", t->model, val >= 0 ? ir_val(t->train->g, val)->name : "a buffer",
                     x->from, x->to, x->from % q->P);
            return -1;
        }
    }
    /* A collective's result crosses at its step's place (tensor
     * parallel's all_reduce of a stage's last layer, or of the input
     * gradient of its first): complete there, as collectives run in
     * program order with stages (train.c: no overlap). */
    for (int i = 0; i < q->xfers.n && t->train->overlap; i++)
        if (t->train->plan->steps.v[q->xfers.v[i].step].kind == KL_STEP_COLLECTIVE) {
            kl_error("%s: pipeline_parallel = %d: a collective's result (step %d) crosses to another stage", t->model,
                     q->P, q->xfers.v[i].step);
            return -1;
        }
    for (int c = 0; c < q->v; c++)
        q->ch[c].slot_mem = kl_xmalloc((size_t)(q->ch[c].stash_bytes * q->ch[c].slots) + 1);
    q->in_mem = kl_xmalloc((size_t)(q->in_bytes * q->m) + 1);
    q->wmem = kl_xmalloc((size_t)(q->wbytes * q->wslots) + 1);
    q->umem = kl_xmalloc((size_t)q->ubytes + 1);
    return 0;
}

int64_t train_pipeline_held_bytes(const trainer *t)
{
    return t->pipe ? held_bytes(t->pipe) : 0;
}

static void span(train_pipe *q, int kind, int mb, int buf, double t0, double t1)
{
    if (!q->record)
        return;
    pipe_span x = {t0, t1, kind, mb, buf, q->vs >= 0 ? q->vs : q->stage};
    kl_vec_push(q->spans, x);
}

/* The W copies of step i: into the running micro-batch's W slot (save)
 * or back into the arena. */
static void w_copies(train_pipe *q, kl_exec *e, int i, bool save)
{
    char *slot = q->wmem + (size_t)(q->cur % q->wslots) * (size_t)q->wbytes;
    for (int k = q->cap_at[i]; k < q->cap_at[i + 1]; k++) {
        const pipe_cap *c = &q->wcap.v[k];
        size_t n = (size_t)e->plan->buffers.v[c->buf].bytes;
        if (save)
            memcpy(slot + c->off, e->ptrs[c->buf], n);
        else
            memcpy(e->ptrs[c->buf], slot + c->off, n);
    }
}

/* Whether stage s is the running pass's (an F or B pass), or one of this
 * rank's (the update, q->vs -1). */
static bool mine(const train_pipe *q, int s) { return q->vs >= 0 ? s == q->vs : s % q->P == q->stage; }

/* At step i's place: this stage sends what it wrote there and receives
 * what another stage wrote there (from its rank, stage mod P; between
 * two stages of this rank, in the update, the value stays where it is);
 * in a B pass it copies what its W step i reads, in a W pass it puts
 * back what the next backward step reads. */
static void at_step(void *ctx, int i)
{
    trainer *t = ctx;
    train_pipe *q = t->pipe;
    kl_exec *e = t->train;
    if (q->mode == PASS_W) {
        if (q->next_bw[i] >= 0)
            w_copies(q, e, q->next_bw[i], false);
        return;
    }
    if (q->is_w && q->run_w[i])
        w_copies(q, e, i, true);
    for (int k = q->at[i]; k < q->at[i + 1]; k++) {
        const pipe_xfer *x = &q->xfers.v[k];
        size_t bytes = (size_t)e->plan->buffers.v[x->buf].bytes;
        const char *what = e->plan->buffers.v[x->buf].value >= 0 ? ir_val(e->g, e->plan->buffers.v[x->buf].value)->name
                                                                  : "a scratch buffer";
        double t0 = kl_now();
        bool from = mine(q, x->from), to = mine(q, x->to);
        if (from && to)
            continue;
        if (from) {
            kl_comm_send(q->c, e->ptrs[x->buf], bytes, x->to % q->P, k, what);
            q->sent_bytes += (int64_t)bytes;
            span(q, SPAN_SEND, q->cur, x->buf, t0, kl_now());
        } else if (to) {
            kl_comm_recv(q->c, e->ptrs[x->buf], bytes, x->from % q->P, k, what);
            q->recv_bytes += (int64_t)bytes;
            double t1 = kl_now();
            q->recv_wait += t1 - t0;
            span(q, SPAN_RECV, q->cur, x->buf, t0, t1);
        }
    }
}

/* Copies buffers bufs[0..n) of e to (save) or from consecutive bytes at
 * at. */
static void copy_buffers(kl_exec *e, const int *bufs, int n, char *at, bool save)
{
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)e->plan->buffers.v[bufs[i]].bytes;
        if (save)
            memcpy(at, e->ptrs[bufs[i]], bytes);
        else
            memcpy(e->ptrs[bufs[i]], at, bytes);
        at += bytes;
    }
}

static void stash(train_pipe *q, kl_exec *e, int c, int k, bool save)
{
    pipe_chunk *h = &q->ch[c];
    copy_buffers(e, h->stash.v, h->stash.n, h->slot_mem + (size_t)(k % h->slots) * (size_t)h->stash_bytes, save);
}

/* The buffers the update reads from B: saved after each B pass (the
 * last micro-batch's stay), put back before the update. */
static void update_copies(train_pipe *q, kl_exec *e, bool save)
{
    copy_buffers(e, q->ucap.v, q->ucap.n, q->umem, save);
}

/* The loss and report of a micro-batch whose phase ph just ran here. */
static void read_results(trainer *t, train_loop *lp, int ph, double *sums)
{
    train_pipe *q = t->pipe;
    if (q->loss_stage == q->vs && q->loss_phase == ph)
        sums[0] += kl_exec_scalar(t->train, t->train->g->loss);
    if (lp->metric_count && q->report_stage == q->vs && q->report_phase == ph)
        sums[1] += kl_exec_scalar(t->train, t->train->g->reports.v[0].value);
}

/* A pass of kind over micro-batch k from t0: its busy time (less its
 * waits in receives) and its span. */
static void pass_done(train_pipe *q, int kind, int k, double t0, double wait0)
{
    double t1 = kl_now(), busy = t1 - t0 - (q->recv_wait - wait0);
    q->step_busy += busy;
    q->sum_kind[kind] += busy;
    q->n_kind[kind]++;
    span(q, kind, k, -1, t0, t1);
}

/* The forward of micro-batch k on chunk c. The first chunk's feeds the
 * micro-batch (every stage reads the loader alike); interleaved, the
 * inputs wait in the micro-batch's input slot for the later chunks'. */
static int forward(trainer *t, train_loop *lp, int c, int k, double *sums)
{
    train_pipe *q = t->pipe;
    char *in_slot = q->in_mem + (size_t)k * (size_t)q->in_bytes;
    if (c == 0) {
        double w0 = kl_now();
        const kl_batch *b = kl_loader_next(lp->loader);
        if (t->trace)
            kl_trace_event(t->trace, "next batch", "data", KL_TRACE_DATA, w0, kl_now());
        if (!b)
            return -1;
        train_feed(t->train, &t->tb, b);
        kl_loader_release(lp->loader, b);
        if (q->v > 1)
            copy_buffers(t->train, q->in_bufs.v, q->in_bufs.n, in_slot, true);
    } else {
        copy_buffers(t->train, q->in_bufs.v, q->in_bufs.n, in_slot, false);
    }
    double t0 = kl_now(), wait0 = q->recv_wait;
    lp->args.step = lp->step * q->m + k;
    q->mode = PASS_FB, q->cur = k, q->vs = c * q->P + q->stage;
    kl_exec_filter f = {q->ch[c].run, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_FORWARD, &lp->args, &f);
    read_results(t, lp, IR_PHASE_FORWARD, sums);
    stash(q, t->train, c, k, true);
    pass_done(q, SPAN_F, k, t0, wait0);
    return 0;
}

/* The backward of micro-batch k on chunk c: whole, or (zero_bubble) its
 * B pass. */
static void backward(trainer *t, train_loop *lp, int c, int k, double *sums)
{
    train_pipe *q = t->pipe;
    double t0 = kl_now(), wait0 = q->recv_wait;
    stash(q, t->train, c, k, false);
    lp->args.step = lp->step * q->m + k;
    q->mode = PASS_FB, q->cur = k, q->vs = c * q->P + q->stage;
    kl_exec_filter f = {q->is_w ? q->run_b : q->ch[c].run, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_BACKWARD, &lp->args, &f);
    read_results(t, lp, IR_PHASE_BACKWARD, sums);
    if (q->is_w)
        update_copies(q, t->train, true);
    pass_done(q, q->nw ? SPAN_B : SPAN_BW, k, t0, wait0);
}

/* zero_bubble: the W pass of micro-batch k (no transfers). */
static void weights(trainer *t, train_loop *lp, int k)
{
    train_pipe *q = t->pipe;
    double t0 = kl_now(), wait0 = q->recv_wait;
    lp->args.step = lp->step * q->m + k;
    q->mode = PASS_W, q->cur = k, q->vs = q->stage;
    if (q->first_bw >= 0)
        w_copies(q, t->train, q->first_bw, false);
    kl_exec_filter f = {q->run_w, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_BACKWARD, &lp->args, &f);
    q->mode = PASS_FB;
    pass_done(q, SPAN_W, k, t0, wait0);
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
        int tag = q->xfers.n + i, from = x->from % q->P, to = x->to % q->P;
        if (from == to)
            continue;
        if (from == q->stage)
            kl_comm_send(q->c, e->ptrs[x->buf], bytes, to, tag, what);
        else if (to == q->stage)
            kl_comm_recv(q->c, e->ptrs[x->buf], bytes, from, tag, what);
    }
}

/* --force-overflow N:S, a test hook: before step N's update, stage S
 * makes one of its own gradients inf (an fp16 overflow on that stage
 * alone), which the check of every stage's gradients must see. */
static void poison_gradient(trainer *t)
{
    kl_exec *e = t->train;
    const ir_graph *g = e->g;
    for (int i = 0; i < g->grads.n; i++) {
        const ir_value *pv = ir_val(g, g->grads.v[i].param);
        if (ir_attr_int(&pv->attrs, "_stage", 0) % t->pipe->P != t->pipe->stage)
            continue;
        /* The update reads the accumulator when there is one. */
        char *name = kl_xasprintf("%s.grad_acc", pv->name);
        int v = ir_find_value(g, name);
        free(name);
        if (v < 0)
            v = g->grads.v[i].grad;
        int b = e->plan->value_buf[v];
        if (b < 0)
            continue;
        kl_store_as(ir_val(g, v)->type.dtype, e->ptrs[plan_real_buffer(e->plan, b)], 0, 1.0 / 0.0);
        return;
    }
    kl_panic("--force-overflow: stage %d has no gradient to poison", t->pipe->stage);
}

int train_pipeline_step(trainer *t, train_loop *lp, double *sums)
{
    train_pipe *q = t->pipe;
    pipe_op *ops = kl_xmalloc(sizeof *ops * (size_t)(3 * q->m * q->v));
    int n = train_pipe_schedule(q->sched, q->P, q->v, q->m, q->stage, q->nw > 0, ops);
    q->step_t0 = kl_now();
    q->step_busy = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == SPAN_F && forward(t, lp, ops[i].chunk, ops[i].mb, sums)) {
            free(ops);
            return -1;
        }
        if (ops[i].kind == SPAN_B || ops[i].kind == SPAN_BW)
            backward(t, lp, ops[i].chunk, ops[i].mb, sums);
        if (ops[i].kind == SPAN_W)
            weights(t, lp, ops[i].mb);
    }
    free(ops);
    double span_end = kl_now() - q->step_t0;
    if (q->is_w)
        update_copies(q, t->train, false);
    q->mode = PASS_FB, q->vs = -1;
    if (t->opt.force_overflow == lp->step + 1 && t->opt.force_overflow_stage == q->stage)
        poison_gradient(t);
    kl_exec_filter fl = {q->run, at_step, t};
    kl_exec_run_filtered(t->train, 1u << IR_PHASE_UPDATE, &lp->args, &fl);
    sync_persistent(t);
    if (q->record || t->opt.profile) {
        /* The pipeline's span: to the last stage's last pass. */
        kl_comm_all_reduce(q->c, &span_end, 1, IR_F64, KL_REDUCE_MAX, "the stages' ends of the step");
        if (lp->step > lp->first_step) {
            q->measured++;
            q->sum_busy += q->step_busy;
            q->sum_span += span_end;
        } else {
            /* The first step warms up: its passes are not counted. */
            memset(q->sum_kind, 0, sizeof q->sum_kind);
            memset(q->n_kind, 0, sizeof q->n_kind);
            q->sum_wait = q->recv_wait;
        }
    }
    /* The last stage's loss, the preemption flag of any stage and (fp16)
     * the check of every stage's gradients, from the stage that made it:
     * on every stage (the first prints; each adjusts its loss scale from
     * the check, so the scales and skipped steps agree everywhere). */
    double all[4] = {sums[0], sums[1], sums[2], 0};
    if (q->finite_stage >= 0 && q->finite_stage % q->P == q->stage)
        all[3] = kl_exec_scalar(t->train, t->finite_value);
    kl_comm_all_reduce(q->c, all, q->finite_stage >= 0 ? 4 : 3, IR_F64, KL_REDUCE_SUM,
                       "the loss and metric sums of the stages");
    memcpy(sums, all, 3 * sizeof *sums);
    if (q->finite_stage >= 0 && q->finite_stage % q->P != q->stage) {
        const ir_value *v = ir_val(t->train->g, t->finite_value);
        unsigned char one[8];
        kl_store_as(v->type.dtype, one, 0, all[3]);
        kl_exec_write(t->train, t->finite_value, one, (size_t)ir_dtype_size(v->type.dtype));
    }
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
        kl_comm_broadcast(q->c, e->ptrs[b], kb->bytes / (even ? 4 : 2), even ? IR_F32 : IR_BF16, owner % q->P,
                          ir_val(e->g, kb->value)->name);
    }
}


void train_pipeline_free(trainer *t)
{
    pipe_free(t->pipe);
    t->pipe = NULL;
}

static void pipe_free(train_pipe *q)
{
    if (!q)
        return;
    free(q->run);
    free(q->stage_of);
    free(q->at);
    kl_vec_free(q->xfers);
    kl_vec_free(q->syncs);
    for (int c = 0; c < q->v; c++) {
        if (q->v > 1)
            free(q->ch[c].run);
        kl_vec_free(q->ch[c].stash);
        free(q->ch[c].slot_mem);
    }
    kl_vec_free(q->in_bufs);
    free(q->in_mem);
    free(q->is_w);
    free(q->run_b);
    free(q->run_w);
    kl_vec_free(q->wcap);
    free(q->cap_at);
    free(q->next_bw);
    free(q->wmem);
    free(q->umem);
    kl_vec_free(q->ucap);
    kl_vec_free(q->spans);
    free(q->all_stats);
    free(q->offsets);
    free(q);
}
