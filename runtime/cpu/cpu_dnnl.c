/* bf16 GEMMs through oneDNN's matmul, fp32 GEMMs through its sgemm (see
 * cpu_dnnl.h). One matmul primitive per
 * distinct GEMM shape (dims, transposes, dtypes, alpha, beta), made on
 * first use and kept; each call sets the memory objects' data pointers
 * and runs it on the calling thread's OpenMP team (oneDNN here uses the
 * same libgomp, so --threads counts for it too). Built only where
 * oneDNN's headers are (KILN_HAVE_DNNL); the library itself is opened
 * with dlopen at run time. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_dnnl.h"
#include "base/thread.h"

#ifndef KILN_HAVE_DNNL

kl_dnnl *kl_dnnl_open(kl_dnnl_use use, char *why, size_t why_len, char *what, size_t what_len)
{
    (void)use;
    (void)what;
    (void)what_len;
    snprintf(why, why_len, "this build has no oneDNN support (libdnnl-dev was missing when it was configured)");
    return NULL;
}

void kl_dnnl_gemm(kl_dnnl *d, const kl_gemm *g, const void *a, const void *b, void *c)
{
    (void)d, (void)g, (void)a, (void)b, (void)c;
    kl_panic("oneDNN GEMM called in a build without oneDNN");
}

void kl_dnnl_sgemm(kl_dnnl *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)d, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)beta, (void)c, (void)ldc;
    kl_panic("oneDNN sgemm called in a build without oneDNN");
}

void kl_dnnl_close(kl_dnnl *d)
{
    (void)d;
}

#else

#include <oneapi/dnnl/dnnl.h>

/* The oneDNN functions used, typed from the header's own prototypes. */
#define DNNL_FUNCTIONS(X)                                                                                             \
    X(dnnl_version) X(dnnl_get_effective_cpu_isa) X(dnnl_engine_create) X(dnnl_engine_destroy)                       \
    X(dnnl_stream_create) X(dnnl_stream_destroy) X(dnnl_stream_wait) X(dnnl_memory_desc_init_by_strides)              \
    X(dnnl_matmul_desc_init) X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)                             \
    X(dnnl_primitive_attr_set_output_scales) X(dnnl_primitive_attr_set_post_ops) X(dnnl_post_ops_create)              \
    X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_sum) X(dnnl_primitive_desc_create)                                \
    X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) X(dnnl_primitive_create) X(dnnl_primitive_destroy)    \
    X(dnnl_primitive_execute) X(dnnl_memory_create) X(dnnl_memory_destroy) X(dnnl_memory_set_data_handle)              \
    X(dnnl_sgemm)

typedef struct dnnl_fns {
#define FIELD(name) __typeof__(name) *name;
    DNNL_FUNCTIONS(FIELD)
#undef FIELD
} dnnl_fns;

/* One GEMM shape's primitive and the memory objects it runs on. */
typedef struct dnnl_gemm_prim {
    int64_t m, n, k;
    int ta, tb;
    ir_dtype out_dtype;
    double alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3];
} dnnl_gemm_prim;

struct kl_dnnl {
    void *lib;
    dnnl_fns f;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    KL_VEC(dnnl_gemm_prim) prims;
};

#define DNNL_CHECK(d, call)                                                                                           \
    do {                                                                                                              \
        dnnl_status_t st_ = (d)->f.call;                                                                             \
        if (st_ != dnnl_success)                                                                                      \
            kl_panic("oneDNN: %s failed (status %d) at %s:%d", #call, (int)st_, __FILE__, __LINE__);                 \
    } while (0)

kl_dnnl *kl_dnnl_open(kl_dnnl_use use, char *why, size_t why_len, char *what, size_t what_len)
{
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "oneDNN not found (libdnnl.so.2: %s)", dlerror());
        return NULL;
    }
    kl_dnnl *d = kl_xcalloc(1, sizeof *d);
    d->lib = lib;
#define LOAD(name)                                                                                                    \
    if (!(d->f.name = (__typeof__(name) *)dlsym(lib, #name))) {                                                       \
        snprintf(why, why_len, "libdnnl.so.2 lacks %s", #name);                                                       \
        goto fail;                                                                                                    \
    }
    DNNL_FUNCTIONS(LOAD)
#undef LOAD
    dnnl_cpu_isa_t isa = d->f.dnnl_get_effective_cpu_isa();
    const char *isa_name = (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx     ? "AMX"
                           : (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ? "AVX512_BF16"
                                                                                                    : NULL;
    const dnnl_version_t *v = d->f.dnnl_version();
    if (use == KL_DNNL_F32) {
        /* sgemm needs no engine: AVX-512 or nothing (the rule: measured
         * faster than OpenBLAS there, cpu_dnnl.h). */
        if ((isa & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core) {
            snprintf(why, why_len, "the CPU has no AVX-512 (oneDNN %d.%d.%d sees ISA 0x%x)", v->major, v->minor,
                     v->patch, (unsigned)isa);
            goto fail;
        }
        if (what)
            snprintf(what, what_len, "oneDNN %d.%d.%d sgemm (AVX-512)", v->major, v->minor, v->patch);
        return d;
    }
    if (!isa_name) {
        snprintf(why, why_len, "the CPU has no bf16 instructions (oneDNN %d.%d.%d sees ISA 0x%x)", v->major, v->minor,
                 v->patch, (unsigned)isa);
        goto fail;
    }
    if (d->f.dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success ||
        d->f.dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(why, why_len, "oneDNN %d.%d.%d: no CPU engine", v->major, v->minor, v->patch);
        goto fail;
    }
    if (what)
        snprintf(what, what_len, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch, isa_name);
    return d;
fail:
    if (d->engine)
        d->f.dnnl_engine_destroy(d->engine);
    dlclose(lib);
    free(d);
    return NULL;
}

/* A row-major matrix of rows x cols, stored transposed when trans. */
static void matrix_desc(kl_dnnl *d, dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : cols, trans ? rows : 1};
    DNNL_CHECK(d, dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static dnnl_gemm_prim *find_prim(kl_dnnl *d, const kl_gemm *g, double beta)
{
    for (int i = 0; i < d->prims.n; i++) {
        dnnl_gemm_prim *p = &d->prims.v[i];
        if (p->m == g->m && p->n == g->n && p->k == g->k && p->ta == g->ta && p->tb == g->tb &&
            p->out_dtype == g->out_dtype && p->alpha == g->alpha && p->beta == beta)
            return p;
    }
    dnnl_gemm_prim p = {.m = g->m, .n = g->n, .k = g->k, .ta = g->ta, .tb = g->tb, .out_dtype = g->out_dtype,
                        .alpha = g->alpha, .beta = beta};
    dnnl_memory_desc_t md[3];
    matrix_desc(d, &md[0], g->m, g->k, g->ta, dnnl_bf16);
    matrix_desc(d, &md[1], g->k, g->n, g->tb, dnnl_bf16);
    matrix_desc(d, &md[2], g->m, g->n, 0, g->out_dtype == IR_F32 ? dnnl_f32 : dnnl_bf16);
    dnnl_matmul_desc_t op;
    DNNL_CHECK(d, dnnl_matmul_desc_init(&op, &md[0], &md[1], NULL, &md[2]));
    dnnl_primitive_attr_t attr;
    DNNL_CHECK(d, dnnl_primitive_attr_create(&attr));
    if (g->alpha != 1.0) {
        float alpha = (float)g->alpha;
        DNNL_CHECK(d, dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
    }
    if (beta != 0.0) {
        dnnl_post_ops_t po;
        DNNL_CHECK(d, dnnl_post_ops_create(&po));
        DNNL_CHECK(d, dnnl_post_ops_append_sum(po, (float)beta));
        DNNL_CHECK(d, dnnl_primitive_attr_set_post_ops(attr, po));
        d->f.dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(d, dnnl_primitive_desc_create(&pd, &op, attr, d->engine, NULL));
    d->f.dnnl_primitive_attr_destroy(attr);
    DNNL_CHECK(d, dnnl_primitive_create(&p.prim, pd));
    d->f.dnnl_primitive_desc_destroy(pd);
    for (int i = 0; i < 3; i++)
        DNNL_CHECK(d, dnnl_memory_create(&p.mem[i], &md[i], d->engine, DNNL_MEMORY_NONE));
    kl_vec_push(d->prims, p);
    return &d->prims.v[d->prims.n - 1];
}

void kl_dnnl_gemm(kl_dnnl *d, const kl_gemm *g, const void *a, const void *b, void *c)
{
    kl_check(g->dtype == IR_BF16 && (g->out_dtype == IR_BF16 || g->out_dtype == IR_F32));
    size_t c_size = g->out_dtype == IR_F32 ? 4 : 2;
    /* The accumulating items' primitive first: finding the other may
     * grow the vector, which would move it. */
    dnnl_gemm_prim *rest = g->accumulate && g->batch > 1 ? find_prim(d, g, 1.0) : NULL;
    dnnl_gemm_prim *first = find_prim(d, g, g->beta);
    if (rest)
        rest = find_prim(d, g, 1.0);
    else
        rest = first;
    /* As kl_dnnl_sgemm: a matmul may run the same GEMM kernels. */
    sigset_t old;
    kl_signals_block(&old);
    for (int64_t i = 0; i < g->batch; i++) {
        dnnl_gemm_prim *p = i == 0 ? first : rest;
        int64_t oa = g->off_a + i * g->stride_a, ob = g->off_b + i * g->stride_b, oc = g->off_c + i * g->stride_c;
        DNNL_CHECK(d, dnnl_memory_set_data_handle(p->mem[0], (char *)a + 2 * oa));
        DNNL_CHECK(d, dnnl_memory_set_data_handle(p->mem[1], (char *)b + 2 * ob));
        DNNL_CHECK(d, dnnl_memory_set_data_handle(p->mem[2], (char *)c + c_size * oc));
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->mem[0]}, {DNNL_ARG_WEIGHTS, p->mem[1]}, {DNNL_ARG_DST, p->mem[2]}};
        DNNL_CHECK(d, dnnl_primitive_execute(p->prim, d->stream, 3, args));
    }
    DNNL_CHECK(d, dnnl_stream_wait(d->stream));
    kl_signals_restore(&old);
}

void kl_dnnl_sgemm(kl_dnnl *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    /* Its JIT kernels run with the stack pointer in a heap workspace
     * (base/thread.h): no signal frame may land there. OpenMP's other
     * threads block the stop signals for good (backend_cpu.c). */
    sigset_t old;
    kl_signals_block(&old);
    DNNL_CHECK(d, dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
    kl_signals_restore(&old);
}

void kl_dnnl_close(kl_dnnl *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->prims.n; i++) {
        for (int j = 0; j < 3; j++)
            d->f.dnnl_memory_destroy(d->prims.v[i].mem[j]);
        d->f.dnnl_primitive_destroy(d->prims.v[i].prim);
    }
    kl_vec_free(d->prims);
    if (d->stream)
        d->f.dnnl_stream_destroy(d->stream);
    if (d->engine)
        d->f.dnnl_engine_destroy(d->engine);
    dlclose(d->lib);
    free(d);
}

#endif
