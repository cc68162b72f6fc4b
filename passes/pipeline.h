/* The pass pipeline: one flat list, in order (passes/pipeline.c). */
#ifndef KILN_PIPELINE_H
#define KILN_PIPELINE_H

#include "../ir/ir.h"

typedef enum kl_mode { KL_MODE_TRAIN, KL_MODE_EVAL } kl_mode;

typedef struct kl_pipeline_opts {
    const char *stop_after; /* a pass name, "lower" or "all" (NULL: all) */
    bool verify;            /* run the verifier after every pass */
    kl_mode mode;           /* train: forward, backward, update; eval: forward */
    bool no_fusion;         /* one kernel per node (the unfused baseline) */
} kl_pipeline_opts;

/* Runs the passes on g in place, skipping those it already went through
 * (an IR dump records them). Returns 0, or -1 after reporting an error
 * (a user error such as a model without a loss). */
int kl_pipeline_run(ir_graph *g, const kl_pipeline_opts *opts);
/* True when name is "lower", "all" or a pass of the pipeline. */
bool kl_pipeline_has_pass(const char *name);
/* "lower, autodiff, ..." for help texts. */
const char *kl_pipeline_pass_names(void);

#endif
