/* --batch auto --probe (driver/batch_probe.c): after the memory plan's
 * choice (driver/budget.h, kl_auto_batch), a few timed training steps at
 * the candidate micro-batches, and the fastest per sample. */
#ifndef KILN_BATCH_PROBE_H
#define KILN_BATCH_PROBE_H

#include <stdio.h>

#include "budget.h"
#include "runtime/exec/session.h"

#define KL_PROBE_MAX 3
/* Timed micro-batch steps per candidate, after one warm-up step. */
#define KL_PROBE_STEPS 3

typedef struct kl_probe_result {
    int n;                                /* candidates, the plan's choice first */
    int64_t batch[KL_PROBE_MAX], accumulate[KL_PROBE_MAX];
    double sec_per_sample[KL_PROBE_MAX];  /* measured (or the fake timer's) */
    int chosen;                           /* index of the fastest per sample */
    int64_t effective;                    /* asked: batch x accumulation */
    bool fake;                            /* KILN_PROBE_FAKE gave the timings */
} kl_probe_result;

/* The candidates are `chosen` (the memory plan's micro-batch, which fits)
 * and up to two smaller multiples of 8: the largest that divide the
 * effective batch, else its half and quarter rounded down to multiples of
 * 8 (when distinct and >= 8), each with the accumulation that keeps the
 * effective batch (exactly when the batch divides it, else the nearest). Each is compiled, run once to warm up
 * and timed over KL_PROBE_STEPS micro-batch steps (forward, backward and
 * update, random inputs) on be in a session of its own; ties go to the
 * larger batch. KILN_PROBE_FAKE="B:SECONDS,..." (seconds per sample by
 * micro-batch; a test hook) replaces the timing: nothing is compiled or
 * run, and a candidate it does not name is an error. -1 after an error
 * (reported). */
int kl_probe_batch(const kl_replan *r, kl_backend *be, int64_t effective, int64_t chosen, uint64_t seed,
                   kl_probe_result *out);

/* The start-up line: what was timed (or faked) and what it chose. */
void kl_probe_print(const kl_probe_result *r, FILE *f);

/* Per-step values a timed step needs to do real work: an lr, Adam's bias
 * corrections after a few steps, a gradient multiplier and a loss scale of
 * 1 (else fp16's updates would skip). Also kiln bench's. */
void kl_probe_step_values(kl_exec *e);

#endif
