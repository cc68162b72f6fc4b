/* Shared by the CUDA checks: the plans of a model in every configuration
 * the checks cover (train and eval, fused and unfused, fp32/bf16/fp16). */
#ifndef KILN_TESTS_CUDA_PLANS_H
#define KILN_TESTS_CUDA_PLANS_H

#include <stdio.h>
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

/* A distinct kernel (by name) of the checked plans: where it was first
 * seen, its CUDA C (src), the NVRTC program and its launches. */
typedef struct plan_kernel {
    char *name, *what, *where, *src, *program;
    kir_cuda_launch *launches;
    int nl;
} plan_kernel;
typedef KL_VEC(plan_kernel) plan_kernel_vec;

/* Every distinct kernel of every model in every configuration of
 * `precisions` (plan_configs), in order of first appearance, appended to
 * out. A model that does not build is reported and counted; returns the
 * count. *plans: the plans made. */
static inline int plan_collect_kernels(const char *const *models, int nmodels, const char *batch, const char *precisions,
                                       plan_kernel_vec *out, int *plans)
{
    int failures = 0;
    for (int m = 0; m < nmodels; m++) {
        plan_config cfg[16];
        int nc = plan_configs(cfg, precisions);
        for (int c = 0; c < nc; c++) {
            char cs[64];
            kl_compiled *cc = plan_config_compile(models[m], batch, &cfg[c]);
            if (!cc) {
                printf("FAIL: %s (%s): the model does not build\n", models[m], plan_config_str(&cfg[c], cs, sizeof cs));
                failures++;
                continue;
            }
            const kl_plan *p = cc->plan;
            (*plans)++;
            for (int k = 0; k < p->kernels.n; k++) {
                const kl_kernel_src *src = &p->kernels.v[k];
                bool seen = false;
                for (int j = 0; j < out->n && !seen; j++)
                    seen = !strcmp(out->v[j].name, src->name);
                if (seen)
                    continue;
                plan_kernel e = {kl_xstrdup(src->name), kl_xstrdup(src->what), NULL, kl_xstrdup(src->cuda.src),
                                 kir_cuda_program(src->cuda.src, src->cuda.needs), NULL, src->cuda.nlaunches};
                e.where = kl_xasprintf("%s, %s", models[m], plan_config_str(&cfg[c], cs, sizeof cs));
                e.launches = kl_xcalloc((size_t)e.nl + 1, sizeof *e.launches);
                memcpy(e.launches, src->cuda.launches, sizeof *e.launches * (size_t)e.nl);
                kl_vec_push(*out, e);
            }
            kl_compiled_free(cc);
        }
    }
    return failures;
}

static inline void plan_kernels_free(plan_kernel_vec *v)
{
    for (int i = 0; i < v->n; i++) {
        free(v->v[i].name);
        free(v->v[i].what);
        free(v->v[i].where);
        free(v->v[i].src);
        free(v->v[i].program);
        free(v->v[i].launches);
    }
    kl_vec_free(*v);
}

#endif
