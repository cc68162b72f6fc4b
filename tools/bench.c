/* kiln bench: times every step of a model's training plan, fused and
 * unfused, against the machine's measured copy bandwidth.
 *
 * Each kernel and GEMM is timed alone (median of repeats after a warm-up
 * of whole steps), then the whole step, as a median with its spread (the
 * interquartile range): when the fused and unfused ranges overlap, the
 * comparison says it is inconclusive rather than print a noisy ratio as a
 * result. Bytes are what a step must move at least: each input read once
 * and each output written once. The thread count is the CPU backend's
 * rule (kl_cpu_default_threads), the same as a training run's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_gemm.h"
#include "fusion_check.h"
#include "driver/batch_probe.h"
#include "driver/compile.h"
#include "runtime/cpu/simgpu.h"
#include "runtime/data/data.h"
#include "runtime/exec/session.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/observe/bottleneck.h"

typedef struct bench_opts {
    const char *file;
    bool no_fusion, json, eval, gpu, no_graph, check_fusion;
    int repeats, threads;
    double margin; /* --check-fusion: the share a fused kernel may exceed its parts by */
    const char *const *kv;
} bench_opts;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The value at fraction q of v's sorted values, interpolated. */
static double quantile(const double *sorted, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    return i + 1 < n ? sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return quantile(v, n, 0.5);
}

/* A whole step's time in ms: the median and the interquartile range. */
typedef struct spread {
    double median, lo, hi;
} spread;

static spread spread_ms(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return (spread){1e3 * quantile(v, n, 0.5), 1e3 * quantile(v, n, 0.25), 1e3 * quantile(v, n, 0.75)};
}

/* Two timings whose ranges overlap cannot say which is faster. */
static bool overlap(spread a, spread b)
{
    return a.lo <= b.hi && b.lo <= a.hi;
}

typedef struct timed {
    double *step_ms; /* per step: median */
    spread total;    /* the whole step; on the GPU a mean, lo = hi */
    int kernels, gemms;
} timed;

static void enqueue_one(kl_exec *e, int i, const kl_kargs *a)
{
    kl_backend *be = e->s->be;
    kl_step *st = &e->plan->steps.v[i];
    if (st->kind == KL_STEP_KERNEL)
        be->ops->launch(be, e->plan, st->kernel, e->args[i], a);
    else
        be->ops->gemm(be, &st->gemm, e->ptrs[st->gemm.a], e->ptrs[st->gemm.b], e->ptrs[st->gemm.c]);
}

static void run_one(kl_exec *e, int i, const kl_kargs *a)
{
    enqueue_one(e, i, a);
    e->s->be->ops->sync(e->s->be);
}

/* On the GPU: the mean over repeats back to back, timed by events on the
 * stream (a host clock around one launch would time the launch). */
static void time_plan_gpu(kl_exec *e, int repeats, timed *t)
{
    kl_backend *be = e->s->be;
    kl_kargs a = {1, 1};
    kl_plan *p = e->plan;
    t->step_ms = kl_xcalloc((size_t)p->steps.n + 1, sizeof(double));
    for (int i = 0; i < p->steps.n; i++) {
        run_one(e, i, &a);
        kl_cuda_timer_start(be);
        for (int r = 0; r < repeats; r++)
            enqueue_one(e, i, &a);
        t->step_ms[i] = 1e3 * kl_cuda_timer_stop(be) / repeats;
        if (p->steps.v[i].kind == KL_STEP_KERNEL)
            t->kernels++;
        else
            t->gemms++;
    }
    kl_cuda_timer_start(be);
    for (int r = 0; r < repeats; r++)
        kl_exec_run(e, KL_ALL_PHASES, &a);
    double mean = 1e3 * kl_cuda_timer_stop(be) / repeats;
    t->total = (spread){mean, mean, mean};
}

static void time_plan(kl_exec *e, int repeats, timed *t)
{
    kl_kargs a = {1, 1};
    kl_plan *p = e->plan;
    kl_probe_step_values(e); /* realistic per-step values */
    for (int w = 0; w < 3; w++)
        kl_exec_run(e, KL_ALL_PHASES, &a);
    if (kl_backend_is_cuda(e->s->be)) {
        time_plan_gpu(e, repeats, t);
        return;
    }
    t->step_ms = kl_xcalloc((size_t)p->steps.n + 1, sizeof(double));
    double *v = kl_xmalloc(sizeof(double) * (size_t)(repeats + 1));
    for (int i = 0; i < p->steps.n; i++) {
        run_one(e, i, &a);
        for (int r = 0; r < repeats; r++) {
            double t0 = kl_now();
            run_one(e, i, &a);
            v[r] = kl_now() - t0;
        }
        t->step_ms[i] = 1e3 * median(v, repeats);
        if (p->steps.v[i].kind == KL_STEP_KERNEL)
            t->kernels++;
        else
            t->gemms++;
    }
    for (int r = 0; r < repeats; r++) {
        double t0 = kl_now();
        kl_exec_run(e, KL_ALL_PHASES, &a);
        e->s->be->ops->sync(e->s->be);
        v[r] = kl_now() - t0;
    }
    t->total = spread_ms(v, repeats);
    free(v);
}

/* Whole steps of the two plans alternately (A B A B ...), so a busy
 * machine's drift hits both alike; the medians replace the step times. */
static void compare_steps(kl_exec *a, kl_exec *b, int repeats, timed *ta, timed *tb)
{
    kl_kargs args = {1, 1};
    double *va = kl_xmalloc(sizeof(double) * (size_t)(repeats + 1)), *vb = kl_xmalloc(sizeof(double) * (size_t)(repeats + 1));
    for (int r = 0; r < repeats; r++) {
        for (int k = 0; k < 2; k++) {
            kl_exec *e = k ? b : a;
            double t0 = kl_now();
            kl_exec_run(e, KL_ALL_PHASES, &args);
            e->s->be->ops->sync(e->s->be);
            (k ? vb : va)[r] = kl_now() - t0;
        }
    }
    ta->total = spread_ms(va, repeats);
    tb->total = spread_ms(vb, repeats);
    free(va);
    free(vb);
}

static kl_exec *build(kl_session *s, const bench_opts *o, bool fuse)
{
    kl_compile_opts co = {.kv = o->kv, .mode = o->eval ? KL_MODE_EVAL : KL_MODE_TRAIN, .no_fusion = !fuse};
    kl_compiled *c = kl_compile_file(o->file, &co);
    if (!c)
        return NULL;
    kl_exec *e = kl_compiled_exec(s, c, NULL);
    if (e)
        kl_exec_random_inputs(e, 99);
    return e;
}

/* Where the step's time goes: each step's time alone by category, the
 * rest of the whole step's median as host overhead; no data loading. */
static kl_bottleneck bottleneck(const kl_exec *e, const timed *t, double bw, const bench_opts *o)
{
    kl_bottleneck b = {.peak_gbs = bw, .peak_gflops = o->gpu ? 0 : kl_gemm_peak_gflops(e->s->be)};
    for (int i = 0; i < e->plan->steps.n; i++)
        kl_bottleneck_add(&b, e->plan, i, t->step_ms[i] / 1e3, 0, 1);
    kl_bottleneck_finish(&b, 1, t->total.median / 1e3, 0);
    return b;
}

static void print_bottleneck(const kl_exec *e, const timed *t, double bw, const bench_opts *o)
{
    kl_bottleneck b = bottleneck(e, t, bw, o);
    printf("\n");
    kl_bottleneck_print(&b, stdout);
    printf("\n");
}

static void json_bottleneck(const kl_exec *e, const timed *t, double bw, const bench_opts *o)
{
    kl_bottleneck b = bottleneck(e, t, bw, o);
    printf(", \"gemm_peak_gflop_s\": %.3f, \"bottleneck\": {", b.peak_gflops);
    for (int c = 0; c < KL_CAT_N; c++)
        printf("%s\"%s\": {\"ms\": %.5f, \"bytes\": %.0f, \"flops\": %.0f}", c ? ", " : "", kl_category_name((kl_category)c),
               1e3 * b.seconds[c], b.bytes[c], b.flops[c]);
    char v[400];
    printf("}, \"verdict\": ");
    kl_fput_json_str(stdout, kl_bottleneck_verdict(&b, v, sizeof v));
}

static void report(const kl_exec *e, const timed *t, const timed *other, double bw, const bench_opts *o, bool fused)
{
    const kl_plan *p = e->plan;
    FILE *out = stdout;
    if (o->json) {
        printf("{\"model\": ");
        kl_fput_json_str(out, o->file);
        printf(", \"backend\": \"%s\", \"device\": ", e->s->be->ops->name);
        kl_fput_json_str(out, e->s->be->desc);
        if (o->gpu && kl_simgpu_wanted())
            printf(", \"simulated_device\": true");
        printf(", \"threads\": %d, \"copy_gb_s\": %.3f, \"fused\": %s, \"steps\": [", e->s->be->threads, bw,
               fused ? "true" : "false");
    } else {
        printf("%-3s %-18s %-44s %9s %9s %8s %6s %8s\n", "#", "kernel", "ops", "ms", "MB", "GB/s", "%copy", "GFLOP/s");
    }
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *st = &p->steps.v[i];
        char *label = plan_step_label(p, st);
        const char *name = st->kind == KL_STEP_KERNEL ? p->kernels.v[st->kernel].name
                           : kl_backend_is_cuda(e->s->be) ? "gemm (cuBLASLt)" : "gemm (BLAS)";
        double ms = t->step_ms[i], mb = (double)st->bytes / 1e6, gbs = ms > 0 ? mb / ms : 0;
        if (o->json) {
            printf("%s{\"kernel\": ", i ? ", " : "");
            kl_fput_json_str(out, name);
            printf(", \"ops\": ");
            kl_fput_json_str(out, label);
            printf(", \"ms\": %.5f, \"bytes\": %lld, \"gb_s\": %.3f, \"copy_share\": %.4f, \"gflop_s\": %.3f}", ms,
                   (long long)st->bytes, gbs, gbs / bw, st->flops > 0 && ms > 0 ? st->flops / ms / 1e6 : 0.0);
        } else {
            printf("%-3d %-18s %-44.44s %9.4f %9.3f %8.2f %5.0f%%", i, name, label, ms, mb, gbs, 100 * gbs / bw);
            if (st->flops > 0)
                printf(" %8.1f", st->flops / ms / 1e6);
            printf("\n");
        }
        free(label);
    }
    double sum = 0;
    for (int i = 0; i < p->steps.n; i++)
        sum += t->step_ms[i];
    const spread *f = &t->total, *u = other ? &other->total : NULL;
    bool inconclusive = u && overlap(*f, *u);
    if (o->json) {
        printf("], \"step_ms\": %.4f, \"step_ms_q1\": %.4f, \"step_ms_q3\": %.4f, \"sum_of_steps_ms\": %.4f, "
               "\"kernels\": %d, \"gemms\": %d",
               f->median, f->lo, f->hi, sum, t->kernels, t->gemms);
        json_bottleneck(e, t, bw, o);
        if (other)
            printf(", \"unfused_step_ms\": %.4f, \"unfused_step_ms_q1\": %.4f, \"unfused_step_ms_q3\": %.4f, "
                   "\"unfused_kernels\": %d, \"unfused_gemms\": %d, \"speedup\": %.4f, \"inconclusive\": %s",
                   u->median, u->lo, u->hi, other->kernels, other->gemms, u->median / f->median,
                   inconclusive ? "true" : "false");
        printf("}\n");
        return;
    }
    printf("\n%s plan: %.2f ms per step (IQR %.2f-%.2f; sum of steps %.2f ms), %d kernels + %d GEMMs\n",
           fused ? "fused" : "unfused", f->median, f->lo, f->hi, sum, t->kernels, t->gemms);
    print_bottleneck(e, t, bw, o);
    if (!other)
        return;
    printf("unfused plan: %.2f ms per step (IQR %.2f-%.2f), %d kernels + %d GEMMs\n", u->median, u->lo, u->hi,
           other->kernels, other->gemms);
    if (inconclusive)
        printf("fusion: %.2fx, inconclusive: the ranges overlap (more --repeats, or a quieter machine); %d fewer kernels\n",
               u->median / f->median, other->kernels - t->kernels);
    else
        printf("fusion: %.2fx %s, %d fewer kernels\n", u->median / f->median, u->median > f->median ? "faster" : "slower",
               other->kernels - t->kernels);
}

/* --check-fusion: each fused kernel of two or more parts against the sum
 * of its parts' unfused times (both medians of repeats); prints the
 * groups and returns how many are slower by more than the margin. */
static int check_fusion(const kl_exec *fused, const timed *tf, const kl_exec *unfused, const timed *tu, const bench_opts *o)
{
    const kl_plan *p = fused->plan;
    kl_fusion_group *g = kl_xcalloc((size_t)p->steps.n + 1, sizeof *g);
    int n = kl_fusion_groups(p, tf->step_ms, unfused->plan, tu->step_ms, o->margin, g, NULL), slow = 0;
    FILE *out = o->json ? stderr : stdout;
    fprintf(out, "\nfusion check: %d fused kernels of 2+ parts, margin %.0f%% (medians of %d repeats)\n", n,
            100 * o->margin, o->repeats);
    for (int k = 0; k < n; k++) {
        char *label = plan_step_label(p, &p->steps.v[g[k].step]);
        fprintf(out, "  %s step %d %s: fused %.4f ms, %d parts %.4f ms (%.2fx)\n", g[k].slow ? "SLOW" : "ok  ", g[k].step,
                label, g[k].fused_ms, g[k].parts, g[k].parts_ms, g[k].parts_ms > 0 ? g[k].fused_ms / g[k].parts_ms : 0.0);
        if (g[k].slow) {
            kl_error("kiln bench --check-fusion: %s: fused kernel step %d (%s) takes %.4f ms, its %d unfused parts %.4f ms",
                     o->file, g[k].step, label, g[k].fused_ms, g[k].parts, g[k].parts_ms);
            slow++;
        }
        free(label);
    }
    free(g);
    return slow;
}

int kl_bench_main(int argc, char **argv)
{
    bench_opts o = {.repeats = 20, .margin = 0.10};
    const char *kv[8] = {NULL};
    int nkv = 0;
    bool gemms = false;
    const char *fp32_gemm = NULL, *bf16_gemm = NULL;
    const char *files[16];
    int nfiles = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: kiln bench FILE [--no-fusion] [--eval] [--json] [--repeats N] [--threads N] [--batch N]\n"
                   "                  [--device cpu|cuda] [--no-cuda-graph] [--fp32-gemm L] [--bf16-gemm L]\n"
                   "                  [--check-fusion [--margin F]]\n"
                   "       kiln bench --gemms FILE... [--repeats N] [--threads N] [--batch N]\n"
                   "\n"
                   "Times every kernel and GEMM of the model's training step on the CPU\n"
                   "(median of N repeats after a warm-up), with the bytes each must move\n"
                   "and that as GB/s and as a share of the machine's copy bandwidth\n"
                   "(measured here); then the whole step, fused and unfused, alternated:\n"
                   "medians with their interquartile range (IQR), and \"inconclusive\"\n"
                   "when the two ranges overlap.\n"
                   "\n"
                   "  --no-fusion  list the unfused plan's kernels\n"
                   "  --eval       the evaluation plan instead of the training step\n"
                   "  --check-fusion  exit 3, naming each, when a fused kernel is slower than\n"
                   "               the sum of its parts in the unfused plan by more than the\n"
                   "               margin (--margin F, default 0.10: 10%%)\n"
                   "  --json       one JSON object instead of the table\n"
                   "  --threads N  CPU threads (default: OMP_NUM_THREADS when set, else the\n"
                   "               physical cores, as a training run; printed)\n"
                   "  --device D   cpu (default) or cuda: on the GPU, times come from events\n"
                   "               on the stream (mean of N back to back) and the bandwidth\n"
                   "               is a device-to-device copy's\n"
                   "  --no-cuda-graph  time whole steps without replaying a CUDA graph\n"
                   "  --fp32-gemm L, --bf16-gemm L  the CPU's GEMM libraries, as for a training\n"
                   "               run (auto, onednn or openblas; bf16 also kiln; printed)\n"
                   "  --gemms      instead: every GEMM shape of the models' fp32 training plans\n"
                   "               as fp32 (OpenBLAS and oneDNN), bf16 (oneDNN and Kiln's kernel)\n"
                   "               and f16, GFLOP/s\n"
                   "               and the share of OpenBLAS's sgemm peak (tools/bench_gemm.c)\n");
            return 0;
        } else if (!strcmp(a, "--gemms")) {
            gemms = true;
        } else if (!strcmp(a, "--no-fusion")) {
            o.no_fusion = true;
        } else if (!strcmp(a, "--device") && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "cpu") && strcmp(d, "cuda")) {
                kl_error("kiln bench: --device must be cpu or cuda");
                return 1;
            }
            o.gpu = !strcmp(d, "cuda");
        } else if (!strcmp(a, "--no-cuda-graph")) {
            o.no_graph = true;
        } else if (!strcmp(a, "--fp32-gemm") && i + 1 < argc) {
            fp32_gemm = argv[++i];
        } else if (!strcmp(a, "--bf16-gemm") && i + 1 < argc) {
            bf16_gemm = argv[++i];
        } else if (!strcmp(a, "--check-fusion")) {
            o.check_fusion = true;
        } else if (!strcmp(a, "--margin") && i + 1 < argc) {
            char *end;
            o.margin = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(o.margin >= 0 && o.margin <= 100)) {
                kl_error("kiln bench: --margin needs a share from 0 (0.10: 10%%), got '%s'", argv[i]);
                return 1;
            }
        } else if (!strcmp(a, "--json")) {
            o.json = true;
        } else if (!strcmp(a, "--eval")) {
            o.eval = true;
        } else if (!strcmp(a, "--repeats") && i + 1 < argc) {
            o.repeats = atoi(argv[++i]);
            if (o.repeats < 1 || o.repeats > 100000) {
                kl_error("--repeats needs a count from 1");
                return 1;
            }
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            o.threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--batch") && i + 1 < argc && nkv < 6) {
            kv[nkv++] = "batch";
            kv[nkv++] = argv[++i];
        } else if (a[0] == '-') {
            kl_error("kiln bench: unknown option or missing value: %s (see kiln bench --help)", a);
            return 1;
        } else if (!o.file) {
            o.file = a;
            files[nfiles++] = a;
        } else if (gemms && nfiles < (int)KL_ARRAY_LEN(files)) {
            files[nfiles++] = a;
        } else {
            kl_error("kiln bench: more than one input file");
            return 1;
        }
    }
    if ((fp32_gemm || bf16_gemm) && (gemms || o.gpu)) {
        kl_error("kiln bench: %s chooses the CPU's GEMM library for a step's timing; %s", fp32_gemm ? "--fp32-gemm" : "--bf16-gemm",
                 gemms ? "--gemms times every library itself" : "this run is on the GPU");
        return 1;
    }
    if (o.check_fusion && (o.no_fusion || gemms)) {
        kl_error("kiln bench: --check-fusion compares the fused plan with the unfused one; not with %s",
                 gemms ? "--gemms" : "--no-fusion");
        return 1;
    }
    if (gemms && o.file)
        return kl_bench_gemms(files, nfiles, nkv ? kv : NULL, o.threads, o.repeats);
    if (!o.file) {
        kl_error("kiln bench: no input file (see kiln bench --help)");
        return 1;
    }
    o.kv = nkv ? kv : NULL;
    kl_cpu_options co = {.threads = o.threads, .fp32_gemm = fp32_gemm, .bf16_gemm = bf16_gemm};
    kl_backend *be;
    if (o.gpu) {
        char why[600];
        kl_cuda_options cuo = {0};
        if (!(be = kl_cuda_backend_new(&cuo, why, sizeof why))) {
            kl_error("kiln bench --device cuda: %s", why);
            return 1;
        }
    } else if (!(be = kl_cpu_backend_new(&co))) {
        return 1; /* a refused GEMM library (reported) */
    }
    kl_session *s = kl_session_new(be, 1);
    s->no_graphs = o.no_graph;
    int rc = 1;
    kl_exec *fused = build(s, &o, !o.no_fusion), *unfused = o.no_fusion ? NULL : build(s, &o, false);
    if (fused && (o.no_fusion || unfused)) {
        double bw = o.gpu ? kl_cuda_copy_bandwidth(be) : kl_copy_bandwidth();
        if (!o.json && o.gpu)
            printf("kiln bench %s: %s; copy bandwidth %.1f GB/s (device-to-device copy of 256 MiB, read + write)%s\n%s\n",
                   o.file, be->desc, bw, o.no_graph ? "; no CUDA graphs" : "",
                   kl_simgpu_wanted() ? "timings: the simulated device's host emulation, meaningless for a GPU's speed\n"
                                      : "");
        else if (!o.json)
            printf("kiln bench %s: %s, %s; copy bandwidth %.2f GB/s (memcpy of 64 MiB, read + write)\n\n", o.file,
                   be->desc, kl_cpu_gemm_choice(be), bw);
        timed tf = {0}, tu = {0};
        time_plan(fused, o.repeats, &tf);
        if (unfused)
            time_plan(unfused, o.repeats, &tu);
        if (unfused && !o.gpu)
            compare_steps(fused, unfused, o.repeats, &tf, &tu);
        report(fused, &tf, unfused ? &tu : NULL, bw, &o, !o.no_fusion);
        rc = o.check_fusion && check_fusion(fused, &tf, unfused, &tu, &o) ? 3 : 0;
        free(tf.step_ms);
        free(tu.step_ms);
    }
    kl_exec_free(fused);
    kl_exec_free(unfused);
    kl_session_free(s);
    be->ops->destroy(be);
    return rc;
}
