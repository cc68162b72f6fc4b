/* cuBLASLt's view of a GEMM step's epilogue (plan.h, kl_gemm.epi),
 * shared by the CUDA backend, which passes it through the matmul
 * descriptor's attributes, and the emulation harness, which applies the
 * same description on the host (tests/cuda/lt_emu.h), so a wrong axis
 * here shows in ctest without a GPU.
 *
 * The plan's GEMMs are row-major and cuBLASLt's column-major: the backend
 * computes D^T = B^T A^T (backend_cuda.c), so cuBLASLt's D has the plan's
 * n rows and m columns, leading dimension n. A bias along the plan's
 * columns (one per output feature) is one per row of cuBLASLt's D, which
 * is how CUBLASLT_EPILOGUE_*BIAS broadcasts it ("bias vector length must
 * match matrix D rows count"); the bias gradient (BGRAD) sums each row of
 * D over its columns. */
#ifndef KILN_CUDA_LT_H
#define KILN_CUDA_LT_H

#include "plan/plan.h"

typedef struct kl_lt_call {
    kl_lt_epi epi;
    int64_t rows, cols, ld; /* cuBLASLt's D: column-major, rows x cols */
    int64_t bias_len;       /* a bias element per row of D */
    int64_t aux_ld;         /* GELU's operand, laid out as D */
    bool bias_read, bias_written, aux_read, aux_written;
} kl_lt_call;

static inline kl_lt_call kl_lt_describe(const kl_gemm *g)
{
    kl_lt_epi e = g->epi.kind;
    kl_lt_call c = {.epi = e, .rows = g->n, .cols = g->m, .ld = g->n, .bias_len = g->n, .aux_ld = g->n};
    c.bias_read = e == KL_LT_BIAS || e == KL_LT_RELU_BIAS || e == KL_LT_GELU_BIAS || e == KL_LT_GELU_AUX_BIAS;
    c.bias_written = e == KL_LT_DGELU_BGRAD;
    c.aux_written = e == KL_LT_GELU_AUX || e == KL_LT_GELU_AUX_BIAS;
    c.aux_read = e == KL_LT_DGELU || e == KL_LT_DGELU_BGRAD;
    return c;
}

#endif
