/* Where a training step's time goes, and a one-line verdict
 * (runtime/observe/bottleneck.c): at the end of --profile runs and in kiln bench.
 *
 * Each plan step falls in one category (GEMM/conv, fused elementwise,
 * reductions and norms, optimizer, copies, collectives); data wait and
 * host overhead (the step's time outside its kernels and its data wait:
 * launches, synchronisation, the loop) come from the step's clock. Each
 * category's achieved FLOP/s or GB/s is set against the machine's
 * measured peak (roofline position), and the verdict is a pure function
 * of these numbers (unit-tested in tests/unit/test_observe.c). */
#ifndef KILN_BOTTLENECK_H
#define KILN_BOTTLENECK_H

#include <stdio.h>

#include "plan/plan.h"

typedef enum kl_category {
    KL_CAT_GEMM,        /* GEMMs and convolution kernels */
    KL_CAT_ELEMENTWISE, /* fused elementwise chains and GEMM epilogues */
    KL_CAT_REDUCTION,   /* reductions, norms, softmax/cross-entropy, pooling */
    KL_CAT_OPTIMIZER,   /* optimizer updates */
    KL_CAT_COPY,        /* layout moves: transpose, permute, concat, slice */
    KL_CAT_COLLECTIVE,  /* collectives between ranks */
    KL_CAT_DATA_WAIT,   /* waiting for the next batch */
    KL_CAT_HOST,        /* the step's time outside kernels and data wait */
    KL_CAT_N
} kl_category;

typedef struct kl_bottleneck {
    double seconds[KL_CAT_N]; /* per step */
    double bytes[KL_CAT_N], flops[KL_CAT_N]; /* per step */
    double step_s;            /* the whole step */
    double peak_gbs;          /* measured copy bandwidth (0: unknown) */
    double peak_gflops;       /* measured GEMM throughput (0: unknown) */
    double launches;          /* kernel launches and GEMM calls per step */
    /* Collective seconds per step hidden behind compute (on the
     * communication thread while backward ran): in no category, since the
     * step did not wait for them; the collectives row is the exposed part. */
    double hidden_s;
    bool data_known;          /* data wait measured (a training run, not bench) */
} kl_bottleneck;

/* The category of a plan step. */
kl_category kl_step_category(const kl_plan *p, const kl_step *s);
const char *kl_category_name(kl_category c);
/* Adds seconds spent in plan step i (and its bytes and FLOPs times runs)
 * to b; hidden of them (a collective's, overlapped with compute) go to
 * hidden_s, not to its category. */
void kl_bottleneck_add(kl_bottleneck *b, const kl_plan *p, int i, double seconds, double hidden, double runs);
/* Per step: divides what was added by steps, sets the step time and data
 * wait (per step), and host overhead as what is left. */
void kl_bottleneck_finish(kl_bottleneck *b, double steps, double step_s, double data_wait_s);
/* The verdict ("compute-bound on GEMMs: ...") into buf; returns buf. */
const char *kl_bottleneck_verdict(const kl_bottleneck *b, char *buf, size_t n);
/* The table and the verdict. */
void kl_bottleneck_print(const kl_bottleneck *b, FILE *out);

/* The machine's memcpy bandwidth in GB/s (bytes read plus written),
 * measured now; the GEMM peak is the backend's kl_gemm_peak_gflops
 * (runtime/exec/backend.h). */
double kl_copy_bandwidth(void);

#endif
