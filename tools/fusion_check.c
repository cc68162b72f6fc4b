/* The fusion check of kiln bench (issue 32 item 7): a fused kernel must
 * not be slower than the kernels it replaces. The unfused plan runs one
 * kernel per node, so a fused group's parts are the unfused kernel steps
 * whose node lies in that group; their times add up to what the group
 * would cost without fusion. The times are the caller's (kiln bench:
 * medians of repeats), so this file only matches and compares. */
#include <stdlib.h>
#include <string.h>

#include "fusion_check.h"

/* Node numbers differ between the two compiles (constant folding sees
 * other nodes), so nodes are matched by what they are: op, phase, source
 * location and scope; among equal ones, in order. (Not the result type:
 * the fused plan's convolutions may have another layout.) */
static bool same_node(const ir_node *a, const ir_node *b)
{
    return a->op == b->op && a->phase == b->phase && a->loc.line == b->loc.line && a->loc.col == b->loc.col &&
           (a->scope == NULL) == (b->scope == NULL) && (!a->scope || !strcmp(a->scope, b->scope));
}

/* The fused kernel step that holds node k of the fused graph, or -1. */
static int step_of_node(const kl_plan *fused, int k)
{
    const ir_graph *g = fused->g;
    int grp = ir_nd(g, k)->group;
    for (int i = 0; i < fused->steps.n; i++) {
        const kl_step *st = &fused->steps.v[i];
        if (st->kind != KL_STEP_KERNEL)
            continue;
        if (st->node == k || (grp >= 0 && ir_nd(g, st->node)->group == grp))
            return i;
    }
    return -1;
}

int kl_fusion_groups(const kl_plan *fused, const double *fused_ms, const kl_plan *unfused, const double *unfused_ms,
                     double margin, kl_fusion_group *out, int *matched)
{
    int n = fused->steps.n;
    int *parts = kl_xcalloc((size_t)n + 1, sizeof(int));
    double *sum = kl_xcalloc((size_t)n + 1, sizeof(double));
    const ir_graph *gu = unfused->g, *gf = fused->g;
    if (matched)
        *matched = 0;
    bool *taken = kl_xcalloc((size_t)gf->nodes.n + 1, sizeof(bool));
    int *twin = kl_xmalloc(sizeof(int) * ((size_t)gu->nodes.n + 1)); /* unfused node -> fused node */
    for (int k = 0; k < gu->nodes.n; k++)
        twin[k] = -1;
    for (int j = 0; j < unfused->steps.n; j++) {
        const kl_step *st = &unfused->steps.v[j];
        if (st->kind != KL_STEP_KERNEL)
            continue;
        const ir_node *nu = ir_nd(gu, st->node);
        int k = twin[st->node]; /* a node may lower to several steps (conv2d) */
        bool first = k < 0;
        if (first) {
            k = 0;
            while (k < gf->nodes.n && (taken[k] || ir_nd(gf, k)->dead || !same_node(nu, ir_nd(gf, k))))
                k++;
            if (k == gf->nodes.n)
                continue; /* no such node in the fused graph */
            taken[k] = true;
            twin[st->node] = k;
        }
        int i = step_of_node(fused, k);
        if (i < 0)
            continue; /* not in a fused kernel */
        parts[i] += first; /* parts are nodes: a lone conv2d is no fusion */
        sum[i] += unfused_ms[j];
        if (matched)
            (*matched)++;
    }
    /* A group may lower to several kernel steps too: its time is theirs. */
    double *own = kl_xcalloc((size_t)n + 1, sizeof(double));
    for (int i = 0; i < n; i++) {
        int first = fused->steps.v[i].kind == KL_STEP_KERNEL ? step_of_node(fused, fused->steps.v[i].node) : -1;
        if (first >= 0)
            own[first] += fused_ms[i];
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (parts[i] >= 2)
            out[m++] = (kl_fusion_group){i, parts[i], own[i], sum[i], own[i] > sum[i] * (1 + margin)};
    free(own);
    free(parts);
    free(sum);
    free(taken);
    free(twin);
    return m;
}
