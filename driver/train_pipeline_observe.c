/* Pipeline parallelism, what the run shows of it (driver/train_pipeline.c
 * runs it): the start-up lines (the layout of the ranks, each stage's
 * transfers and saved activations), the stages' clocks and spans for the
 * trace (one track per stage), and --profile's measured bubble against
 * the schedule's theoretical one and each stage's memory against the
 * formula. */
#include <stdlib.h>
#include <string.h>

#include "train_pipeline.h"
#include "runtime/observe/hostmetrics.h"

/* The start-up lines of the layout (every rank calls it; rank 0 prints). */
static void print_layout(const trainer *t)
{
    /* Every rank's place, gathered over the world: its stage, its
     * tensor-parallel group and its data-parallel group (the ranks of
     * its stage and tensor-parallel index), printed by rank 0. */
    kl_comm *w = kl_comm_whole(t->comm);
    int N = kl_comm_world(w), T = t->tp > 1 ? t->tp : 1, D = t->world;
    int mine[3] = {t->stage, t->tp_rank, t->rank}, *all = kl_xmalloc(sizeof mine * (size_t)N);
    kl_comm_gather_startup(w, mine, sizeof mine, all, "the ranks' stages and groups");
    if (t->opt.quiet) {
        free(all);
        return;
    }
    printf("layout: world %d = %d stages x %d tensor-parallel x %d data-parallel (rank = tp + %d (stage + %d replica))\n",
           N, t->pp, T, D, T, t->pp);
    for (int r = 0; r < N; r++) {
        const int *x = all + 3 * r;
        /* Its tensor-parallel group: the T consecutive ranks from r - tp;
         * its data-parallel group: the ranks of its stage and tp index. */
        int tp0 = r - x[1];
        printf("layout: rank %d: stage %d, tensor-parallel rank %d of ranks %d..%d, data-parallel rank %d of ranks",
               r, x[0], x[1], tp0, tp0 + T - 1, x[2]);
        for (int d = 0; d < D; d++)
            printf("%s%d", d ? "," : " ", x[1] + T * (x[0] + t->pp * d));
        printf("\n");
    }
    free(all);
}

/* The bubble fraction the schedule gives with each stage's measured mean
 * pass times (stats: ST_N per stage), transfers taking no time: each
 * pass starts when its stage is free and its input is there (F after
 * the previous stage's F, B or the whole backward after the next
 * stage's). The mean over the stages of the time not in passes. */
static double simulated_bubble(const train_pipe *q, const double *stats)
{
    int P = q->P, m = q->m, S = q->S, cap = 3 * m * q->v;
    pipe_op *ops = kl_xmalloc(sizeof *ops * (size_t)(cap * P));
    int *n = kl_xcalloc((size_t)P, sizeof *n), *next = kl_xcalloc((size_t)P, sizeof *next);
    double *fdone = kl_xmalloc(sizeof(double) * (size_t)(S * m)), *bdone = kl_xmalloc(sizeof(double) * (size_t)(S * m));
    double *clock = kl_xcalloc((size_t)P, sizeof *clock), busy = 0;
    for (int i = 0; i < S * m; i++)
        fdone[i] = bdone[i] = -1;
    for (int s = 0; s < P; s++)
        n[s] = train_pipe_schedule(q->sched, P, q->v, m, s, stats[s * ST_N + ST_COUNT + SPAN_W] > 0, ops + cap * s);
    for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < P; s++)
            while (next[s] < n[s]) {
                const pipe_op *o = &ops[cap * s + next[s]];
                int vs = o->chunk * P + s;
                double ready = 0;
                if (o->kind == SPAN_F && vs > 0)
                    ready = fdone[(vs - 1) * m + o->mb];
                if ((o->kind == SPAN_B || o->kind == SPAN_BW) && vs < S - 1)
                    ready = bdone[(vs + 1) * m + o->mb];
                if (ready < 0)
                    break;
                const double *x = stats + (size_t)s * ST_N;
                double d = x[ST_COUNT + o->kind] > 0 ? x[ST_KIND + o->kind] / x[ST_COUNT + o->kind] : 0;
                clock[s] = (clock[s] > ready ? clock[s] : ready) + d;
                busy += d;
                if (o->kind == SPAN_F)
                    fdone[vs * m + o->mb] = clock[s];
                else if (o->kind != SPAN_W)
                    bdone[vs * m + o->mb] = clock[s];
                next[s]++;
                moved = true;
            }
    }
    double end = 0;
    for (int s = 0; s < P; s++)
        end = clock[s] > end ? clock[s] : end;
    free(ops), free(n), free(next), free(fdone), free(bdone), free(clock);
    return end > 0 ? 1 - busy / (P * end) : 0;
}

void train_pipeline_observe(trainer *t)
{
    train_pipe *q = t->pipe;
    if (!q)
        return;
    /* Spans are kept when rank 0 writes a trace. */
    int mine = t->trace != NULL, *all = kl_xmalloc(sizeof mine * (size_t)q->P);
    kl_comm_gather_startup(q->c, &mine, sizeof mine, all, "whether the stages trace");
    for (int s = 0; s < q->P; s++)
        q->record |= all[s] != 0;
    free(all);
    if (!q->record)
        return;
    /* Each stage's clock against stage 0's (hosts have their own): 8
     * round trips, stage 0's midpoint less the stage's reading, from the
     * quickest trip (off by at most half of it). */
    int tag = q->xfers.n + q->syncs.n + 3;
    q->offsets = kl_xcalloc((size_t)q->P, sizeof *q->offsets);
    for (int s = 1; s < q->P; s++) {
        double best = -1;
        for (int k = 0; k < 8; k++) {
            double t0 = kl_now(), there = 0;
            if (q->stage == 0) {
                kl_comm_send(q->c, &t0, sizeof t0, s, tag, "a clock reading");
                kl_comm_recv(q->c, &there, sizeof there, s, tag + 1, "a stage's clock reading");
                double t1 = kl_now();
                if (best < 0 || t1 - t0 < best)
                    best = t1 - t0, q->offsets[s] = (t0 + t1) / 2 - there;
            } else if (q->stage == s) {
                kl_comm_recv(q->c, &there, sizeof there, 0, tag, "stage 0's clock reading");
                double now = kl_now();
                kl_comm_send(q->c, &now, sizeof now, 0, tag + 1, "a clock reading");
            }
        }
    }
    kl_comm_send_wait(q->c);
}

/* The schedule's bubble fraction in theory: (P-1)/(m+P-1) for gpipe
 * and 1f1b; interleaved's with v stages per rank (P-1)/(vm+P-1); ZB-H1's with forward, input gradient and weight gradient
 * taking equal times, (P-1)/(3m+P-1). */
static double theory(const train_pipe *q)
{
    if (q->sched == KL_PIPE_ZERO_BUBBLE)
        return (double)(q->P - 1) / (3.0 * q->m + q->P - 1);
    if (q->sched == KL_PIPE_INTERLEAVED)
        return (double)(q->P - 1) / ((double)q->v * q->m + q->P - 1);
    return (double)(q->P - 1) / (double)(q->m + q->P - 1);
}

static const char *span_name(int kind)
{
    static const char *names[] = {"forward", "input gradient", "weight gradient", "backward", "send", "recv"};
    return names[kind];
}

void train_pipeline_finish(trainer *t)
{
    train_pipe *q = t->pipe;
    if (!q || !(q->record || t->opt.profile))
        return;
    double mine[ST_N] = {q->sum_busy, q->sum_span, (double)q->measured, q->recv_wait - q->sum_wait};
    for (int k = 0; k < 4; k++)
        mine[ST_KIND + k] = q->sum_kind[k], mine[ST_COUNT + k] = (double)q->n_kind[k];
    mine[ST_RSS] = (double)kl_host_rss_peak();
    mine[ST_OWN] = (double)q->own_bytes;
    /* Saved activations: one micro-batch's of every chunk (A), and the
     * slots' bytes over A (interleaved: the chunks' slots, weighted). */
    double a = 0, slot_bytes = 0;
    for (int c = 0; c < q->v; c++)
        a += (double)q->ch[c].stash_bytes, slot_bytes += (double)q->ch[c].stash_bytes * q->ch[c].slots;
    mine[ST_A] = a;
    mine[ST_SLOTS] = a > 0 ? slot_bytes / a : q->ch[0].slots;
    mine[ST_WSLOTS] = (double)(q->wbytes * q->wslots);
    mine[ST_ARENA] = (double)t->train->plan->arena_bytes;
    q->all_stats = kl_xmalloc(sizeof mine * (size_t)q->P);
    kl_comm_gather_startup(q->c, mine, sizeof mine, q->all_stats, "the stages' pass times");
    if (!q->record)
        return;
    /* The spans, to stage 0, which writes them on one track per stage. */
    kl_exec *e = t->train;
    int tag = q->xfers.n + q->syncs.n + 1;
    if (q->stage) {
        int64_t n = q->spans.n;
        kl_comm_send(q->c, &n, sizeof n, 0, tag, "the number of the stage's spans");
        if (n)
            kl_comm_send(q->c, q->spans.v, sizeof *q->spans.v * (size_t)n, 0, tag + 1, "the stage's spans");
        kl_comm_send_wait(q->c);
        return;
    }
    for (int s = 0; s < q->P; s++) {
        pipe_span *v = q->spans.v;
        int64_t n = q->spans.n;
        if (s) {
            kl_comm_recv(q->c, &n, sizeof n, s, tag, "the number of a stage's spans");
            v = kl_xmalloc(sizeof *v * (size_t)n + 1);
            if (n)
                kl_comm_recv(q->c, v, sizeof *v * (size_t)n, s, tag + 1, "a stage's spans");
        }
        char name[160];
        snprintf(name, sizeof name, "pipeline stage %d", s);
        kl_trace_track(t->trace, KL_TRACE_STAGE0 + s, name);
        for (int64_t i = 0; i < n; i++) {
            const pipe_span *x = &v[i];
            if (x->buf >= 0) {
                int val = e->plan->buffers.v[x->buf].value;
                snprintf(name, sizeof name, "%s %s (micro-batch %d)", span_name(x->kind),
                         val >= 0 ? ir_val(e->g, val)->name : "a scratch buffer", x->mb);
            } else if (q->v > 1) {
                snprintf(name, sizeof name, "%s %d (stage %d)", span_name(x->kind), x->mb, x->vs);
            } else {
                snprintf(name, sizeof name, "%s %d", span_name(x->kind), x->mb);
            }
            kl_trace_event(t->trace, name, x->buf >= 0 ? "transfer" : span_name(x->kind), KL_TRACE_STAGE0 + s,
                           x->t0 + q->offsets[s], x->t1 + q->offsets[s]);
        }
        if (s)
            free(v);
    }
}

static void print_bubble(const train_pipe *q, const double *a, int replicas)
{
    printf("\npipeline bubble (%s, P = %d, m = %d%s; each stage's time not in its passes or waiting in receives, over "
           "the span from the step's start to the last stage's last pass; %.0f steps after the first):\n",
           kl_pipe_schedule_name(q->sched), q->P, q->m, replicas > 1 ? ", rank 0's data-parallel replica" : "",
           a[ST_STEPS]);
    double mean = 0, span = a[ST_SPAN] / a[ST_STEPS];
    for (int s = 0; s < q->P; s++) {
        const double *x = a + (size_t)s * ST_N;
        double bubble = 1 - x[ST_BUSY] / x[ST_SPAN];
        mean += bubble / q->P;
        printf("  stage %d: bubble %5.1f%%, busy %.2f ms a step, waiting in receives %.2f ms a step;", s, 100 * bubble,
               1e3 * x[ST_BUSY] / x[ST_STEPS], 1e3 * x[ST_WAIT] / x[ST_STEPS]);
        for (int k = 0; k < 4; k++)
            if (x[ST_COUNT + k] > 0)
                printf(" %s %.3f ms", span_name(k), 1e3 * x[ST_KIND + k] / x[ST_COUNT + k]);
        printf("\n");
    }
    char il[64];
    snprintf(il, sizeof il, "(P-1)/(vm+P-1), v = %d stages per rank", q->v);
    printf("  measured %.1f%% (mean of the stages) against the theoretical %.1f%% (%s) and %.1f%% (the schedule "
           "with these pass times, transfers free); span %.2f ms a step\n",
           100 * mean, 100 * theory(q),
           q->sched == KL_PIPE_ZERO_BUBBLE   ? "ZB-H1, (P-1)/(3m+P-1) with equal forward, input- and weight-gradient times"
           : q->sched == KL_PIPE_INTERLEAVED ? il
                                             : "(P-1)/(m+P-1)",
           100 * simulated_bubble(q, a), 1e3 * span);
}

void train_pipeline_print_profile(const trainer *t)
{
    const train_pipe *q = t->pipe;
    if (!q || !q->all_stats)
        return;
    const double *a = q->all_stats;
    if (a[ST_STEPS] < 1)
        printf("\npipeline: one step: its bubble is not measured (the first step warms up)\n");
    else
        print_bubble(q, a, t->world);
    /* Memory: the schedule's part (the saved-activation slots) against
     * gpipe's; the rank's arena (its stages' buffers of the micro-batch
     * running); the formula's sum (its params and state, the slots) and
     * what the rank allocates (the arena too, and every stage's params
     * and state, which every rank holds); the peak resident set, which
     * also holds the code, the data and the libraries. */
    char ar[32], ps[32];
    kl_format_bytes(ar, sizeof ar, q->whole_arena);
    kl_format_bytes(ps, sizeof ps, q->persist_bytes);
    printf("pipeline memory (%s; each rank's arena holds its stages' buffers, the whole plan's would be %s; every "
           "rank holds every stage's params and state, %s):\n",
           kl_pipe_schedule_name(q->sched), ar, ps);
    for (int s = 0; s < q->P; s++) {
        const double *x = a + (size_t)s * ST_N;
        char rss[32], are[32], one[32], sl[32], gp[32], own[32], f[32], al[32];
        kl_format_bytes(rss, sizeof rss, (int64_t)x[ST_RSS]);
        kl_format_bytes(are, sizeof are, (int64_t)x[ST_ARENA]);
        kl_format_bytes(one, sizeof one, (int64_t)x[ST_A]);
        kl_format_bytes(sl, sizeof sl, (int64_t)(x[ST_A] * x[ST_SLOTS]));
        kl_format_bytes(gp, sizeof gp, (int64_t)x[ST_A] * q->m);
        kl_format_bytes(own, sizeof own, (int64_t)x[ST_OWN]);
        double formula = x[ST_OWN] + x[ST_A] * x[ST_SLOTS] + x[ST_WSLOTS];
        kl_format_bytes(f, sizeof f, (int64_t)formula);
        kl_format_bytes(al, sizeof al, (int64_t)(formula - x[ST_OWN] + (double)q->persist_bytes + x[ST_ARENA]));
        printf("  stage %d: peak resident %s; arena %s; saved activations %.3g x %s = %s (gpipe's %d x = %s: %.3f of "
               "it); its params and state %s;",
               s, rss, are, x[ST_SLOTS], one, sl, q->m, gp, x[ST_SLOTS] / q->m, own);
        if (q->is_w) {
            char w[32];
            kl_format_bytes(w, sizeof w, (int64_t)x[ST_WSLOTS]);
            printf(" weight-gradient inputs %s;", w);
        }
        printf(" formula %s; allocated %s (with the arena and every stage's params and state)\n", f, al);
    }
}

void train_pipeline_print_start(const trainer *t)
{
    train_pipe *q = t->pipe;
    if (!q)
        return;
    print_layout(t);
    /* Per rank: zero_bubble's 5 counts, its arena, then each chunk's
     * saved bytes, slots and buffers. */
    enum { NX = 6 + 3 * KL_PIPE_VIRTUAL_MAX };
    int64_t mine[NX] = {q->wbytes, q->wslots, q->ubytes, q->nb_steps, q->nw, t->train->plan->arena_bytes},
            *all = kl_xmalloc(sizeof mine * (size_t)q->P);
    for (int c = 0; c < q->v; c++) {
        mine[6 + 3 * c] = q->ch[c].stash_bytes;
        mine[7 + 3 * c] = q->ch[c].slots;
        mine[8 + 3 * c] = q->ch[c].stash.n;
    }
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
    if (q->v > 1)
        printf("pipeline: %d stages on %d ranks (stage k on rank k mod %d), schedule %s, %d micro-batch%s; transfers: "
               "%d forward and %d backward per micro-batch, %d in the update and %d after it\n",
               q->S, q->P, q->P, kl_pipe_schedule_name(q->sched), q->m, q->m == 1 ? "" : "es", n[0], n[1], n[2],
               q->syncs.n);
    else
        printf("pipeline: %d stages (rank = stage), schedule %s, %d micro-batch%s; transfers: %d forward and %d backward "
               "per micro-batch, %d in the update and %d after it\n",
               q->P, kl_pipe_schedule_name(q->sched), q->m, q->m == 1 ? "" : "es", n[0], n[1], n[2], q->syncs.n);
    for (int k = 0; k < q->S; k++) {
        char a[32], b[32];
        int s = k % q->P;
        const int64_t *x = all + NX * s, *y = x + 6 + 3 * (k / q->P);
        kl_format_bytes(a, sizeof a, y[0]);
        kl_format_bytes(b, sizeof b, y[0] * y[1]);
        char on[32] = "";
        if (q->v > 1)
            snprintf(on, sizeof on, " (rank %d)", s);
        printf("pipeline: stage %d%s: saved activations %s per micro-batch (%lld buffers) x %lld in flight = %s\n", k, on,
               a, (long long)y[2], (long long)y[1], b);
        if (q->is_w) {
            char c[32];
            kl_format_bytes(a, sizeof a, x[0]);
            kl_format_bytes(b, sizeof b, x[0] * x[1]);
            kl_format_bytes(c, sizeof c, x[2]);
            printf("pipeline: stage %d: zero_bubble: %lld input-gradient and %lld weight-gradient steps; weight "
                   "gradients of at most %lld micro-batch%s wait; their inputs %s per micro-batch x %lld = %s; the "
                   "update's from the input gradients %s\n",
                   s, (long long)x[3], (long long)x[4], (long long)x[1] - 1, x[1] == 2 ? "" : "es", a, (long long)x[1],
                   b, c);
        }
    }
    char w[32];
    kl_format_bytes(w, sizeof w, q->whole_arena);
    for (int r = 0; r < q->P; r++) {
        char a[32];
        kl_format_bytes(a, sizeof a, all[NX * r + 5]);
        printf("pipeline: rank %d: arena %s (its stages' buffers and transfers; the whole plan's %s)\n", r, a, w);
    }
    free(all);
}
