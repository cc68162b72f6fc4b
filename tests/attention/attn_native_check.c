/* The CPU backend's hand-written attention kernels (runtime/cpu/cpu_attn.c)
 * against a naive f64 attention that materialises the probabilities,
 * over geometries that reach every path of the kernels: one key or query
 * tile and several, partial tiles, head sizes below, at and above one
 * vector (16) and not a multiple of it, dv != d, Tq != Tk, causal and
 * not, the default scale and others. Each result (out, lse, dq, dk, dv)
 * must agree within 2e-5 of its largest magnitude; and the kernels must
 * give the same bytes with 1 thread and with 3 (tasks own their rows).
 * Then the same with bf16 operands (q, k, v and dout; precision = bf16):
 * the results must be the bytes of the f32 kernels given those operands
 * widened to f32 (widening is exact and the sums are the same), and
 * within the bound of the f64 reference on the widened operands.
 *
 *   attn_native_check
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_attn.h"

#define BOUND 2e-5

typedef struct case_ {
    int64_t batch, tq, tk, d, dv;
    bool causal;
    double scale; /* 0: 1 / sqrt(d) */
} case_;

static const case_ cases[] = {
    {4, 128, 128, 32, 32, true, 0},   /* the GPT example's heads */
    {2, 130, 130, 40, 48, true, 0},   /* partial tiles, vector + scalar columns */
    {3, 100, 70, 24, 16, true, 0.3},  /* causal with Tq > Tk */
    {2, 70, 100, 8, 20, true, 0},     /* causal with Tq < Tk */
    {2, 70, 100, 24, 16, false, 0.3}, /* unmasked */
    {1, 1, 1, 1, 1, true, 0},
    {1, 33, 65, 128, 128, false, 0},  /* the largest head size */
    {2, 17, 17, 64, 64, true, 1.7},
};

typedef struct tensors {
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
} tensors;

static float *randn(int64_t n, uint64_t *state)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(*state >> 11) / 9007199254740992.0 * 4 - 2);
    }
    return x;
}

static float *zeros(int64_t n)
{
    return calloc((size_t)n, sizeof(float));
}

/* The bf16 operands of a run (h != NULL): q, k, v, dout. */
typedef struct halves {
    uint16_t *q, *k, *v, *dout;
} halves;

/* The five results of the kernels at the given thread count; with h, the
 * operands are h's bf16 ones. */
static void run_native(const case_ *c, const cg_attn_native *base, tensors *t, int threads, const halves *h)
{
    omp_set_num_threads(threads);
    cg_attn_native a = *base;
    void *q = h ? (void *)h->q : t->q, *k = h ? (void *)h->k : t->k, *v = h ? (void *)h->v : t->v;
    void *dout = h ? (void *)h->dout : t->dout;
    a.kind = CG_ATTN_FORWARD;
    a.nargs = 5;
    for (int i = 0; i < CG_ATTN_MAX_ARGS; i++)
        a.bf16[i] = h && i < 3;
    void *fw[] = {q, k, v, t->out, t->lse};
    kl_cpu_attention(&a, fw);
    a.kind = CG_ATTN_GRAD_Q;
    a.nargs = 7;
    for (int i = 0; i < CG_ATTN_MAX_ARGS; i++)
        a.bf16[i] = h && i < 4;
    void *gq[] = {dout, q, k, v, t->out, t->lse, t->dq};
    kl_cpu_attention(&a, gq);
    a.kind = CG_ATTN_GRAD_KV;
    a.nargs = 8;
    void *gkv[] = {dout, q, k, v, t->out, t->lse, t->dk, t->dv};
    kl_cpu_attention(&a, gkv);
    (void)c;
}

/* x rounded to bf16 (to nearest even; these values are finite), as bits. */
static uint16_t *to_bf16(const float *x, int64_t n)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
    return h;
}

/* bf16 bits widened to f32 (exact). */
static float *widened(const uint16_t *h, int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&x[i], &u, 4);
    }
    return x;
}

typedef struct reference {
    double *out, *lse, *dq, *dk, *dv;
} reference;

static reference attention_f64(const case_ *c, const tensors *t, double scale)
{
    int64_t B = c->batch, tq = c->tq, tk = c->tk, d = c->d, dv = c->dv;
    reference r = {calloc((size_t)(B * tq * dv), 8), calloc((size_t)(B * tq), 8), calloc((size_t)(B * tq * d), 8),
                   calloc((size_t)(B * tk * d), 8), calloc((size_t)(B * tk * dv), 8)};
    double *p = malloc(sizeof(double) * (size_t)(tq * tk)), *dp = malloc(sizeof(double) * (size_t)(tq * tk));
    for (int64_t b = 0; b < B; b++) {
        const float *q = t->q + b * tq * d, *k = t->k + b * tk * d, *v = t->v + b * tk * dv, *go = t->dout + b * tq * dv;
        for (int64_t i = 0; i < tq; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < tk; j++) {
                double s = 0;
                for (int64_t x = 0; x < d; x++)
                    s += (double)q[i * d + x] * k[j * d + x];
                p[i * tk + j] = c->causal && j > i ? -INFINITY : s * scale;
                mx = fmax(mx, p[i * tk + j]);
            }
            for (int64_t j = 0; j < tk; j++)
                sum += p[i * tk + j] = exp(p[i * tk + j] - mx);
            r.lse[b * tq + i] = mx + log(sum);
            double dd = 0;
            for (int64_t j = 0; j < tk; j++) {
                p[i * tk + j] /= sum;
                double g = 0;
                for (int64_t x = 0; x < dv; x++) {
                    r.out[(b * tq + i) * dv + x] += p[i * tk + j] * v[j * dv + x];
                    g += (double)go[i * dv + x] * v[j * dv + x];
                }
                dp[i * tk + j] = g;
                dd += p[i * tk + j] * g;
            }
            for (int64_t j = 0; j < tk; j++) {
                double ds = p[i * tk + j] * (dp[i * tk + j] - dd) * scale;
                for (int64_t x = 0; x < d; x++) {
                    r.dq[(b * tq + i) * d + x] += ds * k[j * d + x];
                    r.dk[(b * tk + j) * d + x] += ds * q[i * d + x];
                }
                for (int64_t x = 0; x < dv; x++)
                    r.dv[(b * tk + j) * dv + x] += p[i * tk + j] * go[i * dv + x];
            }
        }
    }
    free(p);
    free(dp);
    return r;
}

/* The worst difference relative to the reference's largest magnitude. */
static double worst(const float *x, const double *ref, int64_t n)
{
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        big = fmax(big, fabs(ref[i]));
        diff = fmax(diff, fabs(x[i] - ref[i]));
    }
    return big > 0 ? diff / big : diff;
}

int main(void)
{
    int failures = 0;
    uint64_t state = 42;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const case_ *c = &cases[ci];
        int64_t B = c->batch, nq = B * c->tq * c->d, nk = B * c->tk * c->d, nv = B * c->tk * c->dv, no = B * c->tq * c->dv;
        double scale = c->scale ? c->scale : 1 / sqrt((double)c->d);
        cg_attn_native a = {.batch = B, .tq = c->tq, .tk = c->tk, .d = c->d, .dv = c->dv, .causal = c->causal,
                            .scale = scale, .arg = {0, 1, 2, 3, 4, 5, 6, 7}, .kind = CG_ATTN_FORWARD};
        if (!kl_cpu_attention_supported(&a)) {
            printf("FAIL case %zu: not supported\n", ci);
            failures++;
            continue;
        }
        for (int bf = 0; bf < 2; bf++) {
        tensors t[2];
        float *q = randn(nq, &state), *k = randn(nk, &state), *v = randn(nv, &state), *go = randn(no, &state);
        halves h = {0};
        if (bf) { /* the operands rounded to bf16, and their f32 widening */
            h = (halves){to_bf16(q, nq), to_bf16(k, nk), to_bf16(v, nv), to_bf16(go, no)};
            free(q), free(k), free(v), free(go);
            q = widened(h.q, nq), k = widened(h.k, nk), v = widened(h.v, nv), go = widened(h.dout, no);
        }
        /* bf16: run 0 the f32 kernels on the widened operands, run 1 the
         * bf16 kernels (3 threads). */
        for (int r = 0; r < 2; r++) {
            t[r] = (tensors){q, k, v, go, zeros(no), zeros(B * c->tq), zeros(nq), zeros(nk), zeros(nv)};
            run_native(c, &a, &t[r], r ? 3 : 1, bf && r ? &h : NULL);
        }
        reference ref = attention_f64(c, &t[0], scale);
        struct { const char *name; float *x[2]; double *ref; int64_t n; } res[] = {
            {"out", {t[0].out, t[1].out}, ref.out, no}, {"lse", {t[0].lse, t[1].lse}, ref.lse, B * c->tq},
            {"dq", {t[0].dq, t[1].dq}, ref.dq, nq},    {"dk", {t[0].dk, t[1].dk}, ref.dk, nk},
            {"dv", {t[0].dv, t[1].dv}, ref.dv, nv},
        };
        printf("case %zu%s: [%lld, %lld|%lld, %lld|%lld] %s scale %.4g:", ci, bf ? " bf16" : "", (long long)B,
               (long long)c->tq, (long long)c->tk, (long long)c->d, (long long)c->dv, c->causal ? "causal" : "full", scale);
        for (size_t r = 0; r < sizeof res / sizeof res[0]; r++) {
            double w = worst(res[r].x[0], res[r].ref, res[r].n);
            bool same = !memcmp(res[r].x[0], res[r].x[1], sizeof(float) * (size_t)res[r].n);
            printf(" %s %.1e%s", res[r].name, w, same ? "" : bf ? " (bf16 and f32 differ)" : " (threads differ)");
            if (!(w <= BOUND) || !same)
                failures++;
            free(res[r].x[0]);
            free(res[r].x[1]);
            free(res[r].ref);
        }
        printf("\n");
        free(q);
        free(k);
        free(v);
        free(go);
        free(h.q), free(h.k), free(h.v), free(h.dout);
        }
    }
    /* Head sizes past the kernels' limit run the generated kernel. */
    cg_attn_native big = {.kind = CG_ATTN_FORWARD, .batch = 1, .tq = 4, .tk = 4, .d = 129, .dv = 8};
    if (kl_cpu_attention_supported(&big)) {
        printf("FAIL: d = 129 claims support\n");
        failures++;
    }
    printf("%s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
