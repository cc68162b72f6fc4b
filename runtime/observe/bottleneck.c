/* Where a step's time goes (runtime/observe/bottleneck.h). */
#include <stdlib.h>
#include <string.h>

#include "bottleneck.h"
#include "base/support.h"

static const char *const names[KL_CAT_N] = {
    [KL_CAT_GEMM] = "GEMM/conv",         [KL_CAT_ELEMENTWISE] = "fused elementwise",
    [KL_CAT_REDUCTION] = "reductions/norms", [KL_CAT_OPTIMIZER] = "optimizer",
    [KL_CAT_COPY] = "copies",            [KL_CAT_COLLECTIVE] = "collectives",
    [KL_CAT_DATA_WAIT] = "data wait",    [KL_CAT_HOST] = "host overhead",
};

const char *kl_category_name(kl_category c) { return c < KL_CAT_N ? names[c] : "?"; }

kl_category kl_step_category(const kl_plan *p, const kl_step *s)
{
    if (s->kind == KL_STEP_GEMM)
        return KL_CAT_GEMM;
    const ir_node *n = s->node >= 0 ? ir_nd(p->g, s->node) : NULL;
    const char *pat = n && n->pattern ? n->pattern : "";
    /* The fusion pattern names the group's job; a group of one op (or an
     * elementwise chain) goes by its op's kernel class. */
    if (!strcmp(pat, "gemm_epilogue") || !strcmp(pat, "elementwise"))
        return KL_CAT_ELEMENTWISE;
    if (!strcmp(pat, "optimizer"))
        return KL_CAT_OPTIMIZER;
    if (!strcmp(pat, "reduction") || !strcmp(pat, "batchnorm") || !strcmp(pat, "batchnorm_grad") ||
        !strcmp(pat, "softmax") || !strcmp(pat, "softmax_cross_entropy") || !strcmp(pat, "pool"))
        return KL_CAT_REDUCTION;
    switch (n ? ir_ops[n->op].kclass : IR_KC_ELEMWISE) {
    case IR_KC_GEMM:
    case IR_KC_CONV:
        return KL_CAT_GEMM;
    case IR_KC_REDUCE:
    case IR_KC_NORM:
    case IR_KC_POOL:
        return KL_CAT_REDUCTION;
    case IR_KC_UPDATE:
        return KL_CAT_OPTIMIZER;
    case IR_KC_MOVE:
        return KL_CAT_COPY;
    case IR_KC_COLLECTIVE:
        return KL_CAT_COLLECTIVE;
    default:
        return KL_CAT_ELEMENTWISE;
    }
}

void kl_bottleneck_add(kl_bottleneck *b, const kl_plan *p, int i, double seconds, double hidden, double runs)
{
    const kl_step *s = &p->steps.v[i];
    kl_category c = kl_step_category(p, s);
    b->seconds[c] += seconds - hidden;
    b->hidden_s += hidden;
    b->bytes[c] += (double)s->bytes * runs;
    b->flops[c] += s->flops * runs;
    b->launches += runs;
}

void kl_bottleneck_finish(kl_bottleneck *b, double steps, double step_s, double data_wait_s)
{
    double in_kernels = 0;
    for (int c = 0; c < KL_CAT_N; c++) {
        if (steps > 0) {
            b->seconds[c] /= steps;
            b->bytes[c] /= steps;
            b->flops[c] /= steps;
        }
        if (c != KL_CAT_DATA_WAIT && c != KL_CAT_HOST)
            in_kernels += b->seconds[c];
    }
    if (steps > 0) {
        b->launches /= steps;
        b->hidden_s /= steps;
    }
    b->step_s = step_s;
    b->seconds[KL_CAT_DATA_WAIT] = data_wait_s;
    double host = step_s - in_kernels - data_wait_s;
    b->seconds[KL_CAT_HOST] = host > 0 ? host : 0;
}

/* The share of the step a category takes. */
static double share(const kl_bottleneck *b, kl_category c)
{
    return b->step_s > 0 ? b->seconds[c] / b->step_s : 0;
}

/* A category's achieved rate against the measured peak: FLOP/s for GEMMs,
 * bytes/s for the rest; -1 when unknown. */
static double roofline(const kl_bottleneck *b, kl_category c)
{
    if (b->seconds[c] <= 0 || c >= KL_CAT_DATA_WAIT)
        return -1;
    if (c == KL_CAT_GEMM)
        return b->peak_gflops > 0 ? b->flops[c] / b->seconds[c] / 1e9 / b->peak_gflops : -1;
    return b->peak_gbs > 0 ? b->bytes[c] / b->seconds[c] / 1e9 / b->peak_gbs : -1;
}

const char *kl_bottleneck_verdict(const kl_bottleneck *b, char *buf, size_t n)
{
    /* Waiting first: a step that waits is bound by what it waits for,
     * whatever its kernels do. 30%: a share no tuning of kernels hides. */
    const double bound = 0.30;
    if (b->data_known && share(b, KL_CAT_DATA_WAIT) >= bound) {
        snprintf(buf, n, "input-bound: %.0f%% of the step waits for data (more loader threads, faster storage, or a "
                 "simpler input pipeline)", 100 * share(b, KL_CAT_DATA_WAIT));
        return buf;
    }
    if (share(b, KL_CAT_COLLECTIVE) >= bound) {
        snprintf(buf, n, "communication-bound: %.0f%% of the step waits for collectives (exposed: not hidden behind compute)",
                 100 * share(b, KL_CAT_COLLECTIVE));
        return buf;
    }
    if (share(b, KL_CAT_HOST) >= bound) {
        snprintf(buf, n, "launch-bound: %.0f%% of the step is host overhead around %.0f kernel launches and GEMM calls "
                 "(fewer, larger kernels: a larger batch, more fusion, CUDA graphs)", 100 * share(b, KL_CAT_HOST),
                 b->launches);
        return buf;
    }
    kl_category top = KL_CAT_GEMM;
    for (int c = KL_CAT_GEMM; c <= KL_CAT_COLLECTIVE; c++)
        if (b->seconds[c] > b->seconds[top])
            top = (kl_category)c;
    double r = roofline(b, top);
    char at[96] = "";
    if (r >= 0)
        snprintf(at, sizeof at, ", at %.0f%% of the measured %s", 100 * r,
                 top == KL_CAT_GEMM ? "GEMM peak" : "copy bandwidth");
    if (top == KL_CAT_GEMM)
        snprintf(buf, n, "compute-bound on GEMMs: %.0f%% of the step%s", 100 * share(b, top), at);
    else
        snprintf(buf, n, "memory-bound in %s: %.0f%% of the step%s", kl_category_name(top), 100 * share(b, top), at);
    return buf;
}

void kl_bottleneck_print(const kl_bottleneck *b, FILE *out)
{
    fprintf(out, "where the step's time goes (%.3f ms a step; peak: copy %.1f GB/s, GEMM %.1f GFLOP/s, measured):\n",
            1e3 * b->step_s, b->peak_gbs, b->peak_gflops);
    for (int c = 0; c < KL_CAT_N; c++) {
        if (c == KL_CAT_DATA_WAIT && !b->data_known) {
            fprintf(out, "  %-18s %10s\n", names[c], "n/a");
            continue;
        }
        fprintf(out, "  %-18s %8.3f ms %5.1f%%", names[c], 1e3 * b->seconds[c], 100 * share(b, c));
        double r = roofline(b, (kl_category)c);
        if (c == KL_CAT_GEMM && b->seconds[c] > 0)
            fprintf(out, "  %8.1f GFLOP/s", b->flops[c] / b->seconds[c] / 1e9);
        else if (c < KL_CAT_DATA_WAIT && b->seconds[c] > 0)
            fprintf(out, "  %8.2f GB/s", b->bytes[c] / b->seconds[c] / 1e9);
        if (r >= 0)
            fprintf(out, " = %3.0f%% of peak", 100 * r);
        fputc('\n', out);
    }
    if (b->hidden_s > 0)
        fprintf(out, "  (collectives hidden behind compute: %.3f ms a step, in no row above)\n", 1e3 * b->hidden_s);
    char v[400];
    fprintf(out, "verdict: %s\n", kl_bottleneck_verdict(b, v, sizeof v));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* memcpy bandwidth of a buffer far larger than the caches, counting the
 * bytes read and written. */
double kl_copy_bandwidth(void)
{
    size_t n = (size_t)64 << 20;
    char *a = kl_xmalloc(n), *b = kl_xmalloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double t[7];
    for (int i = 0; i < 7; i++) {
        double t0 = kl_now();
        memcpy(b, a, n);
        t[i] = kl_now() - t0;
        a[i] = b[n - 1 - (size_t)i]; /* keep the copies observable */
    }
    free(a);
    free(b);
    qsort(t, 7, sizeof *t, cmp_double);
    return 2.0 * (double)n / t[3] / 1e9;
}
