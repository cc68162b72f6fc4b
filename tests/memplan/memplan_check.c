/* The memory plan checker over a model's plans (codegen/memplan.h):
 * offsets aligned, no two buffers live at the same time overlap, every
 * read follows a write of the same data in the same run (over the
 * micro-batch runs of the executable), pinned values intact.
 *
 *   memplan_check MODEL [--grads] [--max-ratio R] [--set KEY=VALUE]...
 *
 * checks the training plan with accumulate 1 and 4, fp32 and bf16, with
 * recompute = auto, and the evaluation plan in both precisions (a .kl model whose params are f64
 * stays f64: --grads checks the gradient models with their gradients kept
 * for reading, as tests/grad/gradcheck.c does). With --max-ratio, the arena of
 * every plan must be at most R times its lower bound. Prints one line per
 * plan: arena, lower bound, ratio, unplanned bytes. */
#include <stdlib.h>
#include <string.h>

#include "plan/memplan.h"
#include "driver/compile.h"

typedef struct config {
    const char *name;
    kl_mode mode;
    const char *precision; /* NULL: as the model says */
    const char *accumulate;
    const char *recompute; /* NULL: as the model says */
} config;

static int check_one(const char *path, const config *c, const char *const *sets, int nsets, bool grads, double max_ratio)
{
    const char *kv[80];
    int n = 0;
    for (int i = 0; i < nsets; i += 2) {
        kv[n++] = sets[i];
        kv[n++] = sets[i + 1];
    }
    if (c->precision) {
        kv[n++] = "precision";
        kv[n++] = c->precision;
    }
    if (c->accumulate) {
        kv[n++] = "accumulate";
        kv[n++] = c->accumulate;
    }
    if (c->recompute) {
        kv[n++] = "recompute";
        kv[n++] = c->recompute;
    }
    kv[n] = NULL;
    kl_compile_opts co = {.kv = kv, .mode = c->mode, .verify = true, .stop_after = "passes"};
    kl_compiled *cc = kl_compile_file(path, &co);
    if (!cc)
        return 1;
    ir_graph *g = kl_compiled_take_graph(cc);
    int *keep = kl_xcalloc((size_t)g->grads.n + 1, sizeof *keep);
    kl_plan_opts o = {.keep = keep};
    for (int i = 0; grads && i < g->grads.n; i++)
        keep[o.nkeep++] = g->grads.v[i].grad;
    /* Through memory planning; the check is this test's own, printed. */
    co.stop_after = "memplan";
    co.plan = &o;
    cc = kl_compile_graph(g, &co);
    if (!cc)
        return 1;
    const kl_plan *p = cc->plan;
    kl_buf why = {0};
    int accumulate = c->accumulate ? atoi(c->accumulate) : 1;
    int problems = plan_check(p, accumulate, &why);
    double ratio = p->arena_lower_bound ? (double)p->arena_bytes / (double)p->arena_lower_bound : 1.0;
    printf("%-28s %-16s arena %12lld  lower bound %12lld  ratio %.3f  unplanned %12lld  %s\n", path, c->name,
           (long long)p->arena_bytes, (long long)p->arena_lower_bound, ratio, (long long)p->arena_unplanned,
           problems ? "FAIL" : "ok");
    if (problems)
        printf("%s", why.s);
    if (max_ratio > 0 && ratio > max_ratio) {
        printf("FAIL: the arena is %.3f times the lower bound (at most %.3f)\n", ratio, max_ratio);
        problems++;
    }
    kl_buf_free(&why);
    kl_compiled_free(cc);
    free(keep);
    return problems ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    const char *sets[64];
    int nsets = 0;
    bool grads = false;
    double max_ratio = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--grads")) {
            grads = true;
        } else if (!strcmp(argv[i], "--max-ratio") && i + 1 < argc) {
            max_ratio = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets + 2 < (int)KL_ARRAY_LEN(sets)) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "--set needs KEY=VALUE\n");
                return 2;
            }
            *eq = 0;
            sets[nsets++] = kv;
            sets[nsets++] = eq + 1;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "usage: memplan_check MODEL [--grads] [--max-ratio R] [--set KEY=VALUE]...\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: memplan_check MODEL [--grads] [--max-ratio R] [--set KEY=VALUE]...\n");
        return 2;
    }
    static const config all[] = {
        {"train fp32", KL_MODE_TRAIN, "fp32", "1", NULL},
        {"train fp32 acc 4", KL_MODE_TRAIN, "fp32", "4", NULL},
        {"train bf16", KL_MODE_TRAIN, "bf16", "1", NULL},
        {"train bf16 acc 4", KL_MODE_TRAIN, "bf16", "4", NULL},
        {"train recompute", KL_MODE_TRAIN, "fp32", "1", "auto"},
        {"eval fp32", KL_MODE_EVAL, "fp32", NULL, NULL},
        {"eval bf16", KL_MODE_EVAL, "bf16", NULL, NULL},
    };
    /* The gradient models are f64 throughout: precision does not apply. */
    static const config grad_models[] = {
        {"train", KL_MODE_TRAIN, NULL, "1", NULL},
        {"train acc 4", KL_MODE_TRAIN, NULL, "4", NULL},
        {"train recompute", KL_MODE_TRAIN, NULL, "1", "auto"},
        {"eval", KL_MODE_EVAL, NULL, NULL, NULL},
    };
    const config *cs = grads ? grad_models : all;
    int ncs = grads ? (int)KL_ARRAY_LEN(grad_models) : (int)KL_ARRAY_LEN(all);
    int failed = 0;
    for (int i = 0; i < ncs; i++)
        failed += check_one(path, &cs[i], sets, nsets, grads, max_ratio);
    return failed ? 1 : 0;
}
