/* f16 GEMMs on CPUs with AVX-512: fp16 operands, fp32 accumulation,
 * without an fp32 copy of the operands. OpenBLAS and oneDNN 2.6 have no
 * f16 GEMM, and widening whole operands to fp32 for their sgemm costs a
 * pass over memory per operand; here the operands are widened (F16C)
 * while they are packed into cache-sized blocks, which every GEMM does
 * anyway, and an 8 x 48 fp32 micro-kernel multiplies the packed blocks.
 * On CPUs with AMX-BF16 the operands are split exactly into bf16 parts
 * instead, and the tile unit sums the same exact products (gemm16.c).
 *
 * Results do not depend on the thread count, nor on C's other sizes:
 * each element of C sums its products in an order set by K alone
 * whichever thread computes it. They differ from the widened sgemm's,
 * and the AMX kernel's from the FMA kernel's, in the last bits (another
 * summation order), as any two GEMM libraries do. */
#ifndef KILN_RUNTIME_GEMM16_H
#define KILN_RUNTIME_GEMM16_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/plan.h"

/* Scratch that persists between GEMMs (owned by the CPU backend): a
 * packed block of A, one of B and fp32 sums of C, per thread. */
typedef struct kl_gemm16_ws {
    bool amx; /* on the tile unit (kl_gemm16_amx_supported), else FMAs */
    int threads;
    float **pack; /* per thread */
    size_t *len;  /* floats in pack[t] */
} kl_gemm16_ws;

/* Whether this CPU runs the kernel (AVX-512 F, BW and VL, and F16C). */
bool kl_gemm16_supported(void);

/* Whether this CPU and OS run the AMX variant: AMX-TILE and AMX-BF16,
 * and (Linux) the tile registers granted to this process (asked for
 * on the first call). f16 operands split into bf16 parts exactly, so
 * the sums are of the same exact products (gemm16.c). */
bool kl_gemm16_amx_supported(void);

/* Whether kl_gemm16 can take g: f16 (or bf16) operands, a result of
 * their dtype or fp32, K > 0, and not a batch summed into a 16-bit C
 * (which must stay wide across the items). Any size: each element of C
 * sums its products in an order that depends on K alone (not on m, n,
 * the thread count, nor, on the tile unit, on whether C or C^T is
 * computed). */
bool kl_gemm16_takes(const kl_gemm *g);

/* Whether the kernel (on the tile unit when amx) is faster than the
 * widened path (operands widened to fp32 for the fp32 library) for g's
 * shape: what KILN_F16_GEMM=auto asks before it hands a GEMM that
 * kl_gemm16_takes to it (gemm16.c says what was measured). */
bool kl_gemm16_pays(const kl_gemm *g, bool amx);

/* The same for a bf16 GEMM against oneDNN's bf16 matmul, where Kiln's
 * kernel is preferred for bf16 on this CPU (kl_gemm16_bf16_preferred):
 * every shape but the small ones. */
bool kl_gemm16_pays_bf16(const kl_gemm *g);

/* Whether this CPU runs bf16 GEMMs faster on Kiln's FMA kernel than on
 * oneDNN's bf16 matmul (gemm16.c says what was measured). */
bool kl_gemm16_bf16_preferred(void);

/* C = alpha op(A) op(B) + beta C for each batch item (g's offsets and
 * strides), with up to `threads` OpenMP threads. Call only where
 * kl_gemm16_supported() and kl_gemm16_takes(g). */
void kl_gemm16(kl_gemm16_ws *ws, int threads, const kl_gemm *g, const void *a, const void *b, void *c);

void kl_gemm16_ws_free(kl_gemm16_ws *ws);

#endif
