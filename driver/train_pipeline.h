/* What driver/train_pipeline.c (the stages' passes and transfers) and
 * driver/train_pipeline_observe.c (the start-up lines, the measured
 * bubble, the trace's tracks, the memory lines) share: the pipeline's
 * state on this rank. Private to the two files. */
#ifndef KILN_TRAIN_PIPELINE_H
#define KILN_TRAIN_PIPELINE_H

#include "trainer.h"

/* A buffer crossing from stage `from` to `to` after step `step` (step -1:
 * after the update phase, a persistent value). */
typedef struct pipe_xfer {
    int step, buf, from, to;
} pipe_xfer;

/* A buffer a W step reads from outside the W pass: copied at the step's
 * place in the B pass, put back before it in the W pass, at off in the
 * micro-batch's W slot. */
typedef struct pipe_cap {
    int step, buf;
    int64_t off;
} pipe_cap;

/* A span of the timeline: a pass (kind F, B, W or the whole backward)
 * or a transfer, in this rank's kl_now() seconds. */
typedef struct pipe_span {
    double t0, t1;
    int kind, mb, buf; /* buf: the transfer's buffer, -1 for a pass */
    int vs;            /* its (virtual) stage */
} pipe_span;

/* One of this rank's stages (interleaved: chunk c is stage c P + rank;
 * else the rank's one stage): its steps and its saved activations. */
typedef struct pipe_chunk {
    bool *run;           /* per step: this stage's (and the start-up's) */
    KL_VEC(int) stash;   /* the buffers its forward makes and its backward reads */
    int64_t stash_bytes; /* per micro-batch */
    int slots;           /* micro-batches in flight at most (the schedule's) */
    char *slot_mem;      /* slots x stash_bytes */
} pipe_chunk;

enum { SPAN_F, SPAN_B, SPAN_W, SPAN_BW, SPAN_SEND, SPAN_RECV };

/* Per stage: busy, span, the measured steps, the receives' waits and
 * the four pass kinds' seconds and counts. */
enum { ST_BUSY, ST_SPAN, ST_STEPS, ST_WAIT, ST_KIND, ST_COUNT = ST_KIND + 4, ST_RSS = ST_COUNT + 4, ST_OWN, ST_A, ST_SLOTS,
       ST_WSLOTS, ST_ARENA, ST_N };

/* The pass running: its steps' hooks do the transfers and the W copies
 * (PASS_FB), or put the W copies back (PASS_W). */
enum { PASS_FB, PASS_W };

struct train_pipe {
    /* P ranks (stage: this rank's place in the pipeline group), v stages
     * per rank (interleaved: pipeline_virtual_stages, else 1), S = P v stages;
     * stage k runs on rank k mod P. Stages below are those k (the
     * transfers' from and to, stage_of, loss_stage, ...). */
    int P, stage, m, v, S;
    kl_pipe_schedule sched;
    kl_comm *c;       /* the pipeline group: rank = stage */
    bool *run;        /* per step: this rank's (any of its stages') */
    pipe_chunk ch[KL_PIPE_VIRTUAL_MAX];
    int vs;           /* the running F or B pass's stage; -1: all of this rank's (the update) */
    /* interleaved: the host's inputs (in_bufs, in_bytes in all) of each
     * micro-batch, fed at its first chunk's forward, put back for the
     * later chunks' (in_mem, m slots). */
    KL_VEC(int) in_bufs;
    int64_t in_bytes;
    char *in_mem;
    int *stage_of;    /* per step */
    int *at;          /* per step: its first transfer in xfers (steps + 1 entries) */
    KL_VEC(pipe_xfer) xfers;
    KL_VEC(pipe_xfer) syncs; /* after the update */
    int loss_stage, loss_phase, report_stage, report_phase;
    int finite_stage; /* fp16: the stage that checks every stage's gradients (-1: none) */
    int64_t sent_bytes, recv_bytes;
    int64_t own_bytes, persist_bytes; /* params and state: this stage's, every stage's */
    int64_t whole_arena;              /* the whole plan's arena; this rank's is the plan's arena_bytes */
    /* zero_bubble: per step, whether it is a W step (any stage's); this
     * stage's B and W steps; the W copies by step (cap_at: steps + 1
     * entries), each step's next backward step (-1: none) and the first;
     * W slots (wslots x wbytes); the buffers the update reads from B
     * (ucap, ubytes, in umem); W steps waiting at most wdefer. */
    bool *is_w, *run_b, *run_w;
    KL_VEC(pipe_cap) wcap;
    int *cap_at, *next_bw, first_bw;
    int64_t wbytes, ubytes;
    int wslots, wdefer, nw, nb_steps;
    char *wmem, *umem;
    KL_VEC(int) ucap;
    int mode, cur; /* the running pass (PASS_*) and its micro-batch */
    /* Measuring: the running step's start, busy seconds and waits in
     * receives; over the measured steps (all but the first): busy and
     * span seconds, seconds per pass kind, receive waits; the spans for
     * the trace when one is written (on any stage: record). */
    bool record;
    double step_t0, step_busy, recv_wait;
    double *offsets; /* stage 0, tracing: each stage's clock's to add */
    int64_t measured;
    double sum_busy, sum_span, sum_kind[4], sum_wait;
    int64_t n_kind[4];
    KL_VEC(pipe_span) spans;
    /* Rank 0, after train_pipeline_finish: every stage's totals. */
    double *all_stats;
};

/* One pass of the schedule: its kind (SPAN_F, SPAN_B, SPAN_W, SPAN_BW)
 * and micro-batch. */
typedef struct pipe_op {
    int kind, mb, chunk; /* chunk: which of the rank's stages (interleaved) */
} pipe_op;

/* Stage s's passes in order (3 m v at most): the schedule, written once
 * for the step, the slots and --profile's simulation. */
int train_pipe_schedule(kl_pipe_schedule sched, int P, int v, int m, int s, bool split, pipe_op *ops);

#endif
