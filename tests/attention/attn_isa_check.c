/* The CPU attention kernels (runtime/cpu/cpu_attn.c) as each of their clones
 * builds them, on the same inputs: the file compiled three more times
 * with one target each in place of the clones (tests/areas/attn_isa.cmake:
 * x86-64-v4, x86-64-v3, baseline x86-64; entry points renamed _v4, _v3,
 * _base). The clones with FMA must give the same bytes as each other and
 * as the library's dispatch; the baseline (no FMA: each product rounded)
 * must agree with them within 1e-5 of each result's largest magnitude,
 * and must differ from them somewhere, or the FMA build is not in effect
 * (the speed README "CPU attention kernels" measures). A clone the CPU
 * cannot run is left out and said so.
 *
 *   attn_isa_check
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_attn.h"

void kl_cpu_attention_v4(const cg_attn_native *a, void *const *bufs);
void kl_cpu_attention_v3(const cg_attn_native *a, void *const *bufs);
void kl_cpu_attention_base(const cg_attn_native *a, void *const *bufs);

typedef void (*attn_fn)(const cg_attn_native *, void *const *);

enum { NRES = 5 }; /* out, lse, dq, dk, dv */

typedef struct geometry {
    int64_t batch, tq, tk, d, dv;
    bool causal;
    double scale;
} geometry;

static const geometry cases[] = {
    {4, 128, 128, 32, 32, true, 0.17677669529663687}, /* the GPT example's heads */
    {2, 130, 130, 40, 48, true, 0.15811388300841897}, /* partial tiles, vector + scalar columns */
    {2, 70, 100, 24, 16, false, 0.3},                 /* unmasked, Tq != Tk */
};

static float *randn(int64_t n, uint64_t *state)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(*state >> 11) / 9007199254740992.0 * 4 - 2);
    }
    return x;
}

typedef struct results {
    float *r[NRES];
    int64_t n[NRES];
} results;

/* The three kernels through fn: forward, then both gradients from its
 * out and lse. */
static results run(attn_fn fn, const geometry *g, float *q, float *k, float *v, float *dout)
{
    results r;
    int64_t nq = g->batch * g->tq, nk = g->batch * g->tk;
    int64_t sizes[NRES] = {nq * g->dv, nq, nq * g->d, nk * g->d, nk * g->dv};
    for (int i = 0; i < NRES; i++) {
        r.n[i] = sizes[i];
        r.r[i] = calloc((size_t)sizes[i], sizeof(float));
    }
    cg_attn_native a = {.batch = g->batch, .tq = g->tq, .tk = g->tk, .d = g->d, .dv = g->dv,
                        .causal = g->causal, .scale = g->scale};
    for (int i = 0; i < CG_ATTN_MAX_ARGS; i++)
        a.arg[i] = i;
    a.kind = CG_ATTN_FORWARD;
    a.nargs = 5;
    fn(&a, (void *[]){q, k, v, r.r[0], r.r[1]});
    a.kind = CG_ATTN_GRAD_Q;
    a.nargs = 7;
    fn(&a, (void *[]){dout, q, k, v, r.r[0], r.r[1], r.r[2]});
    a.kind = CG_ATTN_GRAD_KV;
    a.nargs = 8;
    fn(&a, (void *[]){dout, q, k, v, r.r[0], r.r[1], r.r[3], r.r[4]});
    return r;
}

static bool same_bytes(const results *x, const results *y)
{
    for (int i = 0; i < NRES; i++)
        if (memcmp(x->r[i], y->r[i], sizeof(float) * (size_t)x->n[i]))
            return false;
    return true;
}

/* The largest difference of each result over its largest magnitude. */
static double worst_relative(const results *x, const results *y)
{
    double w = 0;
    for (int i = 0; i < NRES; i++) {
        double mag = 0, diff = 0;
        for (int64_t j = 0; j < x->n[i]; j++) {
            mag = fmax(mag, fabs(y->r[i][j]));
            diff = fmax(diff, fabs((double)x->r[i][j] - y->r[i][j]));
        }
        w = fmax(w, mag > 0 ? diff / mag : diff);
    }
    return w;
}

static void free_results(results *r)
{
    for (int i = 0; i < NRES; i++)
        free(r->r[i]);
}

int main(void)
{
    __builtin_cpu_init();
    bool v4 = __builtin_cpu_supports("x86-64-v4"), v3 = __builtin_cpu_supports("x86-64-v3");
    printf("this CPU runs: x86-64-v4 %s, x86-64-v3 %s, baseline yes\n", v4 ? "yes" : "no (left out)",
           v3 ? "yes" : "no (left out)");
    int failures = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const geometry *g = &cases[c];
        uint64_t state = 7 + c;
        int64_t nq = g->batch * g->tq, nk = g->batch * g->tk;
        float *q = randn(nq * g->d, &state), *k = randn(nk * g->d, &state), *v = randn(nk * g->dv, &state);
        float *dout = randn(nq * g->dv, &state);
        results lib = run(kl_cpu_attention, g, q, k, v, dout);
        results base = run(kl_cpu_attention_base, g, q, k, v, dout);
        results best = base;
        printf("case %zu: [%lld, %lld|%lld, %lld|%lld] %s:", c, (long long)g->batch, (long long)g->tq,
               (long long)g->tk, (long long)g->d, (long long)g->dv, g->causal ? "causal" : "full");
        bool have_v3 = false, have_v4 = false;
        results r3 = {0}, r4 = {0};
        if (v3) {
            r3 = run(kl_cpu_attention_v3, g, q, k, v, dout);
            best = r3;
            have_v3 = true;
        }
        if (v4) {
            r4 = run(kl_cpu_attention_v4, g, q, k, v, dout);
            best = r4;
            have_v4 = true;
        }
        if (have_v3 && have_v4) {
            bool same = same_bytes(&r3, &r4);
            printf(" v4 %s v3;", same ? "==" : "!=");
            failures += !same;
        }
        bool dispatch = same_bytes(&lib, &best);
        printf(" dispatch %s %s;", dispatch ? "==" : "!=", have_v4 ? "v4" : have_v3 ? "v3" : "baseline");
        failures += !dispatch;
        if (have_v3 || have_v4) {
            double w = worst_relative(&base, &best);
            bool differs = !same_bytes(&base, &best);
            printf(" baseline within %.1e of it (bound 1e-5), %s", w, differs ? "not the same bytes" : "THE SAME BYTES (no FMA?)");
            failures += w > 1e-5 || !differs;
        }
        printf("\n");
        free_results(&lib);
        free_results(&base);
        if (have_v3)
            free_results(&r3);
        if (have_v4)
            free_results(&r4);
        free(q);
        free(k);
        free(v);
        free(dout);
    }
    printf("%s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
