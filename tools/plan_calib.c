/* Calibration of kiln plan's cost model on this CPU (plan_cost.h): the
 * model's one-rank training plan at a few micro-batches, each step timed
 * alone through the CPU backend with one thread (as tools/bench.c times
 * them: median of repeats after warm-up runs), kept per step key (the
 * kernel's ops and phase; a GEMM's node, transposes and phase) as
 * (bytes or FLOPs, CPU seconds) points (the fastest of 5 repeats). A layout's step then takes the time
 * its key's points give at its size (interpolated in log-log, clamped at
 * the ends), in place of the roofline; steps with no key fall back to it.
 * A run's whole step (median of 5) over the sum of its steps timed alone
 * is its context factor (steps alone find their operands in cache, a run
 * does not always; the dispatch between steps), interpolated by
 * micro-batch and applied to every step of a layout. Kernels whose key no
 * run timed take the bandwidth of all the timed kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_cost.h"
#include "driver/batch_probe.h"
#include "driver/compile.h"
#include "runtime/exec/backend.h"
#include "runtime/exec/session.h"

typedef struct calib_point {
    char *key;
    double x, s; /* bytes (kernels) or FLOPs (GEMMs), seconds */
} calib_point;

struct kl_calib {
    KL_VEC(calib_point) pts;
    /* Per run: its micro-batch and the whole step's time over the sum of
     * its steps timed alone (the cache the steps share in a run, and the
     * dispatch between them: a context factor). */
    double micro[32], factor[32];
    int runs;
    double kernel_bw; /* bytes/s over every timed kernel: for keys not timed */
};

/* A step's key: its kernel's ops (or its GEMM's op and transposes), its
 * node's place in the model file and its phase; NULL for a step no model
 * line made (a pass's: bucket assembly, slices of a bucket), which the
 * one-rank runs do not time for the layout that has it. */
static char *step_key(const kl_plan *p, const kl_step *st)
{
    const ir_node *n = ir_nd(p->g, st->node);
    if (n->loc.line <= 0)
        return NULL;
    if (st->kind == KL_STEP_GEMM)
        return kl_xasprintf("g %s %d:%d %d%d %d", ir_op_name(n->op), n->loc.line, n->loc.col, st->gemm.ta, st->gemm.tb,
                            (int)st->phase);
    return kl_xasprintf("k %s %d:%d %d", p->kernels.v[st->kernel].what, n->loc.line, n->loc.col, (int)st->phase);
}

static double step_x(const kl_plan *p, const kl_step *st)
{
    (void)p;
    return st->kind == KL_STEP_GEMM ? st->flops : (double)st->bytes;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The process's CPU time: the backend runs one thread, and a shared
 * machine that deschedules the process does not count against the
 * steps (tools/bench_gemm.c times the same way). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_one(kl_exec *e, int i, const kl_kargs *a)
{
    kl_backend *be = e->s->be;
    kl_step *st = &e->plan->steps.v[i];
    if (st->kind == KL_STEP_KERNEL)
        be->ops->launch(be, e->plan, st->kernel, e->args[i], a);
    else if (st->kind == KL_STEP_GEMM)
        be->ops->gemm(be, &st->gemm, e->ptrs[st->gemm.a], e->ptrs[st->gemm.b], e->ptrs[st->gemm.c]);
    be->ops->sync(be);
}

/* One calibration run: kv (NULL-terminated pairs) on one rank. */
static int measure(kl_calib *c, const char *file, const char *const *kv, int64_t micro)
{
    kl_compile_opts co = {.kv = kv, .mode = KL_MODE_TRAIN, .ranks = 1};
    kl_compiled *cp = kl_compile_file(file, &co);
    if (!cp)
        return -1;
    kl_cpu_options o = {.threads = 1, .threads_from = "kiln plan --calibrate", .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&o);
    if (!be) {
        kl_compiled_free(cp);
        return -1;
    }
    kl_session *s = kl_session_new(be, 1);
    kl_exec *e = kl_compiled_exec(s, cp, NULL);
    if (!e) {
        kl_session_free(s);
        be->ops->destroy(be);
        return -1;
    }
    kl_exec_random_inputs(e, 99);
    kl_probe_step_values(e);
    kl_kargs a = {1, 1};
    enum { R = 5 };
    double v[R], whole[R], sum = 0;
    for (int w = 0; w < 2; w++)
        kl_exec_run(e, KL_ALL_PHASES, &a);
    const kl_plan *p = e->plan;
    int n = 0;
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *st = &p->steps.v[i];
        if (st->kind == KL_STEP_COLLECTIVE || st->phase == IR_PHASE_STARTUP)
            continue;
        run_one(e, i, &a);
        for (int r = 0; r < R; r++) {
            double t0 = cpu_now();
            run_one(e, i, &a);
            v[r] = cpu_now() - t0;
        }
        /* The fastest of the repeats: a shared machine's other work only
         * ever adds time. */
        qsort(v, R, sizeof *v, cmp_double);
        calib_point pt = {step_key(p, st), step_x(p, st), v[0]};
        if (pt.key)
            kl_vec_push(c->pts, pt);
        sum += v[0];
        n++;
    }
    for (int r = 0; r < R; r++) {
        double t0 = cpu_now();
        kl_exec_run(e, KL_ALL_PHASES, &a);
        be->ops->sync(be);
        whole[r] = cpu_now() - t0;
    }
    qsort(whole, R, sizeof *whole, cmp_double);
    if (c->runs < 32 && sum > 0) {
        c->micro[c->runs] = (double)micro;
        c->factor[c->runs] = whole[R / 2] / sum;
        c->runs++;
    }
    kl_exec_free(e);
    kl_session_free(s);
    be->ops->destroy(be);
    return 0;
}

kl_calib *kl_calib_measure(const char *file, const char *const *kv, const char *const *precisions, int nprec,
                           const int64_t *micros, int nmicro)
{
    kl_calib *c = kl_xcalloc(1, sizeof *c);
    for (int pi = 0; pi < nprec; pi++)
        for (int mi = 0; mi < nmicro; mi++) {
            const char *all[100];
            int n = 0;
            for (int i = 0; kv && kv[i] && n < 80; i++)
                all[n++] = kv[i];
            char bs[24];
            snprintf(bs, sizeof bs, "%lld", (long long)micros[mi]);
            /* accumulate 2: the accumulation kernels are timed too. */
            const char *mine[] = {"batch", bs, "accumulate", "2", "precision", precisions[pi]};
            for (int i = 0; i < 6; i++)
                all[n++] = mine[i];
            all[n] = NULL;
            if (measure(c, file, all, micros[mi])) {
                kl_calib_free(c);
                return NULL;
            }
        }
    double bytes = 0, secs = 0;
    for (int i = 0; i < c->pts.n; i++)
        if (c->pts.v[i].key[0] == 'k')
            bytes += c->pts.v[i].x, secs += c->pts.v[i].s;
    c->kernel_bw = secs > 0 ? bytes / secs : 0;
    return c;
}

void kl_calib_free(kl_calib *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->pts.n; i++)
        free(c->pts.v[i].key);
    kl_vec_free(c->pts);
    free(c);
}

double kl_calib_factor(const kl_calib *c, int64_t micro)
{
    if (!c || !c->runs)
        return 1;
    /* Interpolated in log micro-batch between the nearest runs. */
    double x = (double)micro, lo = 0, lof = 1, hi = 0, hif = 1;
    for (int i = 0; i < c->runs; i++) {
        if (c->micro[i] <= x && c->micro[i] > lo)
            lo = c->micro[i], lof = c->factor[i];
        if (c->micro[i] >= x && (hi == 0 || c->micro[i] < hi))
            hi = c->micro[i], hif = c->factor[i];
    }
    if (lo == 0)
        return hif;
    if (hi == 0 || hi == lo)
        return lof;
    double f = (log(x) - log(lo)) / (log(hi) - log(lo));
    return lof + f * (hif - lof);
}

double kl_calib_kernel_bw(const kl_calib *c)
{
    return c ? c->kernel_bw : 0;
}

int kl_calib_points(const kl_calib *c)
{
    return c ? c->pts.n : 0;
}

double kl_calib_seconds(const kl_calib *c, const kl_plan *p, const kl_step *st)
{
    if (!c || st->kind == KL_STEP_COLLECTIVE)
        return -1;
    char *key = step_key(p, st);
    double x = step_x(p, st);
    if (!key)
        return -1;
    /* The key's points summed per size (one key may name several steps
     * of a run), then the two nearest sizes around x in log-log. */
    double xs[64], ss[64], cnt[64];
    int n = 0;
    for (int i = 0; i < c->pts.n; i++) {
        const calib_point *q = &c->pts.v[i];
        if (strcmp(q->key, key) || q->x <= 0)
            continue;
        int k = 0;
        while (k < n && xs[k] != q->x)
            k++;
        if (k == n && n < 64)
            xs[n] = q->x, ss[n] = 0, cnt[n] = 0, n++;
        if (k < n)
            ss[k] += q->s, cnt[k] += 1; /* the mean of the steps of that size */
    }
    free(key);
    if (!n || x <= 0)
        return -1;
    /* Seconds per unit at each size. */
    double lo_x = 0, lo_r = 0, hi_x = 0, hi_r = 0;
    for (int k = 0; k < n; k++) {
        double r = ss[k] / cnt[k] / xs[k];
        if (xs[k] <= x && xs[k] > lo_x)
            lo_x = xs[k], lo_r = r;
        if (xs[k] >= x && (hi_x == 0 || xs[k] < hi_x))
            hi_x = xs[k], hi_r = r;
    }
    double rate;
    if (lo_x == 0)
        rate = hi_r;
    else if (hi_x == 0 || hi_x == lo_x)
        rate = lo_r;
    else {
        double f = (log(x) - log(lo_x)) / (log(hi_x) - log(lo_x));
        rate = exp(log(lo_r) + f * (log(hi_r) - log(lo_r)));
    }
    return rate * x;
}
