/* bf16 GEMMs on the CPU through oneDNN's matmul: bf16 operands, fp32
 * accumulation, with the CPU's bf16 dot-product instructions
 * (AVX512_BF16, AMX) where it has them; and fp32 GEMMs through oneDNN's
 * sgemm on AVX-512 CPUs, where it beat OpenBLAS 0.3.21's SkylakeX kernels
 * on every GEMM shape of the examples (1 thread, Xeon with AMX: 6-22%
 * alone, 15-20% of the GEMM time inside the GPT and CNN steps, README
 * "fp32 GEMMs"); elsewhere OpenBLAS (oneDNN's AVX2 sgemm not measured
 * against OpenBLAS's Haswell kernels).
 *
 * oneDNN (libdnnl.so.2) is opened with dlopen, so an executable starts and
 * trains where it is missing (today's path: operands widened to fp32 and
 * OpenBLAS's sgemm). The rule, not a timing: oneDNN for every bf16 GEMM
 * when the CPU has bf16 instructions (oneDNN's effective ISA is
 * avx512_core_bf16 or above), else the widening path; f16 GEMMs always
 * widen (oneDNN 2.6 has f16 matmul only on AVX512_FP16 CPUs). */
#ifndef KILN_RUNTIME_CPU_DNNL_H
#define KILN_RUNTIME_CPU_DNNL_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/plan.h"

typedef struct kl_dnnl kl_dnnl;

typedef enum kl_dnnl_use { KL_DNNL_BF16, KL_DNNL_F32 } kl_dnnl_use;

/* oneDNN when it is usable for this use on this CPU (BF16: bf16
 * instructions; F32: AVX-512); else NULL, with why (for the start-up line
 * and for --bf16-gemm/--fp32-gemm onednn's error). what (NULL allowed)
 * gets "oneDNN 2.6.3 (AVX512_BF16)" or "oneDNN 2.6.3 sgemm (AVX-512)". */
kl_dnnl *kl_dnnl_open(kl_dnnl_use use, char *why, size_t why_len, char *what, size_t what_len);
/* C = alpha op(A) op(B) + beta C for a bf16 GEMM (any batch, strides,
 * accumulation). */
void kl_dnnl_gemm(kl_dnnl *d, const kl_gemm *g, const void *a, const void *b, void *c);
/* One row-major fp32 GEMM, as cblas_sgemm's arguments (the CPU backend's
 * batch loop calls it per item), through dnnl_sgemm on a handle opened for
 * KL_DNNL_F32. */
void kl_dnnl_sgemm(kl_dnnl *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void kl_dnnl_close(kl_dnnl *d);

#endif
