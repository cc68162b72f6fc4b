/* bf16 GEMMs on the CPU through oneDNN's matmul: bf16 operands, fp32
 * accumulation, with the CPU's bf16 dot-product instructions
 * (AVX512_BF16, AMX) where it has them.
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

/* oneDNN when it is usable for bf16 GEMMs on this CPU; else NULL, with
 * why (for the start-up line and for --bf16-gemm onednn's error). what
 * (NULL allowed) gets "oneDNN 2.6.3 (avx512_core_bf16)". */
kl_dnnl *kl_dnnl_open(char *why, size_t why_len, char *what, size_t what_len);
/* C = alpha op(A) op(B) + beta C for a bf16 GEMM (any batch, strides,
 * accumulation). */
void kl_dnnl_gemm(kl_dnnl *d, const kl_gemm *g, const void *a, const void *b, void *c);
void kl_dnnl_close(kl_dnnl *d);

#endif
