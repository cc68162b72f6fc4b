/* CPU time of the hand-written attention kernels (runtime/cpu/cpu_attn.c) on
 * the GPT example's heads: 64 (batch 16 x 4 heads) of T = 128, d = 32,
 * causal. Built by bench/attn_native_ab.sh from a given copy of
 * cpu_attn.c (-DATTN_SRC="path"), so two versions can be timed against
 * each other. Prints the best of REPEATS runs of each kernel, one thread,
 * process CPU time (a shared machine's descheduling does not count).
 *
 *   attn_native_time [REPEATS]
 */
#include ATTN_SRC

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *randn(long n, unsigned long long *s)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(*s >> 11) / 9007199254740992.0 * 4 - 2);
    }
    return x;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 15;
    const long bh = 64, t = 128, d = 32, n = bh * t * d;
    unsigned long long s = 1;
    float *q = randn(n, &s), *k = randn(n, &s), *v = randn(n, &s), *dout = randn(n, &s);
    float *out = randn(n, &s), *lse = randn(bh * t, &s), *dq = randn(n, &s), *dk = randn(n, &s), *dv = randn(n, &s);
    cg_attn_native a = {.batch = bh, .tq = t, .tk = t, .d = d, .dv = d, .causal = true, .scale = 0.17677669529663687};
    for (int i = 0; i < CG_ATTN_MAX_ARGS; i++)
        a.arg[i] = i;
    struct {
        const char *name;
        cg_attn_kind kind;
        int nargs;
        void *bufs[8];
    } kernels[] = {
        {"attention", CG_ATTN_FORWARD, 5, {q, k, v, out, lse}},
        {"attention_grad_q", CG_ATTN_GRAD_Q, 7, {dout, q, k, v, out, lse, dq}},
        {"attention_grad_kv", CG_ATTN_GRAD_KV, 8, {dout, q, k, v, out, lse, dk, dv}},
    };
    double total = 0;
    for (int i = 0; i < 3; i++) {
        a.kind = kernels[i].kind;
        a.nargs = kernels[i].nargs;
        double best = 1e30;
        for (int r = 0; r < repeats; r++) {
            double t0 = cpu_seconds();
            kl_cpu_attention(&a, kernels[i].bufs);
            double dt = cpu_seconds() - t0;
            best = dt < best ? dt : best;
        }
        total += best;
        printf("%-18s %8.3f ms\n", kernels[i].name, best * 1e3);
    }
    printf("%-18s %8.3f ms\n", "total", total * 1e3);
    return 0;
}
