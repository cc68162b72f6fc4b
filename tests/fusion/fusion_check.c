/* kiln bench --check-fusion's matching and comparison (tools/fusion_check.c,
 * issue 32 item 7) on given timings, so it is deterministic: the model's
 * fused and unfused training plans, every unfused kernel step 1 ms and
 * every fused kernel step 1 ms except one group of two or more parts,
 * which takes 100 ms. Every unfused kernel step must be matched to one
 * fused kernel step (the parts add up to the unfused kernel count), and
 * exactly that group must be flagged slow; just under 1.1 times its
 * parts' sum (the 10% margin) it must not be.
 *
 *   fusion_check MODEL.kl
 */
#include <stdio.h>
#include <stdlib.h>

#include "driver/compile.h"
#include "tools/fusion_check.h"

static kl_compiled *make(const char *path, bool fuse)
{
    const char *kv[] = {"batch", "2", NULL};
    kl_compile_opts co = {.kv = kv, .mode = KL_MODE_TRAIN, .no_fusion = !fuse};
    kl_compiled *c = kl_compile_file(path, &co);
    if (!c || !c->plan)
        exit(1);
    return c;
}

static int kernels(const kl_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->steps.n; i++)
        n += p->steps.v[i].kind == KL_STEP_KERNEL;
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fusion_check MODEL.kl\n");
        return 2;
    }
    kl_compiled *f = make(argv[1], true), *u = make(argv[1], false);
    const kl_plan *pf = f->plan, *pu = u->plan;
    double *tf = calloc((size_t)pf->steps.n + 1, sizeof(double)), *tu = calloc((size_t)pu->steps.n + 1, sizeof(double));
    for (int i = 0; i < pf->steps.n; i++)
        tf[i] = 1;
    for (int j = 0; j < pu->steps.n; j++)
        tu[j] = 1;
    kl_fusion_group *g = calloc((size_t)pf->steps.n + 1, sizeof *g);
    int matched = 0, n = kl_fusion_groups(pf, tf, pu, tu, 0.10, g, &matched), fail = 0;
    if (n < 1) {
        fprintf(stderr, "FAIL: no fused kernel of two or more parts\n");
        return 1;
    }
    /* Every unfused kernel step is a part of one fused kernel step. */
    int parts = 0;
    for (int k = 0; k < n; k++) {
        parts += g[k].parts;
        if (g[k].slow || g[k].parts_ms < g[k].parts) {
            fprintf(stderr, "FAIL: step %d: slow %d, parts %d, parts_ms %g at 1 ms each\n", g[k].step, g[k].slow,
                    g[k].parts, g[k].parts_ms);
            fail = 1;
        }
    }
    if (matched != kernels(pu)) {
        fprintf(stderr, "FAIL: %d of the unfused plan's %d kernel steps matched a fused kernel step\n", matched, kernels(pu));
        fail = 1;
    }
    int target = g[n / 2].step, tparts = g[n / 2].parts;
    double tparts_ms = g[n / 2].parts_ms;
    for (int pass = 0; pass < 2; pass++) {
        /* 100 ms: slow; the parts' sum times 1.1 exactly: not slow (the margin). */
        tf[target] = pass ? 1.1 * tparts_ms - 1e-9 : 100;
        n = kl_fusion_groups(pf, tf, pu, tu, 0.10, g, NULL);
        for (int k = 0; k < n; k++)
            if (g[k].slow != (g[k].step == target && !pass)) {
                fprintf(stderr, "FAIL: fused step %d at %g ms (%d parts at 1 ms): slow %d\n", g[k].step, g[k].fused_ms,
                        g[k].parts, g[k].slow);
                fail = 1;
            }
    }
    if (!fail)
        printf("ok: %d fused kernels of 2+ parts (%d parts), the %d-part step %d flagged only at 100 ms\n", n, parts, tparts,
               target);
    free(g);
    free(tf);
    free(tu);
    kl_compiled_free(f);
    kl_compiled_free(u);
    return fail;
}
