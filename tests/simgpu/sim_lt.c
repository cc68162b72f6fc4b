/* The simulated device's cuBLASLt: the calls Kiln makes, with cuBLASLt's
 * documented semantics. Matrices are column-major (CUBLASLT_ORDER_COL,
 * the only order accepted); a layout describes the matrix as stored, and
 * TRANSA/TRANSB read it transposed; strided batches; compute in f32 (f64
 * for CUBLAS_COMPUTE_64F), with operands rounded to TF32 for
 * CUBLAS_COMPUTE_32F_FAST_TF32 and bf16/f16 operands widened; D =
 * epilogue(alpha op(A) op(B) + beta C), C not read when beta is 0, one
 * rounding on store. Epilogues: BIAS (one element per row of D), RELU,
 * GELU (tanh form), GELU_AUX (the pre-activation stored in aux, whose
 * leading dimension must be a multiple of 8 and at least D's rows),
 * DGELU (D times GELU's derivative at aux) and DGELU_BGRAD (also the bias
 * gradient: each row of D summed over its columns). The heuristic has no
 * algorithm (CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt answers) for an
 * epilogue on a batched call or an aux leading dimension it refuses. The
 * call runs on the given stream's worker. */
#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KL_SCALAR_HALVES_ONLY 1
#include "base/scalar.h"
#include "sim.h"

struct cublasLtContext {
    int magic;
};

typedef struct lt_desc {
    cublasComputeType_t compute;
    cudaDataType scale;
    int32_t ta, tb;
    uint32_t epi;
    const void *bias;
    void *aux;
    int64_t aux_ld;
} lt_desc;

typedef struct lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld, stride;
    int32_t batch, order;
} lt_layout;

typedef struct lt_pref {
    uint64_t workspace;
} lt_pref;

#define HANDLE_MAGIC 0x4c74

SIM_EXPORT size_t cublasLtGetVersion(void)
{
    return CUBLAS_VERSION;
}

SIM_EXPORT const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

SIM_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    SIM_FAULT(cublasStatus_t, "cublasLtCreate");
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!sim_dev)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = calloc(1, sizeof **h);
    (*h)->magic = HANDLE_MAGIC;
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!h || h->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- descriptors ---- */

SIM_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatmulDescCreate");
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ok = (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32) ? scale == CUDA_R_32F
              : compute == CUBLAS_COMPUTE_64F                                             ? scale == CUDA_R_64F
                                                                                          : false;
    if (!ok)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    lt_desc *x = calloc(1, sizeof *x);
    x->compute = compute;
    x->scale = scale;
    x->epi = CUBLASLT_EPILOGUE_DEFAULT;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

#define SET(field, type)                                                                                               \
    do {                                                                                                               \
        if (size != sizeof(type))                                                                                      \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                        \
        memcpy(&(field), buf, sizeof(type));                                                                           \
    } while (0)

SIM_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                        const void *buf, size_t size)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatmulDescSetAttribute");
    lt_desc *x = (lt_desc *)d;
    if (!x || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: SET(x->ta, int32_t); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: SET(x->tb, int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: SET(x->epi, uint32_t); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: SET(x->bias, void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: SET(x->aux, void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: SET(x->aux_ld, int64_t); break;
    default: return CUBLAS_STATUS_INVALID_VALUE; /* Kiln sets no other */
    }
    if ((x->ta != CUBLAS_OP_N && x->ta != CUBLAS_OP_T) || (x->tb != CUBLAS_OP_N && x->tb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

static int type_size(cudaDataType t)
{
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: return 0;
    }
}

SIM_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                                    uint64_t cols, int64_t ld)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatrixLayoutCreate");
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!type_size(t))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ld < (int64_t)(rows ? rows : 1))
        return CUBLAS_STATUS_INVALID_VALUE; /* column-major: ld >= rows */
    lt_layout *x = calloc(1, sizeof *x);
    *x = (lt_layout){t, rows, cols, ld, 0, 1, CUBLASLT_ORDER_COL};
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                          const void *buf, size_t size)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatrixLayoutSetAttribute");
    lt_layout *x = (lt_layout *)l;
    if (!x || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: SET(x->batch, int32_t); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: SET(x->stride, int64_t); break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: SET(x->order, int32_t); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (x->batch < 1 || x->order != CUBLASLT_ORDER_COL)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatmulPreferenceCreate");
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    *p = (cublasLtMatmulPreference_t)calloc(1, sizeof(lt_pref));
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

SIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                              cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                              size_t size)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatmulPreferenceSetAttribute");
    lt_pref *x = (lt_pref *)p;
    uint32_t al;
    if (!x || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: SET(x->workspace, uint64_t); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: SET(al, uint32_t); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the problem ---- */

static bool epi_known(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU ||
           e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

static bool epi_aux(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

/* Shapes agree: op(A) is D's rows x k, op(B) k x D's columns; 0, or
 * CUBLAS_STATUS_INVALID_VALUE. */
static cublasStatus_t check_shapes(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c,
                                   const lt_layout *dl, uint64_t *k)
{
    uint64_t am = d->ta ? a->cols : a->rows, ak = d->ta ? a->rows : a->cols;
    uint64_t bk = d->tb ? b->cols : b->rows, bn = d->tb ? b->rows : b->cols;
    if (am != dl->rows || bn != dl->cols || ak != bk || c->rows != dl->rows || c->cols != dl->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a->type != b->type || c->type != dl->type || a->batch != dl->batch || b->batch != dl->batch ||
        c->batch != dl->batch)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool f64 = d->compute == CUBLAS_COMPUTE_64F;
    if (f64 != (a->type == CUDA_R_64F) || (f64 && dl->type != CUDA_R_64F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    *k = ak;
    return CUBLAS_STATUS_SUCCESS;
}

/* KILN_SIMGPU_LT_NO_ALGORITHM=epilogue: no algorithm for any GEMM with an
 * epilogue, as cuBLASLt answers for shapes and alignments it cannot fuse
 * (the caller's fallback is then taken on every such GEMM); =all: for no
 * GEMM at all, as a cuBLASLt that does not support the device. */
static bool no_algorithms(bool epilogue)
{
    const char *v = getenv("KILN_SIMGPU_LT_NO_ALGORITHM");
    return v && (!strcmp(v, "all") || (epilogue && !strcmp(v, "epilogue")));
}

static bool has_algorithm(const lt_desc *d, const lt_layout *dl)
{
    if (no_algorithms(d->epi != CUBLASLT_EPILOGUE_DEFAULT))
        return false;
    if (!epi_known(d->epi))
        return false;
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && (dl->batch > 1 || d->compute == CUBLAS_COMPUTE_64F))
        return false;
    if (epi_aux(d->epi) && (d->aux_ld % 8 || d->aux_ld < (int64_t)dl->rows))
        return false;
    return true;
}

SIM_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                        cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                        cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                                        cublasLtMatmulPreference_t pref, int requested,
                                                        cublasLtMatmulHeuristicResult_t *res, int *found)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatmulAlgoGetHeuristic");
    if (!h || h->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !la || !lb || !lc || !ld || !pref || requested <= 0 || !res || !found)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t k;
    cublasStatus_t s = check_shapes((lt_desc *)desc, (lt_layout *)la, (lt_layout *)lb, (lt_layout *)lc,
                                    (lt_layout *)ld, &k);
    *found = 0;
    if (s)
        return s;
    if (!has_algorithm((lt_desc *)desc, (lt_layout *)ld))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof *res);
    res->algo.data[0] = 0x5349; /* "SI": the simulator's one algorithm */
    res->workspaceSize = 0;
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the product ---- */

static float tf32(float x)
{
    /* Round to nearest (even) at 10 mantissa bits, as the tensor cores'
     * operand conversion. */
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

static double load(cudaDataType t, const void *p, size_t i)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_64F: return ((const double *)p)[i];
    case CUDA_R_16BF: return kl_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return kl_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void store(cudaDataType t, void *p, size_t i, double v)
{
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
    case CUDA_R_64F: ((double *)p)[i] = v; break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = kl_f32_to_bf16((float)v); break;
    default: ((uint16_t *)p)[i] = kl_f32_to_f16((float)v); break;
    }
}

static float gelu_t(float x)
{
    return tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
}

typedef struct mm_arg {
    lt_desc d;
    lt_layout a, b, c, dl;
    uint64_t k;
    double alpha, beta;
    const char *pa, *pb, *pc;
    char *pd;
} mm_arg;

/* op(M) of one batch item as a dense rows x k array, row by row (f64 when
 * computing in f64, else f32 values in doubles: one conversion each). */
static double *dense_op(const lt_layout *l, const char *p, bool trans, bool rows_of_op, uint64_t k, bool tf)
{
    /* rows_of_op: op(A) is (D rows) x k, read row i; for B, op(B) is k x
     * (D cols), and column j is kept contiguous. */
    uint64_t outer = rows_of_op ? (trans ? l->cols : l->rows) : (trans ? l->rows : l->cols);
    double *out = malloc(sizeof(double) * outer * k + 1);
    for (uint64_t i = 0; i < outer; i++)
        for (uint64_t x = 0; x < k; x++) {
            /* A: op(A)(i, x) = trans ? A[x + i ld] : A[i + x ld]; B: op(B)(x, j) = trans ? B[j + x ld] : B[x + j ld]. */
            size_t at = rows_of_op ? (trans ? x + i * (size_t)l->ld : i + x * (size_t)l->ld)
                                   : (trans ? i + x * (size_t)l->ld : x + i * (size_t)l->ld);
            double v = load(l->type, p, at);
            out[i * k + x] = tf ? tf32((float)v) : v;
        }
    return out;
}

/* The bytes a layout's batch items span. */
static size_t span(const lt_layout *l)
{
    size_t one = l->cols ? ((size_t)l->cols - 1) * (size_t)l->ld + l->rows : 0;
    return ((size_t)(l->batch - 1) * (size_t)l->stride + one) * (size_t)type_size(l->type);
}

static void run_matmul(void *p)
{
    mm_arg *m = p;
    const lt_desc *d = &m->d;
    bool f64 = d->compute == CUBLAS_COMPUTE_64F, tf = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    uint32_t e = d->epi;
    bool bias_in = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
                   e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool relu = e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS;
    bool gelu = e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
                e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool aux_out = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool aux_in = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    bool bgrad = e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    uint64_t rows = m->dl.rows, cols = m->dl.cols, k = m->k;
    size_t ea = (size_t)type_size(m->a.type), ec = (size_t)type_size(m->c.type), edl = (size_t)type_size(m->dl.type);
    double *sums = bgrad ? calloc(rows + 1, sizeof(double)) : NULL;
    /* The operands' accesses, for the sanitizer's cross-stream check. */
    sim_san_access("cublasLtMatmul", "operand A", m->pa, span(&m->a), false);
    sim_san_access("cublasLtMatmul", "operand B", m->pb, span(&m->b), false);
    if (m->beta != 0)
        sim_san_access("cublasLtMatmul", "operand C", m->pc, span(&m->c), false);
    size_t es = (size_t)type_size(m->dl.type), aux_bytes = ((cols - 1) * (size_t)d->aux_ld + rows) * es;
    if (bias_in || bgrad)
        sim_san_access("cublasLtMatmul", "the bias", d->bias, rows * es, bgrad);
    if (aux_in || aux_out)
        sim_san_access("cublasLtMatmul", "the aux matrix", d->aux, aux_bytes, aux_out);
    sim_san_access("cublasLtMatmul", "operand D", m->pd, span(&m->dl), true);
    for (int32_t item = 0; item < m->dl.batch; item++) {
        double *A = dense_op(&m->a, m->pa + (size_t)item * (size_t)m->a.stride * ea, d->ta, true, k, tf);
        double *B = dense_op(&m->b, m->pb + (size_t)item * (size_t)m->b.stride * ea, d->tb, false, k, tf);
        const char *C = m->pc + (size_t)item * (size_t)m->c.stride * ec;
        char *D = m->pd + (size_t)item * (size_t)m->dl.stride * edl;
        for (uint64_t j = 0; j < cols; j++)
            for (uint64_t i = 0; i < rows; i++) {
                double acc = 0;
                float accf = 0;
                for (uint64_t x = 0; x < k; x++) {
                    if (f64)
                        acc += A[i * k + x] * B[j * k + x];
                    else
                        accf += (float)A[i * k + x] * (float)B[j * k + x];
                }
                if (!f64)
                    acc = accf;
                double v = m->alpha * acc;
                if (m->beta != 0)
                    v += m->beta * load(m->c.type, C, i + j * (size_t)m->c.ld);
                if (!f64)
                    v = (float)v;
                if (bias_in)
                    v = (float)v + (float)load(m->dl.type, d->bias, i);
                if (aux_out)
                    store(m->dl.type, d->aux, i + j * (size_t)d->aux_ld, v);
                if (relu)
                    v = v > 0 ? v : 0;
                if (gelu) {
                    float x = (float)v;
                    v = 0.5f * x * (1 + gelu_t(x));
                }
                if (aux_in) {
                    float z = (float)load(m->dl.type, d->aux, i + j * (size_t)d->aux_ld), t = gelu_t(z);
                    v = (float)v *
                        (0.5f * (1 + t) + 0.5f * z * (1 - t * t) * 0.7978845608028654f * (1 + 3 * 0.044715f * z * z));
                }
                if (bgrad)
                    sums[i] += (float)v;
                store(m->dl.type, D, i + j * (size_t)m->dl.ld, v);
            }
        free(A);
        free(B);
    }
    if (bgrad)
        for (uint64_t i = 0; i < rows; i++)
            store(m->dl.type, (void *)d->bias, i, sums[i]);
    free(sums);
}

SIM_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                        cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb,
                                        const void *beta, const void *C, cublasLtMatrixLayout_t lc, void *D,
                                        cublasLtMatrixLayout_t ldd, const cublasLtMatmulAlgo_t *algo, void *ws,
                                        size_t ws_bytes, cudaStream_t stream)
{
    SIM_FAULT(cublasStatus_t, "cublasLtMatmul");
    (void)ws;
    (void)ws_bytes;
    if (!h || h->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !alpha || !beta || !A || !B || !C || !D || !la || !lb || !lc || !ldd)
        return CUBLAS_STATUS_INVALID_VALUE;
    mm_arg m = {*(lt_desc *)desc, *(lt_layout *)la, *(lt_layout *)lb, *(lt_layout *)lc, *(lt_layout *)ldd, 0, 0, 0,
                A, B, C, D};
    cublasStatus_t s = check_shapes(&m.d, &m.a, &m.b, &m.c, &m.dl, &m.k);
    if (s)
        return s;
    if (!has_algorithm(&m.d, &m.dl) || (algo && algo->data[0] != 0x5349))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    bool f64 = m.d.compute == CUBLAS_COMPUTE_64F;
    m.alpha = f64 ? *(const double *)alpha : *(const float *)alpha;
    m.beta = f64 ? *(const double *)beta : *(const float *)beta;
    /* D must be laid out as C (in place, or the same shape elsewhere). */
    if (m.c.ld != m.dl.ld || (C != D && m.c.stride != m.dl.stride))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* Every operand inside device memory: a wrong leading dimension or
     * stride reads past its buffer, which a GPU may not notice. */
    const char *what = !sim_mem_check("cublasLtMatmul", "operand A", A, span(&m.a))                    ? "A"
                       : !sim_mem_check("cublasLtMatmul", "operand B", B, span(&m.b))                  ? "B"
                       : (m.beta != 0 && !sim_mem_check("cublasLtMatmul", "operand C", C, span(&m.c))) ? "C"
                       : !sim_mem_check("cublasLtMatmul", "operand D", D, span(&m.dl))                 ? "D"
                                                                                                       : NULL;
    if (what) {
        sim_say("cublasLtMatmul: operand %s (%llu x %llu, ld %lld, batch %d) is not inside one device allocation",
                what, (unsigned long long)(what[0] == 'A' ? m.a.rows : what[0] == 'B' ? m.b.rows : m.dl.rows),
                (unsigned long long)(what[0] == 'A' ? m.a.cols : what[0] == 'B' ? m.b.cols : m.dl.cols),
                (long long)(what[0] == 'A' ? m.a.ld : what[0] == 'B' ? m.b.ld : m.dl.ld), m.dl.batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    uint32_t e = m.d.epi;
    size_t es = (size_t)type_size(m.dl.type);
    if ((e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD) &&
        !sim_mem_check("cublasLtMatmul", "the bias", m.d.bias, m.dl.rows * es)) {
        sim_say("cublasLtMatmul: the bias (%llu elements) is not inside one device allocation",
                (unsigned long long)m.dl.rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (epi_aux(e) && !sim_mem_check("cublasLtMatmul", "the aux matrix", m.d.aux,
                                     ((m.dl.cols - 1) * (size_t)m.d.aux_ld + m.dl.rows) * es)) {
        sim_say("cublasLtMatmul: the aux matrix (ld %lld) is not inside one device allocation", (long long)m.d.aux_ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return sim_enqueue(stream, run_matmul, &m, sizeof m) ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}
