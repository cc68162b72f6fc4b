/* Shared by the CUDA checks: the plans of a model in every configuration
 * the checks cover (train and eval, fused and unfused, fp32/bf16/fp16). */
#ifndef KILN_TESTS_CUDA_PLANS_H
#define KILN_TESTS_CUDA_PLANS_H

#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"

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

/* A model compiled in configuration c (driver/compile.c); NULL after an
 * error (reported). batch NULL: the train block's. */
static inline kl_compiled *plan_config_compile(const char *model, const char *batch, const plan_config *c)
{
    const char *kv[6] = {"precision", c->precision, NULL};
    if (batch) {
        kv[2] = "batch";
        kv[3] = batch;
    }
    kl_compile_opts co = {.kv = kv, .mode = c->mode, .verify = true, .no_fusion = !c->fused};
    return kl_compile_file(model, &co);
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
