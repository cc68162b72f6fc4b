/* A host stand-in for cuBLASLt's GEMM epilogues (kernel_check --emulate):
 * each CUBLASLT_EPILOGUE_* the plan uses, as cuBLASLt documents it, on
 * cuBLASLt's column-major view of the call that the CUDA backend makes
 * (runtime/exec/cuda_lt.h's kl_lt_describe): D is rows x cols with leading
 * dimension ld, the bias has one element per row of D (BIAS adds it along
 * each column; BGRAD sums each row of D over its columns), aux is laid
 * out as D with its own leading dimension. The product arrives in D's
 * layout from the CPU backend (a row-major m x n product is the
 * column-major n x m one); the epilogue runs in f32, as cuBLASLt's does
 * for f32, bf16 and f16 outputs, and rounds once on store. GELU is the
 * tanh form, cuBLASLt's. */
#ifndef KILN_TESTS_CUDA_LT_EMU_H
#define KILN_TESTS_CUDA_LT_EMU_H

#include <math.h>

#include "runtime/exec/cuda_lt.h"
#include "runtime/exec/session.h"

static float lt_emu_gelu_t(float x)
{
    return tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
}

/* D (and aux, bias) from the product acc; every array of dtype dt. */
static void lt_emu_apply(const kl_lt_call *c, ir_dtype dt, const void *acc, void *d, void *bias, void *aux)
{
    kl_lt_epi e = c->epi;
    bool relu = e == KL_LT_RELU || e == KL_LT_RELU_BIAS;
    bool gelu = e == KL_LT_GELU || e == KL_LT_GELU_BIAS || e == KL_LT_GELU_AUX || e == KL_LT_GELU_AUX_BIAS;
    for (int64_t col = 0; col < c->cols; col++) {
        for (int64_t row = 0; row < c->rows; row++) {
            float x = (float)kl_load_as(dt, acc, col * c->ld + row);
            if (c->bias_read)
                x += (float)kl_load_as(dt, bias, row);
            if (c->aux_written)
                kl_store_as(dt, aux, col * c->aux_ld + row, x);
            if (relu)
                x = x > 0 ? x : 0;
            if (gelu)
                x = 0.5f * x * (1 + lt_emu_gelu_t(x));
            if (c->aux_read) {
                float z = (float)kl_load_as(dt, aux, col * c->aux_ld + row), t = lt_emu_gelu_t(z);
                x *= 0.5f * (1 + t) + 0.5f * z * (1 - t * t) * 0.7978845608028654f * (1 + 3 * 0.044715f * z * z);
            }
            kl_store_as(dt, d, col * c->ld + row, x);
        }
    }
    if (c->bias_written) {
        for (int64_t row = 0; row < c->bias_len; row++) {
            float s = 0;
            for (int64_t col = 0; col < c->cols; col++)
                s += (float)kl_load_as(dt, d, col * c->ld + row);
            kl_store_as(dt, bias, row, s);
        }
    }
}

#endif
