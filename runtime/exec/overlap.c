/* Collectives on the communication thread (overlap.h). */
#include <stdlib.h>
#include <string.h>

#include "overlap.h"
#include "runtime/observe/trace.h"
#include "base/support.h"

typedef struct range {
    const char *lo, *hi;
} range;

typedef struct pending {
    kl_comm_job job;
    kl_overlap *o;
    int step;
    const void *src;  /* what the collective reads */
    void *staged;     /* reduce_scatter, all_gather: the operand's copy */
    size_t staged_bytes;
    range mem[IR_KERNEL_MAX_BUFS]; /* what it writes or reads in the exec's memory */
    int nmem;
    bool posted;
} pending;

struct kl_overlap {
    kl_exec *e;
    kl_comm_thread *t;
    kl_overlap_run_fn run;
    pending *by_step; /* per step (only collectives' used) */
    KL_VEC(int) posted; /* steps posted and not yet waited for, in order */
};

/* A buffer's memory: its real buffer's whole extent (a view's offset
 * inside it is the kernel's business, so the whole is the safe answer). */
static range buffer_range(const kl_exec *e, int b)
{
    int r = plan_real_buffer(e->plan, b);
    const char *p = e->ptrs[r];
    return (range){p, p + e->plan->buffers.v[r].bytes};
}

static void run_job(void *arg)
{
    pending *p = arg;
    p->o->run(p->o->e, p->step, p->src);
}

kl_overlap *kl_overlap_new(kl_exec *e, kl_comm_thread *t, kl_overlap_run_fn run)
{
    kl_overlap *o = kl_xcalloc(1, sizeof *o);
    o->e = e;
    o->t = t;
    o->run = run;
    o->by_step = kl_xcalloc((size_t)e->plan->steps.n + 1, sizeof *o->by_step);
    return o;
}

void kl_overlap_free(kl_overlap *o)
{
    if (!o)
        return;
    kl_overlap_drain(o);
    for (int i = 0; i < o->e->plan->steps.n; i++)
        free(o->by_step[i].staged);
    free(o->by_step);
    kl_vec_free(o->posted);
    free(o);
}

/* Waits for the collective of step i (posted), with its time in the
 * exec's statistics, profile and trace. */
static void finish(kl_overlap *o, int i)
{
    kl_exec *e = o->e;
    pending *p = &o->by_step[i];
    if (!o->t) {
        /* The compute stream waits; the device's clock is not the host's,
         * so no time is counted. */
        e->s->be->ops->collective_wait(e->s->be);
        p->posted = false;
        e->comm_calls++;
        return;
    }
    double t0 = kl_now(), waited = kl_comm_thread_wait(o->t, &p->job);
    p->posted = false;
    double secs = p->job.end - p->job.start;
    /* Not hidden: the part of its run the executor spent waiting (the
     * wait may also cover time it sat in the queue, not its own). */
    double lo = t0 > p->job.start ? t0 : p->job.start, hi = t0 + waited < p->job.end ? t0 + waited : p->job.end;
    double exposed = waited > 0 && hi > lo ? hi - lo : 0;
    e->comm_seconds += secs;
    e->comm_waited += exposed;
    e->comm_calls++;
    if (e->step_seconds) {
        e->step_seconds[i] += secs;
        e->step_hidden[i] += secs - exposed;
        e->step_runs[i]++;
    }
    if (e->trace) {
        kl_trace_event(e->trace, e->labels[i], "collective", KL_TRACE_COMM, p->job.start, p->job.end);
        if (waited > 0) {
            char *name = kl_xasprintf("wait for %s", e->labels[i]);
            kl_trace_event(e->trace, name, "wait", KL_TRACE_KERNELS, t0, t0 + waited);
            free(name);
        }
    }
}

static bool overlaps(const range *a, const range *b) { return a->lo < b->hi && b->lo < a->hi; }

void kl_overlap_before(kl_overlap *o, int i)
{
    if (!o->posted.n)
        return;
    int bufs[IR_KERNEL_MAX_BUFS], nb = plan_step_buffers(&o->e->plan->steps.v[i], bufs);
    range mem[IR_KERNEL_MAX_BUFS];
    for (int k = 0; k < nb; k++)
        mem[k] = buffer_range(o->e, bufs[k]);
    /* The thread runs them in order: waiting for the last that conflicts
     * finishes the earlier ones too (each is still accounted on its own). */
    int last = -1;
    for (int q = 0; q < o->posted.n; q++) {
        const pending *p = &o->by_step[o->posted.v[q]];
        for (int a = 0; a < p->nmem && last < q; a++)
            for (int k = 0; k < nb && last < q; k++)
                if (overlaps(&p->mem[a], &mem[k]))
                    last = q;
    }
    if (last < 0)
        return;
    for (int q = 0; q <= last; q++)
        finish(o, o->posted.v[q]);
    memmove(o->posted.v, o->posted.v + last + 1, sizeof(int) * (size_t)(o->posted.n - last - 1));
    o->posted.n -= last + 1;
}

void kl_overlap_post(kl_overlap *o, int i)
{
    kl_exec *e = o->e;
    const kl_step *st = &e->plan->steps.v[i];
    const ir_node *n = ir_nd(e->g, st->node);
    pending *p = &o->by_step[i];
    kl_check(st->kind == KL_STEP_COLLECTIVE && !p->posted);
    p->o = o;
    p->step = i;
    p->nmem = 0;
    const kl_buffer *in = &e->plan->buffers.v[st->args[0]];
    void *src = e->ptrs[st->args[0]], *dst = e->ptrs[st->args[1]];
    if (!o->t) {
        /* Enqueued now on the device's communication stream. */
        for (int k = 0; k < st->nargs; k++)
            p->mem[p->nmem++] = buffer_range(e, st->args[k]);
        o->run(e, i, src);
        p->posted = true;
        kl_vec_push(o->posted, i);
        return;
    }
    switch (n->op) {
    case IR_OP_ALL_REDUCE:
    case IR_OP_RANK_BROADCAST:
        if (src != dst)
            memcpy(dst, src, (size_t)e->plan->buffers.v[st->args[1]].bytes);
        p->src = dst;
        p->mem[p->nmem++] = buffer_range(e, st->args[1]);
        break;
    case IR_OP_REDUCE_SCATTER:
    case IR_OP_ALL_GATHER:
        if (p->staged_bytes < (size_t)in->bytes) {
            free(p->staged);
            p->staged = kl_xmalloc((size_t)in->bytes + 1);
            p->staged_bytes = (size_t)in->bytes;
        }
        memcpy(p->staged, src, (size_t)in->bytes);
        p->src = p->staged;
        p->mem[p->nmem++] = buffer_range(e, st->args[1]);
        break;
    default: /* shard_copy, shard_gather: every argument, read and written */
        p->src = src;
        for (int k = 0; k < st->nargs; k++)
            p->mem[p->nmem++] = buffer_range(e, st->args[k]);
    }
    p->job.run = run_job;
    p->job.arg = p;
    p->posted = true;
    kl_comm_thread_post(o->t, &p->job);
    kl_vec_push(o->posted, i);
}

void kl_overlap_drain(kl_overlap *o)
{
    for (int q = 0; q < o->posted.n; q++)
        finish(o, o->posted.v[q]);
    o->posted.n = 0;
}
