/* kiln bench --gemms (bench_gemm.h): the GEMM library comparison on the
 * plans' own shapes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gemm.h"
#include "driver/compile.h"
#include "runtime/cpu/gemm16.h"
#include "runtime/data/data.h"

extern char *openblas_get_corename(void);

typedef struct gemm_shape {
    const char *model, *op;
    kl_gemm g;  /* the plan's, with offsets dropped */
    int calls;  /* per training step */
} gemm_shape;

typedef KL_VEC(gemm_shape) shape_vec;

static bool same_shape(const kl_gemm *a, const kl_gemm *b)
{
    return a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n && a->k == b->k && a->batch == b->batch &&
           (a->stride_a == 0) == (b->stride_a == 0) && (a->stride_b == 0) == (b->stride_b == 0) &&
           a->accumulate == b->accumulate;
}

/* The distinct GEMM shapes of model's fp32 training plan, with their
 * calls per step; -1 when it does not build (reported). */
static int collect(const char *model, const char *const *kv, shape_vec *out)
{
    kl_compile_opts co = {.kv = kv, .mode = KL_MODE_TRAIN};
    kl_compiled *c = kl_compile_file(model, &co);
    if (!c)
        return -1;
    const kl_plan *p = c->plan;
    int first = out->n;
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *sp = &p->steps.v[i];
        if (sp->kind != KL_STEP_GEMM)
            continue;
        kl_gemm g = sp->gemm;
        /* Each batch item contiguous; shared operands stay shared. */
        g.off_a = g.off_b = g.off_c = 0;
        g.stride_a = g.stride_a ? g.m * g.k : 0;
        g.stride_b = g.stride_b ? g.k * g.n : 0;
        g.stride_c = g.accumulate ? 0 : g.m * g.n;
        g.dtype = g.out_dtype = IR_F32;
        g.a = 0, g.b = 1, g.c = 2;
        bool seen = false;
        for (int j = first; j < out->n && !seen; j++)
            if (same_shape(&out->v[j].g, &g)) {
                out->v[j].calls++;
                seen = true;
            }
        if (!seen) {
            gemm_shape s = {model, ir_op_name(ir_nd(p->g, sp->node)->op), g, 1};
            kl_vec_push(*out, s);
        }
    }
    kl_compiled_free(c);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double flops_of(const kl_gemm *g)
{
    return 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch;
}

/* Seconds: the process's CPU time with one thread (a shared machine
 * deschedules a process; its CPU time counts only what it ran), else the
 * wall clock. */
static double now(int threads)
{
    if (threads != 1)
        return kl_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GFLOP/s of g on be with operands of dtype dt (fp32 result): the median
 * of `repeats` timed calls after a warm-up. */
static double time_gemm(kl_backend *be, const kl_gemm *shape, ir_dtype dt, int repeats)
{
    kl_gemm g = *shape;
    g.dtype = dt;
    g.out_dtype = IR_F32;
    int64_t na = g.m * g.k * (g.stride_a ? g.batch : 1), nb = g.k * g.n * (g.stride_b ? g.batch : 1);
    int64_t nc = g.m * g.n * (g.accumulate ? 1 : g.batch);
    size_t es = (size_t)ir_dtype_size(dt);
    void *a = kl_xmalloc((size_t)na * es + 1), *b = kl_xmalloc((size_t)nb * es + 1);
    float *c = kl_xcalloc((size_t)nc + 1, sizeof(float));
    for (int64_t i = 0; i < na; i++)
        kl_store_as(dt, a, i, (double)((i * 7919) % 1000) / 1000.0 - 0.5);
    for (int64_t i = 0; i < nb; i++)
        kl_store_as(dt, b, i, (double)((i * 104729) % 1000) / 1000.0 - 0.5);
    be->ops->gemm(be, &g, a, b, c);
    double *t = kl_xmalloc(sizeof(double) * (size_t)repeats);
    for (int r = 0; r < repeats; r++) {
        double t0 = now(be->threads);
        be->ops->gemm(be, &g, a, b, c);
        t[r] = now(be->threads) - t0;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp_double);
    double med = t[repeats / 2];
    free(t);
    free(a);
    free(b);
    free(c);
    return med > 0 ? flops_of(&g) / med / 1e9 : 0;
}

static void cell(double gflops, double peak)
{
    if (gflops < 0)
        printf(" n/a |");
    else
        printf(" %.1f (%.0f%%) |", gflops, 100 * gflops / peak);
}

int kl_bench_gemms(const char *const *models, int nmodels, const char *const *kv, int threads, int repeats)
{
    shape_vec shapes = {0};
    for (int m = 0; m < nmodels; m++)
        if (collect(models[m], kv, &shapes)) {
            kl_vec_free(shapes);
            return 1;
        }
    kl_cpu_options co = {.threads = threads, .quiet = true, .bf16_gemm = "openblas", .fp32_gemm = "openblas"};
    kl_backend *be = kl_cpu_backend_new(&co);
    kl_cpu_options cd = {.threads = threads, .quiet = true, .bf16_gemm = "onednn"};
    kl_backend *dnnl = kl_cpu_backend_new(&cd);
    kl_cpu_options cs = {.threads = threads, .quiet = true, .fp32_gemm = "onednn"};
    kl_backend *d32 = kl_cpu_backend_new(&cs);
    kl_cpu_options ck = {.threads = threads, .quiet = true, .bf16_gemm = "kiln"};
    kl_backend *kbf = kl_gemm16_supported() ? kl_cpu_backend_new(&ck) : NULL;
    /* The f16 path as a run takes it: widened for the fp32 choice's sgemm. */
    kl_backend *wide = d32 ? d32 : be;
    if (!be) {
        kl_vec_free(shapes);
        return 1;
    }
    /* The machine's sgemm peak: a square 2048 product through OpenBLAS. */
    kl_gemm sq = {.dtype = IR_F32, .out_dtype = IR_F32, .m = 2048, .n = 2048, .k = 2048, .batch = 1, .alpha = 1,
                  .a = 0, .b = 1, .c = 2};
    double peak = time_gemm(be, &sq, IR_F32, 5);
    printf("kiln bench --gemms: %s; OpenBLAS core %s; oneDNN: %s; OpenBLAS sgemm peak %.1f GFLOP/s (2048 x 2048 x 2048, "
           "median of 5)\n\n",
           be->desc, openblas_get_corename(),
           dnnl  ? kl_cpu_gemm_choice(dnnl)
           : d32 ? kl_cpu_gemm_choice(d32)
                 : "neither bf16 GEMMs nor sgemm here (no oneDNN, or no AVX-512)",
           peak);
    printf("Each GEMM shape of the fp32 training plans (median of %d calls after a warm-up, %s; operands in the "
           "column's dtype, fp32 result; %% of the sgemm peak):\n\n",
           repeats, be->threads == 1 ? "CPU time of the process" : "wall clock");
    printf("| model | op | m x n x k | batch | calls/step | FLOP/call | fp32 OpenBLAS sgemm | fp32 oneDNN sgemm | bf16 oneDNN "
           "| bf16 Kiln AVX-512 | f16 (the CPU backend's path) |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    double total = 0, t32 = 0, td32 = 0, tbf = 0, tkb = 0, t16 = 0;
    for (int i = 0; i < shapes.n; i++) {
        const gemm_shape *s = &shapes.v[i];
        double f32 = time_gemm(be, &s->g, IR_F32, repeats);
        double fd32 = d32 ? time_gemm(d32, &s->g, IR_F32, repeats) : -1;
        double bf = dnnl ? time_gemm(dnnl, &s->g, IR_BF16, repeats) : -1;
        double kb = kbf ? time_gemm(kbf, &s->g, IR_BF16, repeats) : -1;
        double f16 = time_gemm(wide, &s->g, IR_F16, repeats);
        double fl = flops_of(&s->g) * s->calls;
        total += fl;
        t32 += fl / (f32 * 1e9);
        td32 += fd32 > 0 ? fl / (fd32 * 1e9) : 0;
        tbf += bf > 0 ? fl / (bf * 1e9) : 0;
        tkb += kb > 0 ? fl / (kb * 1e9) : 0;
        t16 += fl / (f16 * 1e9);
        const char *slash = strrchr(s->model, '/');
        printf("| %s | %s | %lld x %lld x %lld%s%s | %lld%s | %d | %.0f |", slash ? slash + 1 : s->model, s->op,
               (long long)s->g.m, (long long)s->g.n, (long long)s->g.k, s->g.ta ? " (A^T)" : "", s->g.tb ? " (B^T)" : "",
               (long long)s->g.batch, s->g.accumulate ? " summed" : "", s->calls, flops_of(&s->g));
        cell(f32, peak);
        cell(fd32, peak);
        cell(bf, peak);
        cell(kb, peak);
        cell(f16, peak);
        printf("\n");
    }
    printf("| all | | | | | %.0f (x calls) |", total);
    cell(total / t32 / 1e9, peak);
    cell(d32 ? total / td32 / 1e9 : -1, peak);
    cell(dnnl ? total / tbf / 1e9 : -1, peak);
    cell(kbf ? total / tkb / 1e9 : -1, peak);
    cell(total / t16 / 1e9, peak);
    printf("\n");
    if (dnnl)
        dnnl->ops->destroy(dnnl);
    if (d32)
        d32->ops->destroy(d32);
    if (kbf)
        kbf->ops->destroy(kbf);
    be->ops->destroy(be);
    kl_vec_free(shapes);
    return 0;
}
