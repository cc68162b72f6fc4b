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
 * No loops and no branches the compiler cannot turn into selects, so that
 * it vectorises a kernel's loop of them (fully branch-free versions, all
 * masks, were measured slower in the kernels that stay scalar). */
static inline float kl_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t kl_f32_to_bf16(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
/* f16: the subnormal cases go through float arithmetic that is exact
 * (m * 2^-24 widening; |f| * 2^24 rounded to an integer by adding and
 * taking away 2^23, to nearest even, narrowing), with operands and results
 * that are normal f32, so flush-to-zero and denormals-are-zero change
 * nothing (an f32 subnormal rounds to a signed zero either way). Every
 * case is computed and one is selected, with a mask where GCC would
 * otherwise sink the float multiply into a branch (a float operation that
 * may trap is not if-converted), so a kernel's loop of these vectorises:
 * about 40% fewer vector instructions than the integer code with
 * __builtin_clz and a variable-shift rounding this replaces, and 5-10x
 * faster f16 kernels (unit.halves checks every input bit for bit). */
static inline float kl_f16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)(h & 0x7fffu) << 13, e = u & 0x0f800000u, t;
    float f = (float)(int32_t)(h & 0x3ffu) * 5.9604644775390625e-08f; /* m * 2^-24 */
    memcpy(&t, &f, 4);
    uint32_t sub = 0u - (uint32_t)(e == 0);
    /* Rebias the exponent 15 -> 127, or 31 -> 255 for inf and NaN (the
     * payload kept as is). */
    u = (t & sub) | ((u + (e == 0x0f800000u ? 224u << 23 : 112u << 23)) & ~sub);
    u |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t kl_f32_to_f16(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    uint32_t small = a & (0u - (uint32_t)(a < 0x38800000u)); /* else 0: the int conversion stays in range */
    float af; memcpy(&af, &small, 4);
    uint32_t sub = (uint32_t)(int32_t)((af * 16777216.0f + 8388608.0f) - 8388608.0f);
    /* Normal: rebias 127 -> 15 (the 0xc8000000 is -(112 << 23)) and round
     * the 13 dropped bits to nearest even; a carry into the exponent is
     * right, up to inf from 65520 on. */
    uint32_t n = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    return (uint16_t)(s | (a >= 0x47800000u ? (a > 0x7f800000u ? 0x7e00u : 0x7c00u) : a < 0x38800000u ? sub : n));
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
