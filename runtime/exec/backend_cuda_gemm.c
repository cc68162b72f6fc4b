/* The CUDA backend's GEMMs through cuBLASLt: a plan (descriptors,
 * layouts and the heuristic's algorithm) per shape, kept by the backend,
 * and the call with or without the plan's epilogue. See backend_cuda.c. */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_state.h"

/* ---- GEMMs through cuBLASLt ----
 *
 * The plan's GEMMs are row-major; cuBLASLt's are column-major. A row-major
 * C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so the call
 * swaps the operands: A' = B, B' = A, m' = n, n' = m, and each stored
 * matrix is read as its transpose without moving it. */

static cudaDataType dtype_of(ir_dtype dt)
{
    switch (dt) {
    case IR_F32: return CUDA_R_32F;
    case IR_F64: return CUDA_R_64F;
    case IR_BF16: return CUDA_R_16BF;
    case IR_F16: return CUDA_R_16F;
    default: kl_panic("no cuBLASLt type for %s", ir_dtype_name(dt));
    }
}

static int alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al)
        al /= 2;
    return al;
}

static cublasLtMatrixLayout_t layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride)
{
    cublasLtMatrixLayout_t l;
    LT(kl_cu_api.cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t bc = (int32_t)batch;
        LT(kl_cu_api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        LT(kl_cu_api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return l;
}

/* The epilogue's descriptor attributes (runtime/exec/cuda_lt.h): the kind,
 * then the bias and aux pointers and aux's leading dimension, which are
 * set again before each call (the heuristic reads their alignment). */
static cublasLtEpilogue_t lt_epilogue_of(kl_lt_epi e)
{
    switch (e) {
    case KL_LT_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case KL_LT_RELU: return CUBLASLT_EPILOGUE_RELU;
    case KL_LT_RELU_BIAS: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case KL_LT_GELU: return CUBLASLT_EPILOGUE_GELU;
    case KL_LT_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case KL_LT_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX;
    case KL_LT_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case KL_LT_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    case KL_LT_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

static void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const kl_lt_call *lc, const kl_epi_ptrs *x)
{
    if (lc->bias_read || lc->bias_written)
        LT(kl_cu_api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias, sizeof x->bias));
    if (lc->aux_read || lc->aux_written) {
        int64_t ld = lc->aux_ld;
        LT(kl_cu_api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x->aux, sizeof x->aux));
        LT(kl_cu_api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
}

/* The descriptors and algorithm of a shape, made on first use; with an
 * epilogue (x), ok is false when cuBLASLt has no algorithm for it. */
static gemm_plan *gemm_plan_of(cuda_backend *cb, const gemm_key *key, const kl_gemm *g, const kl_epi_ptrs *x)
{
    for (int i = 0; i < cb->gemms.n; i++)
        if (!memcmp(&cb->gemms.v[i].key, key, sizeof *key))
            return &cb->gemms.v[i];
    gemm_plan gp;
    memset(&gp, 0, sizeof gp);
    gp.key = *key;
    cudaDataType ab = dtype_of((ir_dtype)key->dtype), ct = dtype_of((ir_dtype)key->out_dtype);
    bool f64 = key->dtype == IR_F64;
    cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                  : key->dtype == IR_F32 && cb->o.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                       : CUBLAS_COMPUTE_32F;
    LT(kl_cu_api.cublasLtMatmulDescCreate(&gp.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
    cublasOperation_t opa = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(kl_cu_api.cublasLtMatmulDescSetAttribute(gp.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(kl_cu_api.cublasLtMatmulDescSetAttribute(gp.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (key->epi != KL_LT_NONE) {
        kl_lt_call lc = kl_lt_describe(g);
        uint32_t epi = (uint32_t)lt_epilogue_of((kl_lt_epi)key->epi);
        LT(kl_cu_api.cublasLtMatmulDescSetAttribute(gp.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        set_epilogue_pointers(gp.desc, &lc, x);
    }
    int64_t m = key->m, n = key->n, k = key->k;
    /* A' = B: stored [k, n] (or [n, k] when tb), read column-major. */
    gp.la = key->tb ? layout(ab, k, n, k, key->batch, key->stride_b) : layout(ab, n, k, n, key->batch, key->stride_b);
    /* B' = A: stored [m, k] (or [k, m] when ta). */
    gp.lb = key->ta ? layout(ab, m, k, m, key->batch, key->stride_a) : layout(ab, k, m, k, key->batch, key->stride_a);
    gp.lc = layout(ct, n, m, n, key->batch, key->stride_c);
    cublasLtMatmulPreference_t pref;
    LT(kl_cu_api.cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = cb->workspace_bytes;
    uint32_t al_a = (uint32_t)key->align_b, al_b = (uint32_t)key->align_a, al_c = (uint32_t)key->align_c;
    LT(kl_cu_api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(kl_cu_api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LT(kl_cu_api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LT(kl_cu_api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    LT(kl_cu_api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    /* cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED when no algorithm fits:
     * none found, not an error (an epilogue falls back to its kernel). */
    cublasStatus_t hs =
        kl_cu_api.cublasLtMatmulAlgoGetHeuristic(cb->lt, gp.desc, gp.la, gp.lb, gp.lc, gp.lc, pref, 1, &res, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED)
        found = 0;
    else
        kl_lt_check(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    LT(kl_cu_api.cublasLtMatmulPreferenceDestroy(pref));
    gp.ok = found >= 1;
    if (!gp.ok && key->epi != KL_LT_NONE) {
        if (!cb->o.quiet)
            kl_fprintf_escaped(stderr,
                               "kiln: cuBLASLt has no algorithm for epilogue %s on a %lld x %lld x %lld GEMM: the "
                               "generated kernel does it\n",
                               plan_lt_epi_name((kl_lt_epi)key->epi), (long long)m, (long long)n, (long long)k);
    } else if (!gp.ok) {
        /* The library's limit, not Kiln's invariant: an error, not a panic. */
        size_t v = kl_cu_api.cublasLtGetVersion(); /* major * 10000 + minor * 100 + patch */
        kl_error("cuBLASLt %zu.%zu.%zu has no algorithm for a %s x %s -> %s GEMM of %lld x %lld x %lld (batch %lld) on %s\n"
                 "---> check that this cuBLASLt supports the GPU, or train with --device cpu",
                 v / 10000, v / 100 % 100, v % 100, ir_dtype_name((ir_dtype)key->dtype), ir_dtype_name((ir_dtype)key->dtype),
                 ir_dtype_name((ir_dtype)key->out_dtype), (long long)m, (long long)n, (long long)k, (long long)key->batch,
                 cb->arch);
        exit(1);
    }
    if (gp.ok)
        gp.algo = res.algo;
    kl_vec_push(cb->gemms, gp);
    return &cb->gemms.v[cb->gemms.n - 1];
}

/* One cublasLtMatmul; with an epilogue (x not NULL), D is x->d, and
 * false (nothing done) when cuBLASLt has no algorithm for it. */
static bool run_gemm(cuda_backend *cb, const kl_gemm *g, int64_t batch, int64_t item, double beta, void *a, void *b, void *c,
                     const kl_epi_ptrs *x)
{
    size_t ea = (size_t)ir_dtype_size(g->dtype), ec = (size_t)ir_dtype_size(g->out_dtype);
    const char *pa = (const char *)a + (size_t)(g->off_a + item * g->stride_a) * ea;
    const char *pb = (const char *)b + (size_t)(g->off_b + item * g->stride_b) * ea;
    char *pc = (char *)c + (size_t)(g->off_c + (g->accumulate ? 0 : item * g->stride_c)) * ec;
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.dtype = g->dtype;
    key.out_dtype = g->out_dtype;
    key.ta = g->ta;
    key.tb = g->tb;
    key.m = g->m, key.n = g->n, key.k = g->k;
    key.batch = batch;
    if (batch > 1)
        key.stride_a = g->stride_a, key.stride_b = g->stride_b, key.stride_c = g->stride_c;
    key.align_a = alignment(pa), key.align_b = alignment(pb), key.align_c = alignment(pc);
    key.beta_zero = beta == 0;
    void *pd = pc;
    if (x) {
        key.epi = g->epi.kind;
        key.align_bias = x->bias ? alignment(x->bias) : 0;
        key.align_aux = x->aux ? alignment(x->aux) : 0;
        pd = x->d;
        /* C and D share a layout and the alignment preference. */
        if (alignment(pd) < key.align_c)
            key.align_c = alignment(pd);
    }
    gemm_plan *gp = gemm_plan_of(cb, &key, g, x);
    if (!gp->ok)
        return false;
    if (x) {
        kl_lt_call lc = kl_lt_describe(g);
        set_epilogue_pointers(gp->desc, &lc, x);
    }
    double alpha_d = g->alpha, beta_d = beta;
    float alpha_f = (float)g->alpha, beta_f = (float)beta;
    bool f64 = g->dtype == IR_F64;
    LT(kl_cu_api.cublasLtMatmul(cb->lt, gp->desc, f64 ? (const void *)&alpha_d : (const void *)&alpha_f, pb, gp->la, pa, gp->lb,
                          f64 ? (const void *)&beta_d : (const void *)&beta_f, pc, gp->lc, pd, gp->lc, &gp->algo,
                          (void *)(uintptr_t)cb->workspace, cb->workspace_bytes, cb->compute));
    return true;
}

void kl_cuda_gemm(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c)
{
    cuda_backend *cb = cb_of(be);
    /* One strided-batched call when every operand advances; else one call
     * per item (shared operands, and accumulate: items sum into one C,
     * beta 1 after the first). */
    if (g->batch == 1 || (!g->accumulate && g->stride_a && g->stride_b && g->stride_c)) {
        run_gemm(cb, g, g->batch, 0, g->beta, a, b, c, NULL);
        return;
    }
    for (int64_t i = 0; i < g->batch; i++)
        run_gemm(cb, g, 1, i, g->accumulate && i > 0 ? 1.0 : g->beta, a, b, c, NULL);
}

/* The GEMM with its epilogue in cuBLASLt's store (plan/lt_epilogue.c
 * chose it; the plan's lt_epilogue steps only have batch 1): false, and
 * nothing done, when Lt epilogues are off or cuBLASLt has no algorithm
 * for this one; the caller then runs the GEMM and the epilogue kernel. */
bool kl_cuda_gemm_epilogue(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c, const kl_epi_ptrs *x)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->lt_epilogues || g->epi.kind == KL_LT_NONE || g->batch != 1)
        return false;
    return run_gemm(cb, g, 1, 0, g->beta, a, b, c, x);
}
