/* Shared by the CUDA checks: the plans of a model in every configuration
 * the checks cover (train and eval, fused and unfused, fp32/bf16/fp16). */
#ifndef KILN_TESTS_CUDA_PLANS_H
#define KILN_TESTS_CUDA_PLANS_H

#include <stdlib.h>
#include <string.h>

#include "frontend/lower.h"
#include "passes/pipeline.h"
#include "codegen/plan.h"

typedef struct plan_config {
    const char *precision; /* fp32, bf16, fp16 */
    kl_mode mode;
    bool fused;
} plan_config;

static const char *const plan_precisions[] = {"fp32", "bf16", "fp16"};

static inline const char *plan_config_str(const plan_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s %s", c->mode == KL_MODE_TRAIN ? "train" : "eval", c->fused ? "fused" : "unfused", c->precision);
    return buf;
}

/* The graph of a model in configuration c, through the pipeline; NULL
 * after an error (reported). batch NULL: the train block's. */
static inline ir_graph *plan_config_graph(const char *model, const char *batch, const plan_config *c)
{
    const char *kv[6] = {"precision", c->precision, NULL};
    if (batch) {
        kv[2] = "batch";
        kv[3] = batch;
    }
    kl_lower_opts lo = {kv};
    ir_graph *g = kl_load(model, &lo);
    if (!g)
        return NULL;
    kl_pipeline_opts po = {.mode = c->mode, .verify = true, .no_fusion = !c->fused};
    if (kl_pipeline_run(g, &po)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

/* Every configuration, in a fixed order; returns how many (at most 12).
 * precisions: a comma-separated subset of fp32,bf16,fp16, or NULL: all. */
static inline int plan_configs(plan_config *out, const char *precisions)
{
    int n = 0;
    for (size_t p = 0; p < sizeof plan_precisions / sizeof plan_precisions[0]; p++) {
        if (precisions && !strstr(precisions, plan_precisions[p]))
            continue;
        for (int m = 0; m < 2; m++)
            for (int f = 1; f >= 0; f--) {
                out[n].precision = plan_precisions[p];
                out[n].mode = m ? KL_MODE_EVAL : KL_MODE_TRAIN;
                out[n].fused = f;
                n++;
            }
    }
    return n;
}

#endif
