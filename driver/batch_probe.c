/* --batch auto --probe: the candidates timed. See batch_probe.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_probe.h"
#include "compile.h"
#include "runtime/data/data.h"

void kl_probe_step_values(kl_exec *e)
{
    kl_session *s = e->s;
    kl_persist *h = kl_session_find(s, "optimizer.hyper"), *ls = kl_session_find(s, "loss_scale");
    float hv[4] = {1e-3f, 0.5f, 0.01f, 1.0f}, one = 1.0f;
    if (h)
        s->be->ops->copy_in(s->be, h->ptr, hv, sizeof hv);
    if (ls)
        s->be->ops->copy_in(s->be, ls->ptr, &one, sizeof one);
}

/* The fake timer's seconds per sample for micro-batch b (KILN_PROBE_FAKE
 * = "B:SECONDS,..."); -1 after an error (reported). */
static double fake_time(const char *spec, int64_t b)
{
    const char *p = spec;
    while (*p) {
        char *end;
        long long nb = strtoll(p, &end, 10);
        if (end == p || *end != ':') {
            kl_error("KILN_PROBE_FAKE: expected B:SECONDS,... at \"%s\"", p);
            return -1;
        }
        p = end + 1;
        double sec = strtod(p, &end);
        if (end == p || !(sec > 0) || (*end && *end != ',')) {
            kl_error("KILN_PROBE_FAKE: expected a positive number of seconds at \"%s\"", p);
            return -1;
        }
        if (nb == b)
            return sec;
        p = *end ? end + 1 : end;
    }
    kl_error("KILN_PROBE_FAKE names no time for micro-batch %lld", (long long)b);
    return -1;
}

/* Seconds per sample of micro-batch b with accumulation acc: one warm-up
 * step, then KL_PROBE_STEPS timed ones; -1 after an error (reported). */
static double time_candidate(const kl_replan *r, kl_backend *be, int64_t b, int64_t acc, uint64_t seed)
{
    char bs[32], as[32];
    snprintf(bs, sizeof bs, "%lld", (long long)b);
    snprintf(as, sizeof as, "%lld", (long long)acc);
    const char *extra[] = {"batch", bs, "accumulate", as, NULL};
    kl_compiled *c = kl_replan_compile(r, extra, KL_MODE_TRAIN);
    if (!c)
        return -1;
    kl_session *s = kl_session_new(be, seed);
    kl_exec *e = kl_compiled_exec(s, c, NULL);
    if (!e) {
        kl_session_free(s);
        return -1;
    }
    kl_exec_random_inputs(e, seed);
    kl_probe_step_values(e);
    kl_kargs a = {1, seed};
    kl_exec_run(e, KL_ALL_PHASES, &a);
    be->ops->sync(be);
    double t0 = kl_now();
    for (int i = 0; i < KL_PROBE_STEPS; i++) {
        a.step = 2 + i;
        kl_exec_run(e, KL_ALL_PHASES, &a);
    }
    be->ops->sync(be);
    double sec = (kl_now() - t0) / KL_PROBE_STEPS / (double)b;
    kl_exec_free(e);
    kl_session_free(s);
    return sec;
}

int kl_probe_batch(const kl_replan *r, kl_backend *be, int64_t effective, int64_t chosen, uint64_t seed,
                   kl_probe_result *out)
{
    memset(out, 0, sizeof *out);
    out->effective = effective;
    const char *fake = getenv("KILN_PROBE_FAKE");
    out->fake = fake && *fake;
    /* The plan's choice, then the largest smaller multiples of 8 that
     * divide the effective batch (it stays exact), else its half and
     * quarter. */
    int64_t cand[KL_PROBE_MAX + 2] = {chosen};
    int nc = 1;
    for (int64_t b = (chosen - 1) / 8 * 8; b >= 8 && nc < KL_PROBE_MAX; b -= 8)
        if (effective % b == 0)
            cand[nc++] = b;
    if (nc < KL_PROBE_MAX) {
        cand[nc++] = chosen / 2 / 8 * 8;
        cand[nc++] = chosen / 4 / 8 * 8;
    }
    for (int i = 0; i < nc && out->n < KL_PROBE_MAX; i++) {
        int64_t b = cand[i];
        if (b < 8 || (out->n > 0 && b >= out->batch[out->n - 1]))
            continue;
        int64_t acc = effective % b ? (effective + b / 2) / b : effective / b;
        if (acc < 1)
            acc = 1;
        double sec = out->fake ? fake_time(fake, b) : time_candidate(r, be, b, acc, seed);
        if (sec < 0)
            return -1;
        out->batch[out->n] = b;
        out->accumulate[out->n] = acc;
        out->sec_per_sample[out->n] = sec;
        /* Strictly faster wins: a tie keeps the larger batch (earlier). */
        if (sec < out->sec_per_sample[out->chosen])
            out->chosen = out->n;
        out->n++;
    }
    return 0;
}

void kl_probe_print(const kl_probe_result *r, FILE *f)
{
    fprintf(f, "batch probe: ");
    for (int i = 0; i < r->n; i++)
        fprintf(f, "%smicro-batch %lld %.4f ms/sample", i ? ", " : "", (long long)r->batch[i], 1e3 * r->sec_per_sample[i]);
    if (r->fake)
        fprintf(f, " (fake timings from KILN_PROBE_FAKE)");
    else
        fprintf(f, " (%d steps each after a warm-up)", KL_PROBE_STEPS);
    int64_t b = r->batch[r->chosen], a = r->accumulate[r->chosen];
    fprintf(f, "; chose micro-batch %lld x accumulate %lld, the fastest per sample", (long long)b, (long long)a);
    if (b * a != r->effective)
        fprintf(f, " (effective batch %lld; asked: %lld, not a multiple of %lld)", (long long)(b * a), (long long)r->effective,
                (long long)b);
    fputc('\n', f);
}
