/* Scalar helpers that every target shares: bf16/f16 conversions (round to
 * nearest even, NaN stays NaN), the counter-based RNG and the defined
 * float-to-integer conversion.
 *
 * This is the one source of their text. The runtime includes it; the CUDA
 * emulation (tests/cuda/emu.h) builds its __float2bfloat16_rn and friends
 * on the conversions; and the generated kernels carry the same lines: the
 * build cuts the regions between the text markers out of this file into C
 * string literals (codegen/CMake: scalar_text.h), which the C prelude
 * (codegen/emit_c.c) embeds verbatim and the CUDA prelude
 * (codegen/emit_cuda.c) embeds respelled for CUDA ("static inline" ->
 * "__device__ __forceinline__", int64_t -> long long, uint64_t ->
 * unsigned long long). So the four cannot drift. Inside the markers keep
 * to that vocabulary: no other headers' macros (NVRTC has none). */
#ifndef KILN_BASE_SCALAR_H
#define KILN_BASE_SCALAR_H

#include <stdint.h>
#include <string.h>

/* @text halves */
/* bf16 and f16 are stored as 16 bits; conversions round to nearest even.
 * Branch-free (every case computed, one selected), so that a kernel's
 * loop of them vectorises with the CPU's integer and float vector
 * instructions; exact for every input, NaN, subnormals and under the
 * CPU backend's flush-to-zero (the float steps never see a subnormal). */
static inline float kl_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t kl_f32_to_bf16(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r); /* NaN stays NaN */
}
static inline float kl_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t normal = s | ((e + 112u) << 23) | (m << 13), special = s | 0x7f800000u | (m << 13);
    float sub = (float)(int32_t)m * 5.9604644775390625e-8f; /* m * 2^-24: exact, and 0 for m = 0 */
    uint32_t subnormal; memcpy(&subnormal, &sub, 4);
    /* Masks rather than ?: (which gcc leaves as branches here). */
    uint32_t is_sub = 0u - (uint32_t)(e == 0u), is_special = 0u - (uint32_t)(e == 31u);
    uint32_t u = (is_sub & (s | subnormal)) | (is_special & special) | (~(is_sub | is_special) & normal);
    float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t kl_f32_to_f16(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* Below 2^-14 (f16 subnormal or zero): adding 0.5 leaves the value's
     * multiple of 2^-24 in the low mantissa bits, rounded to nearest even
     * by the float addition itself. 2^-25 and below round to 0 (an f32
     * subnormal, read as 0 under flush-to-zero, gives 0 either way). */
    float abs_f; memcpy(&abs_f, &a, 4);
    float biased = (a < 0x38800000u ? abs_f : 0.0f) + 0.5f;
    uint32_t sub; memcpy(&sub, &biased, 4);
    sub -= 0x3f000000u;
    uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 */
    uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    uint32_t o = a > 0x7f800000u ? 0x7e00u : a >= 0x477ff000u ? 0x7c00u /* rounds to inf */
               : a < 0x38800000u ? sub : normal;
    return (uint16_t)(s | o);
}
/* @end */

/* The emulation leaves out the rest: the CUDA program it runs brings its
 * own (CUDA-spelled) copy of these lines. */
#ifndef KL_SCALAR_HALVES_ONLY
/* Counter-based RNG: kl_rand is uniform in [0, 1) from (seed, step, salt,
 * index), the same stream on every backend and thread count. */
/* @text rng */
static inline uint64_t kl_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull; x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull; return x ^ (x >> 31);
}
static inline float kl_rand(uint64_t seed, int64_t step, uint64_t salt, uint64_t index)
{
    uint64_t x = kl_mix(kl_mix(kl_mix(seed) ^ (uint64_t)step) ^ salt) ^ index;
    return (float)(kl_mix(x) >> 40) * (1.0f / 16777216.0f);
}
/* @end */
/* @text ftoi */
/* Float to integer: toward zero, NaN gives 0 and values beyond int64's
 * range saturate (as the GPU's cvt.rzi does), without C's undefined
 * behaviour; narrower integer stores then keep the low bits. */
static inline int64_t kl_ftoi(float x) { return x != x ? 0 : x >= 9223372036854775808.0f ? 9223372036854775807LL : x < -9223372036854775808.0f ? -9223372036854775807LL - 1 : (int64_t)x; }
static inline int64_t kl_ftoi_d(double x) { return x != x ? 0 : x >= 9223372036854775808.0 ? 9223372036854775807LL : x < -9223372036854775808.0 ? -9223372036854775807LL - 1 : (int64_t)x; }
/* @end */
#endif

#endif
