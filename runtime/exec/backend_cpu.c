/* The CPU backend: host memory, generated C kernels (linked in or compiled
 * at run time), OpenBLAS or oneDNN for GEMMs (cpu_dnnl.h), OpenMP threads. */
#include <cblas.h>
#include <immintrin.h>
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "base/thread.h"
#include "runtime/cpu/cpu_attn.h"
#include "runtime/cpu/cpu_dnnl.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/f16_rows.h"
#include "runtime/cpu/gemm16.h"
#include "session.h"
#include "codegen/kir.h"

/* OpenBLAS's own thread count; declared here to avoid depending on which
 * OpenBLAS header variant is installed. */
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);

typedef struct cpu_kernel {
    char *name;
    kl_cpu_kernel_fn fn;
} cpu_kernel;

/* A widened GEMM operand kept for later GEMM steps of the run that read
 * the same elements (kl_gemm.keep_a ..., plan/gemm_reuse.c). */
typedef struct kept_operand {
    int id;          /* the plan's keep id; 0: free */
    const void *src; /* the 16-bit elements it was widened from */
    int64_t n;
    ir_dtype dt;
    float *w;
    int64_t cap;     /* floats allocated at w */
} kept_operand;

/* KILN_GEMM_REUSE: on (default), off, or check (every reuse compared
 * with the operand widened again; a difference is an internal error). */
typedef enum { REUSE_ON, REUSE_OFF, REUSE_CHECK } reuse_mode;

typedef struct cpu_backend {
    kl_backend base;
    float *wide[3];       /* fp32 staging for low-precision GEMM operands */
    size_t wide_len[3];
    const kl_builtin_kernel *builtins;
    char *cache_dir;
    char *jit_reason;
    bool quiet;
    KL_VEC(cpu_kernel) kernels; /* every kernel resolved so far, by name */
    kl_jit_handles handles;     /* dlopen handles of compiled kernels */
    kl_dnnl *dnnl;              /* bf16 GEMMs through oneDNN; NULL: widened to fp32 */
    kl_dnnl *dnnl_f32;          /* fp32 GEMMs (widened ones too) through oneDNN's sgemm; NULL: OpenBLAS */
    bool few_on_openblas;       /* widened GEMMs of few columns on OpenBLAS (wide_on_openblas) */
    bool gemm16;                /* f16 GEMMs through gemm16.h's AVX-512 kernel; false: widened to fp32 */
    bool gemm16_every;          /* every f16 GEMM it takes (KILN_F16_GEMM=amx|avx512); false: by shape */
    bool bf16_kiln;             /* bf16 GEMMs through gemm16.h's AVX-512 FMA kernel (bf16_on_kiln) */
    bool bf16_kiln_every;       /* every bf16 GEMM it takes (--bf16-gemm kiln); false: by shape */
    kl_gemm16_ws gemm16_ws;
    KL_VEC(kept_operand) kept;  /* widened operands kept within a run */
    int64_t kept_floats;        /* allocated for them, at most KEPT_MAX_FLOATS */
    reuse_mode reuse;
    bool reuse_on;              /* within a run (gemm_reuse) and not off */
    long reused, checked;       /* operands reused; of them compared (check) */
    char gemm_choice[1024];     /* "fp32 GEMMs: ..., bf16 GEMMs: ...", for the start-up line */
    bool generated_attention;   /* KILN_CPU_ATTENTION=generated: attention
                                   through the kernel IR's C, not cpu_attn.c */
} cpu_backend;

static void *cpu_alloc(kl_backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? (bytes + 255) & ~(size_t)255 : 256))
        kl_panic("out of memory allocating %zu bytes", bytes);
    return p;
}

static void cpu_free(kl_backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_copy(kl_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
}

static void cpu_zero(kl_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
}

static kl_cpu_kernel_fn find_kernel(cpu_backend *cb, const char *name)
{
    for (int i = 0; i < cb->kernels.n; i++)
        if (!strcmp(cb->kernels.v[i].name, name))
            return cb->kernels.v[i].fn;
    return NULL;
}

static void remember(cpu_backend *cb, const char *name, kl_cpu_kernel_fn fn)
{
    cpu_kernel k = {kl_xstrdup(name), fn};
    kl_vec_push(cb->kernels, k);
}

static int cpu_prepare(kl_backend *be, const kl_plan *plan)
{
    cpu_backend *cb = (cpu_backend *)be;
    KL_VEC(kl_jit_kernel) missing = {0};
    for (int i = 0; i < plan->kernels.n; i++) {
        const kl_kernel_src *k = &plan->kernels.v[i];
        bool seen = find_kernel(cb, k->name) != NULL;
        for (int j = 0; j < missing.n && !seen; j++)
            seen = !strcmp(missing.v[j].name, k->name);
        if (seen)
            continue;
        kl_cpu_kernel_fn fn = NULL;
        for (const kl_builtin_kernel *b = cb->builtins; b && b->name; b++)
            if (!strcmp(b->name, k->name))
                fn = b->fn;
        if (fn) {
            remember(cb, k->name, fn);
            continue;
        }
        kl_jit_kernel m = {k->name, k->c_src, NULL};
        kl_vec_push(missing, m);
    }
    int rc = 0;
    if (missing.n) {
        rc = kl_cpu_jit_kernels(missing.v, missing.n, kir_c_prelude(), cb->cache_dir, cb->quiet, cb->jit_reason,
                                &cb->handles);
        for (int i = 0; i < missing.n && rc == 0; i++)
            remember(cb, missing.v[i].name, (kl_cpu_kernel_fn)missing.v[i].fn);
    }
    kl_vec_free(missing);
    return rc;
}

static void cpu_launch(kl_backend *be, const kl_plan *plan, int kernel, void *const *bufs, const kl_kargs *args)
{
    cpu_backend *cb = (cpu_backend *)be;
    const cg_attn_native *attn = &plan->kernels.v[kernel].attn;
    if (!cb->generated_attention && kl_cpu_attention_supported(attn)) {
        kl_cpu_attention(attn, bufs);
        return;
    }
    kl_cpu_kernel_fn fn = find_kernel(cb, plan->kernels.v[kernel].name);
    kl_check(fn != NULL);
    fn(bufs, args);
}

/* The conversion loops of low-precision GEMMs, built for AVX-512, AVX2
 * and plain x86-64 and chosen at load time (the branch-free conversions
 * vectorise only with per-lane shifts, which SSE2 lacks). */
#define KL_VECTOR_CLONES __attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))

KL_VECTOR_CLONES static void widen_bf16(float *restrict w, const uint16_t *restrict h, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        w[i] = kl_bf16_to_f32(h[i]);
}

void kl_cpu_f16_widen(float *w, const uint16_t *h, int64_t n)
{
    kl_f16_rows_widen(kl_f16_rows_best(), w, h, n);
}

void kl_cpu_f16_narrow(uint16_t *h, const float *w, int64_t n)
{
    kl_f16_rows_narrow(kl_f16_rows_best(), h, w, n);
}

KL_VECTOR_CLONES static void narrow_bf16(uint16_t *restrict h, const float *restrict w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        h[i] = kl_f32_to_bf16(w[i]);
}

/* The fp32 staging buffer of a slot, at least n elements. */
static float *staging(cpu_backend *cb, int slot, int64_t n)
{
    if (cb->wide_len[slot] < (size_t)n) {
        free(cb->wide[slot]);
        cb->wide[slot] = kl_xmalloc(sizeof(float) * (size_t)n);
        cb->wide_len[slot] = (size_t)n;
    }
    return cb->wide[slot];
}

/* An fp32 view of n elements of a low-precision (or fp32) buffer. */
static float *widen(cpu_backend *cb, int slot, ir_dtype dt, const void *src, int64_t n, bool copy)
{
    if (dt == IR_F32)
        return (float *)src;
    float *w = staging(cb, slot, n);
    if (copy) {
        if (dt == IR_BF16)
            widen_bf16(w, src, n);
        else
            kl_cpu_f16_widen(w, src, n);
    }
    return w;
}

/* Floats of kept widened operands at most (64 MiB): beyond, operands are
 * widened at every use as without keeping. */
#define KEPT_MAX_FLOATS ((int64_t)1 << 24)

static kept_operand *kept_slot(cpu_backend *cb, int64_t n)
{
    kept_operand *best = NULL;
    for (int i = 0; i < cb->kept.n; i++) {
        kept_operand *k = &cb->kept.v[i];
        if (!k->id && (!best || (k->cap >= n && (best->cap < n || k->cap < best->cap))))
            best = k;
    }
    if (best && best->cap >= n)
        return best;
    if (!best) {
        kept_operand k = {0};
        kl_vec_push(cb->kept, k);
        best = &cb->kept.v[cb->kept.n - 1];
    }
    if (cb->kept_floats - best->cap + n > KEPT_MAX_FLOATS)
        return NULL;
    cpu_free(&cb->base, best->w);
    cb->kept_floats += n - best->cap;
    best->w = cpu_alloc(&cb->base, sizeof(float) * (size_t)n);
    best->cap = n;
    return best;
}

/* The fp32 view of a GEMM operand's first n elements: a copy an earlier
 * GEMM step of the run kept under id reuse, else widened now (kept under
 * id keep when that is not 0). The same bits either way: a kept copy is
 * the widening of elements no step has written since. */
static float *operand(cpu_backend *cb, int slot, int keep, int reuse, ir_dtype dt, const void *src, int64_t n)
{
    if (dt == IR_F32 || !cb->reuse_on)
        return widen(cb, slot, dt, src, n, true);
    for (int i = 0; reuse && i < cb->kept.n; i++) {
        kept_operand *k = &cb->kept.v[i];
        if (k->id != reuse || k->src != src || k->n != n || k->dt != dt)
            continue;
        cb->reused++;
        if (cb->reuse == REUSE_CHECK) {
            float *w = widen(cb, slot, dt, src, n, true);
            if (memcmp(w, k->w, sizeof(float) * (size_t)n))
                kl_panic("KILN_GEMM_REUSE=check: the kept widened operand %d differs from its elements widened now",
                         reuse);
            cb->checked++;
        }
        return k->w;
    }
    /* One copy per id: a keep step that runs again in the run replaces its
     * copy (a stale one must not stay findable). */
    for (int i = 0; keep && i < cb->kept.n; i++)
        if (cb->kept.v[i].id == keep)
            cb->kept.v[i].id = 0;
    kept_operand *k = keep ? kept_slot(cb, n) : NULL;
    if (!k)
        return widen(cb, slot, dt, src, n, true);
    if (dt == IR_BF16)
        widen_bf16(k->w, src, n);
    else
        kl_cpu_f16_widen(k->w, src, n);
    k->id = keep;
    k->src = src;
    k->n = n;
    k->dt = dt;
    return k->w;
}

static void cpu_gemm_reuse(kl_backend *be, bool on)
{
    cpu_backend *cb = (cpu_backend *)be;
    for (int i = 0; i < cb->kept.n; i++)
        cb->kept.v[i].id = 0;
    cb->reuse_on = on && cb->reuse != REUSE_OFF;
}

/* Elements a GEMM touches in one operand: from its offset to the end of
 * the last batch item. */
static int64_t extent(int64_t off, int64_t stride, int64_t batch, int64_t each)
{
    return off + stride * (batch - 1) + each;
}

static void cpu_gemm_wide(cpu_backend *cb, const kl_gemm *g, const void *a, const void *b, void *c, bool openblas);

/* rows x cols of a 16-bit matrix whose rows are ld apart, to fp32 rows
 * packed cols apart; and back. */
static void widen_rows(ir_dtype dt, float *w, const uint16_t *h, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++) {
        if (dt == IR_BF16)
            widen_bf16(w + r * cols, h + r * ld, cols);
        else
            kl_cpu_f16_widen(w + r * cols, h + r * ld, cols);
    }
}

static void narrow_rows(ir_dtype dt, uint16_t *h, int64_t ld, const float *w, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        if (dt == IR_BF16)
            narrow_bf16(h + r * ld, w + r * cols, cols);
        else
            kl_cpu_f16_narrow(h + r * ld, w + r * cols, cols);
    }
}

/* fp32 elements of one widened panel: 512 kB, which stays in L2. */
#define PANEL_FLOATS (128 * 1024)

/* A widened 16-bit GEMM whose large operand (or result) is widened one
 * panel at a time, so that the fp32 copy the sgemm reads (or writes)
 * stays in cache rather than going out to memory and back: the columns
 * of B and C in panels when N is the long dimension (a convolution's
 * forward and input gradient), K in chunks summed into an fp32 C when K
 * is (its weight gradient). The same fp32 products summed in fp32; the
 * K chunks add their partial sums to C in chunk order, so the rounding
 * can differ in the last bits from one GEMM over all of K. One matrix
 * (batch 1); false when the operands are small or the GEMM is not of
 * this shape. */
static bool cpu_gemm_panels(cpu_backend *cb, const kl_gemm *g, const void *a, const void *b, void *c)
{
    int64_t m = g->m, n = g->n, k = g->k;
    if (g->batch != 1 || !(g->dtype == IR_BF16 || g->dtype == IR_F16) ||
        !(g->out_dtype == IR_F32 || g->out_dtype == g->dtype))
        return false;
    const uint16_t *ha = (const uint16_t *)a + g->off_a, *hb = (const uint16_t *)b + g->off_b;
    ir_dtype dt = g->dtype, odt = g->out_dtype;
    kl_gemm w = {.dtype = IR_F32, .out_dtype = IR_F32, .ta = g->ta, .tb = g->tb, .m = m, .batch = 1, .alpha = g->alpha};
    if (n >= k && k * n > 2 * PANEL_FLOATS) {
        int64_t nb = PANEL_FLOATS / k / 16 * 16;
        nb = nb < 16 ? 16 : nb;
        float *fa = widen(cb, 0, dt, ha, m * k, true);
        float *pb = staging(cb, 1, k * nb), *pc = staging(cb, 2, m * nb);
        w.k = k;
        w.beta = g->beta;
        for (int64_t j0 = 0; j0 < n; j0 += nb) {
            w.n = n - j0 < nb ? n - j0 : nb;
            if (g->tb) /* B is n x k: the panel's rows are contiguous */
                widen_rows(dt, pb, hb + j0 * k, 1, w.n * k, 0);
            else
                widen_rows(dt, pb, hb + j0, k, w.n, n);
            if (g->beta != 0) {
                if (odt == IR_F32)
                    for (int64_t r = 0; r < m; r++)
                        memcpy(pc + r * w.n, (float *)c + g->off_c + r * n + j0, sizeof(float) * (size_t)w.n);
                else
                    widen_rows(odt, pc, (uint16_t *)c + g->off_c + j0, m, w.n, n);
            }
            cpu_gemm_wide(cb, &w, fa, pb, pc, false);
            if (odt == IR_F32)
                for (int64_t r = 0; r < m; r++)
                    memcpy((float *)c + g->off_c + r * n + j0, pc + r * w.n, sizeof(float) * (size_t)w.n);
            else
                narrow_rows(odt, (uint16_t *)c + g->off_c + j0, n, pc, m, w.n);
        }
        return true;
    }
    int64_t mn = m > n ? m : n;
    if (k > mn && k * mn > 2 * PANEL_FLOATS) {
        int64_t kb = PANEL_FLOATS / mn / 16 * 16;
        kb = kb < 16 ? 16 : kb;
        float *pa = staging(cb, 0, m * kb), *pb = staging(cb, 1, kb * n);
        float *fc = odt == IR_F32 ? (float *)c + g->off_c
                                  : widen(cb, 2, odt, (uint16_t *)c + g->off_c, m * n, g->beta != 0);
        w.n = n;
        for (int64_t k0 = 0; k0 < k; k0 += kb) {
            w.k = k - k0 < kb ? k - k0 : kb;
            w.beta = k0 == 0 ? g->beta : 1.0;
            if (g->ta) /* A is k x m: the chunk's rows are contiguous */
                widen_rows(dt, pa, ha + k0 * m, 1, w.k * m, 0);
            else
                widen_rows(dt, pa, ha + k0, m, w.k, k);
            if (g->tb)
                widen_rows(dt, pb, hb + k0, n, w.k, k);
            else
                widen_rows(dt, pb, hb + k0 * n, 1, w.k * n, 0);
            cpu_gemm_wide(cb, &w, pa, pb, fc, false);
        }
        if (odt != IR_F32)
            narrow_rows(odt, (uint16_t *)c + g->off_c, 0, fc, 1, m * n);
        return true;
    }
    return false;
}

/* OpenBLAS's core (openblas_get_corename) is one of its AVX-512 sgemm
 * kernels'. */
bool kl_cpu_openblas_avx512(void)
{
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < KL_ARRAY_LEN(avx512); i++)
        if (!strcasecmp(core, avx512[i]))
            return true;
    return false;
}

/* A widened GEMM with few result columns (n < 16: the MLP's 128 x 10
 * logits and their weight gradient) runs on OpenBLAS's sgemm where the
 * fp32 choice is oneDNN's and OpenBLAS has its AVX-512 kernels: 63-82
 * against 44 GFLOP/s at 128 x 10 x 128, either transpose (kiln bench
 * --gemms, one thread, Zen 4, OpenBLAS core Cooperlake). With its AVX2
 * kernels (core Haswell, which OpenBLAS 0.3.21 picks on CPUs it does not
 * know) oneDNN is the faster: 69-75 against 43-49 (the same command, an
 * AMD EPYC with AVX-512, 2026-12-04). oneDNN stays where the small
 * dimension is K (128 x 128 x 10, B^T: 76 against 61). The same fp32
 * products and fp32 sums, in another order. */
static bool wide_on_openblas(const cpu_backend *cb, const kl_gemm *g)
{
    return cb->dnnl_f32 && cb->few_on_openblas && g->n < 16;
}

/* Whether bf16 GEMM g runs on Kiln's FMA kernel (widened to fp32 while
 * packed, as f16 is): every one it takes under --bf16-gemm kiln; under
 * auto, where the CPU prefers it to oneDNN (kl_gemm16_bf16_preferred)
 * all but the small shapes (kl_gemm16_pays_bf16, the rest on oneDNN),
 * and where oneDNN cannot run bf16 the large operands as for f16 (the
 * rest widened). */
static bool bf16_on_kiln(const cpu_backend *cb, const kl_gemm *g)
{
    return cb->bf16_kiln && g->dtype == IR_BF16 && kl_gemm16_takes(g) &&
           (cb->bf16_kiln_every || (cb->dnnl ? kl_gemm16_pays_bf16(g) : kl_gemm16_pays(g, false)));
}

static kl_f16_route f16_route(const cpu_backend *cb, const kl_gemm *g)
{
    if (!cb->gemm16 || g->dtype != IR_F16 || !kl_gemm16_takes(g) ||
        !(cb->gemm16_every || kl_gemm16_pays(g, cb->gemm16_ws.amx)))
        return KL_F16_WIDENED;
    return cb->gemm16_ws.amx ? KL_F16_AMX : KL_F16_AVX512;
}

static void cpu_gemm(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c)
{
    cpu_backend *cb = (cpu_backend *)be;
    /* An f64 GEMM writes f64: any other result would be overrun. */
    kl_check(g->dtype != IR_F64 || g->out_dtype == IR_F64);
    if (g->dtype == IR_F64 || (g->dtype == IR_F32 && g->out_dtype == IR_F32)) {
        cpu_gemm_wide(cb, g, a, b, c, false);
        return;
    }
    /* Low precision: the products in fp32 (as on the GPU: low-precision
     * operands, fp32 accumulation), the result rounded to its dtype. bf16
     * through oneDNN where the CPU has bf16 instructions, except a bf16
     * result summed over batch items, which stays in fp32 until the end
     * here (oneDNN would round it after every item). */
    if (bf16_on_kiln(cb, g)) {
        kl_gemm16(&cb->gemm16_ws, cb->base.threads, g, a, b, c);
        return;
    }
    if (cb->dnnl && g->dtype == IR_BF16 && (g->out_dtype == IR_F32 || !g->accumulate || g->batch == 1)) {
        kl_dnnl_gemm(cb->dnnl, g, a, b, c);
        return;
    }
    if (f16_route(cb, g) != KL_F16_WIDENED) {
        kl_gemm16(&cb->gemm16_ws, cb->base.threads, g, a, b, c);
        return;
    }
    if (cpu_gemm_panels(cb, g, a, b, c))
        return;
    kl_gemm w = *g;
    int64_t na = extent(g->off_a, g->stride_a, g->batch, g->m * g->k);
    int64_t nb = extent(g->off_b, g->stride_b, g->batch, g->k * g->n);
    int64_t nc = extent(g->off_c, g->stride_c, g->accumulate ? 1 : g->batch, g->m * g->n);
    float *fa = operand(cb, 0, g->keep_a, g->reuse_a, g->dtype, a, na);
    float *fb = operand(cb, 1, g->keep_b, g->reuse_b, g->dtype, b, nb);
    bool wide_c = g->out_dtype != IR_F32;
    bool gaps = g->batch > 1 && g->stride_c != g->m * g->n;
    float *fc = wide_c ? widen(cb, 2, g->out_dtype, c, nc, g->beta != 0 || g->accumulate || gaps) : c;
    w.dtype = w.out_dtype = IR_F32;
    cpu_gemm_wide(cb, &w, fa, fb, fc, wide_on_openblas(cb, g));
    if (wide_c) {
        /* Only the elements the GEMM wrote: from the offset on. */
        if (g->out_dtype == IR_BF16)
            narrow_bf16((uint16_t *)c + g->off_c, fc + g->off_c, nc - g->off_c);
        else
            kl_cpu_f16_narrow((uint16_t *)c + g->off_c, fc + g->off_c, nc - g->off_c);
    }
}

static void cpu_gemm_wide(cpu_backend *cb, const kl_gemm *g, const void *a, const void *b, void *c, bool openblas)
{
    CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    /* Row-major leading dimensions: the stored row length of each matrix. */
    int lda = (int)(g->ta ? g->m : g->k), ldb = (int)(g->tb ? g->k : g->n), ldc = (int)g->n;
    for (int64_t i = 0; i < g->batch; i++) {
        double beta = g->accumulate && i > 0 ? 1.0 : g->beta;
        int64_t oa = g->off_a + i * g->stride_a, ob = g->off_b + i * g->stride_b, oc = g->off_c + i * g->stride_c;
        if (g->dtype == IR_F64)
            cblas_dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, (const double *)a + oa, lda,
                        (const double *)b + ob, ldb, beta, (double *)c + oc, ldc);
        else if (g->dtype == IR_F32 && cb->dnnl_f32 && !openblas)
            kl_dnnl_sgemm(cb->dnnl_f32, g->ta, g->tb, g->m, g->n, g->k, (float)g->alpha, (const float *)a + oa, lda,
                          (const float *)b + ob, ldb, (float)beta, (float *)c + oc, ldc);
        else if (g->dtype == IR_F32)
            cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, (const float *)a + oa,
                        lda, (const float *)b + ob, ldb, (float)beta, (float *)c + oc, ldc);
        else
            kl_panic("CPU GEMM for %s is not implemented", ir_dtype_name(g->dtype));
    }
}

static void cpu_sync(kl_backend *be)
{
    (void)be;
}

static void cpu_destroy(kl_backend *be)
{
    cpu_backend *cb = (cpu_backend *)be;
    for (int i = 0; i < cb->kernels.n; i++)
        free(cb->kernels.v[i].name);
    kl_vec_free(cb->kernels);
    for (int i = 0; i < cb->handles.n; i++)
        dlclose(cb->handles.v[i]);
    kl_vec_free(cb->handles);
    free(cb->cache_dir);
    free(cb->jit_reason);
    for (int i = 0; i < 3; i++)
        free(cb->wide[i]);
    for (int i = 0; i < cb->kept.n; i++)
        cpu_free(be, cb->kept.v[i].w);
    kl_vec_free(cb->kept);
    if (cb->reuse == REUSE_CHECK)
        fprintf(stderr, "KILN_GEMM_REUSE=check: %ld reused widened GEMM operands, %ld checked, all equal\n",
                cb->reused, cb->checked);
    kl_dnnl_close(cb->dnnl);
    kl_dnnl_close(cb->dnnl_f32);
    kl_gemm16_ws_free(&cb->gemm16_ws);
    free(cb);
}

/* MPI on host memory, at once (runtime/comm/comm.h). */
static void cpu_collective(kl_backend *be, const kl_coll *k)
{
    (void)be;
    kl_comm_run(k);
}

static const kl_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .fill_zero = cpu_zero,
    .prepare = cpu_prepare,
    .launch = cpu_launch,
    .gemm = cpu_gemm,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .collective = cpu_collective,
    .gemm_reuse = cpu_gemm_reuse,
};

const char *kl_cpu_gemm_choice(const kl_backend *be)
{
    return be && be->ops == &cpu_ops ? ((const cpu_backend *)be)->gemm_choice : NULL;
}

kl_f16_route kl_cpu_f16_route(const kl_backend *be, const kl_gemm *g)
{
    return be && be->ops == &cpu_ops ? f16_route((const cpu_backend *)be, g) : KL_F16_WIDENED;
}

bool kl_cpu_bf16_on_kiln(const kl_backend *be, const kl_gemm *g)
{
    return be && be->ops == &cpu_ops && bf16_on_kiln((const cpu_backend *)be, g);
}

bool kl_cpu_wide_on_openblas(const kl_backend *be, const kl_gemm *g)
{
    if (!be || be->ops != &cpu_ops || !(g->dtype == IR_F16 || g->dtype == IR_BF16))
        return false;
    const cpu_backend *cb = (const cpu_backend *)be;
    if (g->dtype == IR_BF16 ? cb->dnnl != NULL || bf16_on_kiln(cb, g) : f16_route(cb, g) != KL_F16_WIDENED)
        return false;
    return wide_on_openblas(cb, g);
}

/* One GEMM library choice: FLAG's value, else the environment variable
 * ENV, else auto. Opens oneDNN for USE into *d unless openblas (NULL: the
 * OpenBLAS path) and writes what runs into text: oneDNN's name, or, on the
 * OpenBLAS path, "OpenBLAS sgemm" for fp32 and for bf16 " (why)". Returns
 * -1 on a refused setting (reported). */
static int choose_dnnl(kl_dnnl **d, kl_dnnl_use use, const char *flag, const char *value, const char *env_name,
                       char *text, size_t len)
{
    const char *env = getenv(env_name);
    const char *from = value ? flag : env && *env ? env_name : flag;
    const char *lib = value ? value : env && *env ? env : "auto";
    char why[200] = "", what[80] = "";
    if (strcmp(lib, "auto") && strcmp(lib, "onednn") && strcmp(lib, "openblas")) {
        kl_error("%s must be auto, onednn or openblas, got '%s'", from, lib);
        return -1;
    }
    if (strcmp(lib, "openblas"))
        *d = kl_dnnl_open(use, why, sizeof why, what, sizeof what);
    if (!*d && !strcmp(lib, "onednn")) {
        kl_error("%s onednn: %s\n---> try %s auto (%s)", from, why, from,
                 use == KL_DNNL_F32 ? "OpenBLAS's sgemm" : "operands widened to fp32");
        return -1;
    }
    /* Why the OpenBLAS path, when it is: the reason, or the setting. */
    char because[208];
    if (*why)
        snprintf(because, sizeof because, " (%s)", why);
    else if (!strcmp(from, flag))
        snprintf(because, sizeof because, " (%s openblas)", flag);
    else
        snprintf(because, sizeof because, " (%s=openblas)", env_name);
    if (*d)
        snprintf(text, len, "%s", what);
    else if (use == KL_DNNL_F32)
        snprintf(text, len, "OpenBLAS sgemm%s", because);
    else
        snprintf(text, len, "%s", because);
    return 0;
}

/* Who runs bf16 GEMMs: --bf16-gemm's value, else KILN_BF16_GEMM, else
 * auto. kiln: Kiln's AVX-512 FMA kernel for every bf16 GEMM it takes
 * (gemm16.h; refused without AVX-512); onednn or openblas as
 * choose_dnnl; auto: oneDNN where it runs, and Kiln's kernel instead
 * for the shapes where it pays on CPUs where it is chosen
 * (kl_gemm16_bf16_preferred). Writes what runs into text; -1 on a
 * refused setting (reported). */
static int choose_bf16(cpu_backend *cb, const char *value, char *text, size_t len)
{
    const char *env = getenv("KILN_BF16_GEMM");
    const char *from = value ? "--bf16-gemm" : env && *env ? "KILN_BF16_GEMM" : "--bf16-gemm";
    const char *lib = value ? value : env && *env ? env : "auto";
    if (strcmp(lib, "auto") && strcmp(lib, "onednn") && strcmp(lib, "kiln") && strcmp(lib, "openblas")) {
        kl_error("%s must be auto, onednn, kiln or openblas, got '%s'", from, lib);
        return -1;
    }
    const char *kernel = "Kiln AVX-512 (fp32 sums; operands widened while packed";
    if (!strcmp(lib, "kiln")) {
        if (!kl_gemm16_supported()) {
            kl_error("%s kiln: this CPU lacks AVX-512 (F, BW, VL) or F16C, which Kiln's 16-bit GEMM needs\n"
                     "---> try %s auto", from, from);
            return -1;
        }
        cb->bf16_kiln = cb->bf16_kiln_every = true;
        snprintf(text, len, "%s; every size)", kernel);
        return 0;
    }
    char b16[300];
    if (choose_dnnl(&cb->dnnl, KL_DNNL_BF16, "--bf16-gemm", value, "KILN_BF16_GEMM", b16, sizeof b16))
        return -1;
    /* the rest: oneDNN's matmul, else widened for the fp32 choice */
    char rest[400];
    if (cb->dnnl)
        snprintf(rest, sizeof rest, "%s", b16);
    else
        snprintf(rest, sizeof rest, "%s sgemm, widened%s", cb->dnnl_f32 ? "oneDNN" : "OpenBLAS", b16);
    cb->bf16_kiln = !strcmp(lib, "auto") && kl_gemm16_supported() && (!cb->dnnl || kl_gemm16_bf16_preferred());
    if (cb->bf16_kiln)
        snprintf(text, len, "%s; %s; others %s)", kernel, cb->dnnl ? "all but small ones" : "large operands", rest);
    else
        snprintf(text, len, "%s", rest);
    return 0;
}

/* KILN_GEMM_REUSE: whether widened GEMM operands are kept for the later
 * GEMM steps of a run that read them (on, the default), widened at every
 * use (off), or kept and compared with a new widening at every reuse
 * (check: tests). -1 on another value (reported). */
static int choose_reuse(cpu_backend *cb)
{
    const char *env = getenv("KILN_GEMM_REUSE");
    const char *want = env && *env ? env : "on";
    cb->reuse = !strcmp(want, "off") ? REUSE_OFF : !strcmp(want, "check") ? REUSE_CHECK : REUSE_ON;
    if (cb->reuse == REUSE_ON && strcmp(want, "on")) {
        kl_error("KILN_GEMM_REUSE must be on, off or check, got '%s'", want);
        return -1;
    }
    return 0;
}

/* Who runs f16 GEMMs: KILN_F16_GEMM auto (Kiln's kernel on the AMX
 * tile unit where the CPU and OS have it, else its AVX-512 FMA kernel
 * where the CPU has AVX-512, for the shapes where it is faster than
 * widening, kl_gemm16_pays; the rest, and everything on other CPUs, on
 * operands widened to fp32 for the fp32 library), amx or avx512 (that
 * kernel for every f16 GEMM it takes, any size: tests force a path so;
 * refused where it cannot run) or widened. Writes what runs into text
 * (no comma: scripts cut the start-up line at commas); -1 on a refused
 * setting (reported). */
static int choose_gemm16(cpu_backend *cb, char *text, size_t len)
{
    const char *env = getenv("KILN_F16_GEMM");
    const char *want = env && *env ? env : "auto";
    if (strcmp(want, "auto") && strcmp(want, "amx") && strcmp(want, "avx512") && strcmp(want, "widened")) {
        kl_error("KILN_F16_GEMM must be auto, amx, avx512 or widened, got '%s'", want);
        return -1;
    }
    bool fma = kl_gemm16_supported(), amx = fma && strcmp(want, "avx512") && strcmp(want, "widened") &&
                                              kl_gemm16_amx_supported();
    if (!strcmp(want, "avx512") && !fma) {
        kl_error("KILN_F16_GEMM=avx512: this CPU lacks AVX-512 (F, BW, VL) or F16C, which Kiln's f16 GEMM needs\n"
                 "---> try KILN_F16_GEMM=auto (operands widened to fp32)");
        return -1;
    }
    if (!strcmp(want, "amx") && !amx) {
        kl_error("KILN_F16_GEMM=amx: this CPU lacks AMX-TILE and AMX-BF16 (or AVX-512), or the OS did not grant "
                 "the tile registers\n"
                 "---> try KILN_F16_GEMM=auto (the best this machine has)");
        return -1;
    }
    cb->gemm16 = fma && strcmp(want, "widened");
    cb->gemm16_every = !strcmp(want, "amx") || !strcmp(want, "avx512");
    cb->gemm16_ws.amx = amx;
    const char *which = cb->gemm16_every ? "every size" : amx ? "small ones widened" : "large operands; others widened";
    if (amx)
        snprintf(text, len, "Kiln AMX (exact bf16 parts of f16; fp32 sums; %s)", which);
    else if (cb->gemm16)
        snprintf(text, len, "Kiln AVX-512 (fp32 sums; operands widened while packed; %s)", which);
    else
        snprintf(text, len, "sgemm, widened (%s)", fma ? "KILN_F16_GEMM=widened" : "no AVX-512");
    return 0;
}

kl_backend *kl_cpu_backend_new(const kl_cpu_options *o)
{
    cpu_backend *cb = kl_xcalloc(1, sizeof *cb);
    cb->base.ops = &cpu_ops;
    const char *rule = o && o->threads_from ? o->threads_from : "--threads";
    int threads = o && o->threads > 0 ? o->threads : kl_cpu_default_threads(&rule);
    cb->base.threads = threads;
    snprintf(cb->base.desc, sizeof cb->base.desc, "cpu, %d thread%s (%s)", threads, threads == 1 ? "" : "s", rule);
    omp_set_num_threads(threads);
    /* Flush subnormal floats to zero in every thread that runs kernels:
     * optimizer state drifts into subnormals, where x86 arithmetic is
     * two orders of magnitude slower. */
    _mm_setcsr(_mm_getcsr() | 0x8040);
    /* And OpenMP's other threads block the stop signals for good: they
     * run oneDNN's GEMM kernels, during which no signal frame may land
     * on their stack pointer (base/thread.h); a signal goes to the
     * thread that started the run, which blocks them during a GEMM. */
#pragma omp parallel
    {
        _mm_setcsr(_mm_getcsr() | 0x8040);
        if (omp_get_thread_num() != 0)
            kl_signals_block(NULL);
    }
    /* KILN_GEMM_THREADS=N (a debugging setting, never a default): the
     * GEMM library on N threads whatever the kernels' count, so runs at
     * different thread counts can be compared bit for bit (OpenBLAS's
     * sums depend on its thread count under some of its cores, e.g.
     * OPENBLAS_CORETYPE=Haswell). */
    int gemm_threads = threads;
    const char *gt = getenv("KILN_GEMM_THREADS");
    if (gt) {
        char *end;
        long n = strtol(gt, &end, 10);
        if (end == gt || *end || n < 1 || n > 4096) {
            kl_error("KILN_GEMM_THREADS must be a thread count from 1 to 4096, got '%s'", gt);
            cpu_destroy(&cb->base);
            return NULL;
        }
        gemm_threads = (int)n;
        size_t used = strlen(cb->base.desc);
        snprintf(cb->base.desc + used, sizeof cb->base.desc - used, ", OpenBLAS on %d thread%s (KILN_GEMM_THREADS)",
                 gemm_threads, gemm_threads == 1 ? "" : "s");
    }
    openblas_set_num_threads(gemm_threads);
    cb->builtins = o ? o->builtins : NULL;
    cb->few_on_openblas = kl_cpu_openblas_avx512();
    cb->cache_dir = o && o->cache_dir ? kl_xstrdup(o->cache_dir) : NULL;
    cb->jit_reason = o && o->jit_reason ? kl_xstrdup(o->jit_reason) : NULL;
    cb->quiet = o && o->quiet;
    const char *attn = getenv("KILN_CPU_ATTENTION");
    if (attn && strcmp(attn, "native") && strcmp(attn, "generated")) {
        kl_error("KILN_CPU_ATTENTION must be native or generated, got '%s'", attn);
        cpu_destroy(&cb->base);
        return NULL;
    }
    cb->generated_attention = attn && !strcmp(attn, "generated");
    /* GEMM libraries: oneDNN by default where it is usable, which the
     * description says (with the reason when it is not). KILN_FP32_GEMM
     * and KILN_BF16_GEMM set the same choices where no flag does (tools
     * and tests that take no flag: a test forces a fallback path with
     * them). fp32 first: the widened bf16 path runs on its choice. */
    char f32[300], b16[560];
    if (choose_dnnl(&cb->dnnl_f32, KL_DNNL_F32, "--fp32-gemm", o ? o->fp32_gemm : NULL, "KILN_FP32_GEMM", f32,
                    sizeof f32) ||
        choose_bf16(cb, o ? o->bf16_gemm : NULL, b16, sizeof b16)) {
        cpu_destroy(&cb->base);
        return NULL;
    }
    char f16[120];
    if (choose_reuse(cb) || choose_gemm16(cb, f16, sizeof f16)) {
        cpu_destroy(&cb->base);
        return NULL;
    }
    snprintf(cb->gemm_choice, sizeof cb->gemm_choice, "fp32 GEMMs: %s, bf16 GEMMs: %s, f16 GEMMs: %s", f32, b16, f16);
    return &cb->base;
}

double kl_gemm_peak_gflops(kl_backend *be)
{
    const int n = 1024;
    kl_gemm g = {.dtype = IR_F32, .out_dtype = IR_F32, .m = n, .n = n, .k = n, .batch = 1, .alpha = 1};
    float *a = kl_xmalloc(sizeof(float) * (size_t)n * n), *b = kl_xmalloc(sizeof(float) * (size_t)n * n),
          *c = kl_xcalloc((size_t)n * n, sizeof(float));
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.25f;
        b[i] = (float)(i % 5) * 0.5f;
    }
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double t0 = kl_now();
        be->ops->gemm(be, &g, a, b, c);
        double dt = kl_now() - t0;
        /* The first call warms the library's threads and buffers. */
        if (r > 0 && dt > 0 && 2.0 * n * n * (double)n / dt / 1e9 > best)
            best = 2.0 * n * n * (double)n / dt / 1e9;
    }
    free(a);
    free(b);
    free(c);
    return best;
}
