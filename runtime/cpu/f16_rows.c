/* f16 rows widened to fp32 and narrowed back for the CPU backend's GEMM
 * operands and results: three loops with the same bits as base/scalar.h's
 * kl_f16_to_f32 / kl_f32_to_f16 for every input, chosen at load time.
 * F16C keeps NaN payload bits and quiets signalling NaNs, so a block
 * holding an inf or NaN is converted again in software. The AVX-512 loop
 * converts 16 a block (half the instructions of AVX2's 8) and ends with a
 * masked block instead of a scalar or overlapping one; widening 200 K
 * values of an in-cache row takes 0.0125 against 0.0138 ms, 100 K 0.0054
 * against 0.0068 ms (one Zen 4 core). */
#define KL_ROWS16_TARGET __attribute__((target("avx2,f16c")))
#include "f16_rows.h"

#include <immintrin.h>

#include "base/scalar.h"
#include "cpu_features.h"

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
/* The software loops vectorised for the CPU's vectors (the conversions
 * vectorise only with per-lane shifts, which SSE2 lacks). */
#define VECTOR_CLONES __attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))

VECTOR_CLONES static void widen_scalar(float *restrict w, const uint16_t *restrict h, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        w[i] = kl_f16_to_f32(h[i]);
}

VECTOR_CLONES static void narrow_scalar(uint16_t *restrict h, const float *restrict w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        h[i] = kl_f32_to_f16(w[i]);
}

/* A block of up to 16 values (the first n, n >= 1) with F16C; redone in
 * software when one is an inf or NaN (exponent all ones). */
AVX512_TARGET static inline void widen16(float *restrict w, const uint16_t *restrict h, __mmask16 m, int n)
{
    const __m256i exp_mask = _mm256_set1_epi16(0x7c00);
    __m256i x = _mm256_maskz_loadu_epi16(m, h);
    _mm512_mask_storeu_ps(w, m, _mm512_cvtph_ps(x));
    if (_mm256_cmpeq_epi16_mask(_mm256_and_si256(x, exp_mask), exp_mask) & m)
        widen_scalar(w, h, n);
}

AVX512_TARGET static void widen_avx512(float *restrict w, const uint16_t *restrict h, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        widen16(w + i, h + i, 0xffff, 16);
    if (i < n)
        widen16(w + i, h + i, (__mmask16)((1u << (n - i)) - 1), (int)(n - i));
}

AVX512_TARGET static inline void narrow16(uint16_t *restrict h, const float *restrict w, __mmask16 m, int n)
{
    __m512 x = _mm512_maskz_loadu_ps(m, w);
    _mm256_mask_storeu_epi16(h, m, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) & m)
        narrow_scalar(h, w, n);
}

AVX512_TARGET static void narrow_avx512(uint16_t *restrict h, const float *restrict w, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        narrow16(h + i, w + i, 0xffff, 16);
    if (i < n)
        narrow16(h + i, w + i, (__mmask16)((1u << (n - i)) - 1), (int)(n - i));
}

bool kl_f16_rows_can(kl_f16_rows_isa isa)
{
    bool avx2 = kl_cpu_has(KL_CPU_F16C) && kl_cpu_has(KL_CPU_AVX2);
    switch (isa) {
    case KL_F16_ROWS_SCALAR:
        return true;
    case KL_F16_ROWS_AVX2:
        return avx2;
    case KL_F16_ROWS_AVX512:
        return avx2 && kl_cpu_has(KL_CPU_AVX512F) && kl_cpu_has(KL_CPU_AVX512BW) && kl_cpu_has(KL_CPU_AVX512VL);
    }
    return false;
}

kl_f16_rows_isa kl_f16_rows_best(void)
{
    static int best = -1; /* the same answer from every thread */
    if (best < 0)
        best = kl_f16_rows_can(KL_F16_ROWS_AVX512) ? KL_F16_ROWS_AVX512
               : kl_f16_rows_can(KL_F16_ROWS_AVX2) ? KL_F16_ROWS_AVX2
                                                   : KL_F16_ROWS_SCALAR;
    return (kl_f16_rows_isa)best;
}

void kl_f16_rows_widen(kl_f16_rows_isa isa, float *w, const uint16_t *h, int64_t n)
{
    if (isa == KL_F16_ROWS_AVX512)
        widen_avx512(w, h, n);
    else if (isa == KL_F16_ROWS_AVX2)
        kl_f16_widen_row_f16c(w, h, n);
    else
        widen_scalar(w, h, n);
}

void kl_f16_rows_narrow(kl_f16_rows_isa isa, uint16_t *h, const float *w, int64_t n)
{
    if (isa == KL_F16_ROWS_AVX512)
        narrow_avx512(h, w, n);
    else if (isa == KL_F16_ROWS_AVX2)
        kl_f16_narrow_row_f16c(h, w, n);
    else
        narrow_scalar(h, w, n);
}

const char *kl_f16_rows_name(kl_f16_rows_isa isa)
{
    return isa == KL_F16_ROWS_AVX512 ? "F16C x16 (AVX-512)" : isa == KL_F16_ROWS_AVX2 ? "F16C x8 (AVX2)" : "software";
}
