/* f16 rows widened to fp32 and narrowed back for the CPU backend's GEMM
 * operands and results (runtime/exec/backend_cpu.c kl_cpu_f16_widen):
 * software conversions, F16C 8 at a time (AVX2) or F16C 16 at a time
 * (AVX-512), every one with base/scalar.h's bits, chosen at load time. */
#ifndef KL_RUNTIME_CPU_F16_ROWS_H
#define KL_RUNTIME_CPU_F16_ROWS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { KL_F16_ROWS_SCALAR, KL_F16_ROWS_AVX2, KL_F16_ROWS_AVX512 } kl_f16_rows_isa;

/* The fastest loop this CPU can run. */
kl_f16_rows_isa kl_f16_rows_best(void);
/* Whether this CPU can run isa's loop. */
bool kl_f16_rows_can(kl_f16_rows_isa isa);
/* n f16 values to fp32 and back with isa's loop (one the CPU can run:
 * kl_f16_rows_can). */
void kl_f16_rows_widen(kl_f16_rows_isa isa, float *w, const uint16_t *h, int64_t n);
void kl_f16_rows_narrow(kl_f16_rows_isa isa, uint16_t *h, const float *w, int64_t n);
const char *kl_f16_rows_name(kl_f16_rows_isa isa);

#endif
