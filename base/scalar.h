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

#include <math.h>
#include <stdint.h>
#include <string.h>

/* @text halves */
/* bf16 and f16 are stored as 16 bits; conversions round to nearest even.
 * No loops, and branches the compiler turns into selects, so that it
 * vectorises a kernel's loop of them (measured against branch-free
 * versions with masks, which vectorise a few more loops but slow every
 * scalar kernel down: the CNN's fp16 step was 1.4x slower with them, 1.4x
 * faster with these). */
static inline float kl_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t kl_f32_to_bf16(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float kl_f16_to_f32(uint16_t h)
{
    /* Exponent and mantissa moved to f32's places and rebiased (15 ->
     * 127; 31 -> 255 for inf and NaN). A subnormal m * 2^-24 is read as
     * the normal 2^-14 * (1 + m / 1024) less 2^-14, exact in float
     * arithmetic on normal numbers (so flush-to-zero and
     * denormals-are-zero change nothing). Adds, compares and selects
     * only: a kernel's loop of these vectorises on any x86-64 vector
     * unit; the leading-zero count this replaces needed AVX512CD and
     * made the CNN's fp16 step 1.14x slower here. */
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, a = (uint32_t)(h & 0x7fffu) << 13, e = a & 0x0f800000u;
    uint32_t u = a + (112u << 23);
    if (e == 0x0f800000u) u += 112u << 23;
    float f;
    if (e == 0) { u += 1u << 23; memcpy(&f, &u, 4); f -= 0x1p-14f; memcpy(&u, &f, 4); }
    u |= s;
    memcpy(&f, &u, 4); return f;
}
/* f16 narrowing: a result that is subnormal (or zero) in f16 has the
 * mantissa |f| * 2^24 rounded to an integer, which float arithmetic does
 * exactly, to nearest even, by adding and taking away 2^23 (operands and
 * result are normal f32, so flush-to-zero and denormals-are-zero change
 * nothing; an f32 subnormal rounds to a signed zero either way). Fewer
 * vector instructions than the variable shifts and remainder this
 * replaces, and in the kernels that stay scalar the same predicted
 * branches (the f16 kernels of the CNN's step: 0.91x the time in total,
 * none slower; a version with the float path in the widening too, or
 * without branches, was slower in the scalar kernels). */
static inline uint16_t kl_f32_to_f16(float f)
{
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x47800000u) return (uint16_t)(s | (a > 0x7f800000u ? 0x7e00u : 0x7c00u)); /* NaN, or rounds to inf */
    if (a < 0x38800000u) {
        float af; memcpy(&af, &a, 4);
        return (uint16_t)(s | (uint32_t)(int32_t)((af * 16777216.0f + 8388608.0f) - 8388608.0f));
    }
    /* Rebias 127 -> 15 (0xc8000000 is -(112 << 23)) and round the 13
     * dropped bits to nearest even; a carry into the exponent is right,
     * up to inf from 65520 on. */
    return (uint16_t)(s | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13));
}
/* @end */

/* @text keys16 */
/* 16-bit floats compared, maximised and selected in their own bits, for
 * kernels whose stored values are their loads' (max pooling and its
 * gradient: codegen/print_expr.c print_bits16), so that f16, whose
 * widening and narrowing are a dozen instructions each in software, pays
 * neither. A key orders as the float does: sign and magnitude made two's
 * complement (-0 just below +0, which the float calls equal: a maximum
 * of the two is +0 either way round), every NaN of either sign the one
 * key above +inf, as kl_max keeps a NaN of either operand. Back from a
 * key: the float's bits, 0x7fff (a quiet NaN in f16 and bf16) for a
 * NaN. Integer selects, shifts and xors only: they vectorise. */
static inline int32_t kl_f16_key(uint32_t h) { int32_t s = (int16_t)h; return (int32_t)(h & 0x7fffu) > 0x7c00 ? 0x7fff : s ^ ((s >> 15) & 0x7fff); }
static inline int32_t kl_bf16_key(uint32_t h) { int32_t s = (int16_t)h; return (int32_t)(h & 0x7fffu) > 0x7f80 ? 0x7fff : s ^ ((s >> 15) & 0x7fff); }
static inline int32_t kl_kmax(int32_t a, int32_t b) { return a > b ? a : b; }
static inline uint16_t kl_unkey16(int32_t k) { return (uint16_t)(k ^ ((k >> 15) & 0x7fff)); }
/* a == b as floats: the same bits and not NaN, or two zeros. */
static inline int kl_f16_eq(uint32_t a, uint32_t b) { return ((a == b) & ((a & 0x7fffu) <= 0x7c00u)) | (((a | b) & 0x7fffu) == 0); }
static inline int kl_bf16_eq(uint32_t a, uint32_t b) { return ((a == b) & ((a & 0x7fffu) <= 0x7f80u)) | (((a | b) & 0x7fffu) == 0); }
/* c ? a : b on bits, without a branch (c is 0 or 1). */
static inline uint32_t kl_sel16(int c, uint32_t a, uint32_t b) { return b ^ ((a ^ b) & (uint32_t)-c); }
/* @end */
/* @text rows16 */
/* Rows of f16 to f32 and back with F16C, 8 at a time: the same bits as
 * kl_f16_to_f32 and kl_f32_to_f16 for every input but NaN, with or
 * without flush-to-zero (F16C keeps NaN payload bits and quiets
 * signalling NaNs, so a block with an inf or NaN is done again by the
 * scalar conversions; unit.halves checks every float and every 16-bit
 * pattern). Defined where the compiler targets AVX2 and F16C (the
 * kernels, built for the machine) or where KL_ROWS16_TARGET names the
 * target attribute to build them with (the CPU backend, which chooses at
 * load time). */
#if !defined(KL_ROWS16_TARGET) && defined(__F16C__) && defined(__AVX2__)
#define KL_ROWS16_TARGET
#endif
#ifdef KL_ROWS16_TARGET
#include <immintrin.h>
KL_ROWS16_TARGET static inline void kl_f16_widen8_f16c(float *restrict w, const uint16_t *restrict h)
{
    __m128i x = _mm_loadu_si128((const __m128i *)h);
    _mm256_storeu_ps(w, _mm256_cvtph_ps(x));
    const __m128i exp_mask = _mm_set1_epi16(0x7c00);
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(x, exp_mask), exp_mask)))
        for (int j = 0; j < 8; j++)
            w[j] = kl_f16_to_f32(h[j]);
}
KL_ROWS16_TARGET static inline void kl_f16_narrow8_f16c(uint16_t *restrict h, const float *restrict w)
{
    __m256 x = _mm256_loadu_ps(w);
    _mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
        for (int j = 0; j < 8; j++)
            h[j] = kl_f32_to_f16(w[j]);
}
#ifdef __AVX512F__
/* 16 at a time where the target has AVX-512 (the kernels on such a CPU):
 * the same conversions, half the blocks. */
static inline void kl_f16_widen16_f16c(float *restrict w, const uint16_t *restrict h)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)h);
    _mm512_storeu_ps(w, _mm512_cvtph_ps(x));
    const __m256i exp_mask = _mm256_set1_epi16(0x7c00);
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(x, exp_mask), exp_mask)))
        for (int j = 0; j < 16; j++)
            w[j] = kl_f16_to_f32(h[j]);
}
static inline void kl_f16_narrow16_f16c(uint16_t *restrict h, const float *restrict w)
{
    __m512 x = _mm512_loadu_ps(w);
    _mm256_storeu_si256((__m256i *)h, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
        for (int j = 0; j < 16; j++)
            h[j] = kl_f32_to_f16(w[j]);
}
#define KL_ROWS16_WIDE 16
#else
#define KL_ROWS16_WIDE 8
#endif
/* Rows of 8 or more end with a block that overlaps the one before
 * (the same values written again); shorter ones convert one at a time,
 * inf and NaN in software. */
KL_ROWS16_TARGET static inline void kl_f16_widen_row_f16c(float *restrict w, const uint16_t *restrict h, int64_t n)
{
    if (n < 8) {
        for (int64_t i = 0; i < n; i++)
            w[i] = (h[i] & 0x7c00u) == 0x7c00u ? kl_f16_to_f32(h[i]) : _cvtsh_ss(h[i]);
        return;
    }
    int64_t i = 0;
#if KL_ROWS16_WIDE == 16
    for (; i + 16 <= n; i += 16)
        kl_f16_widen16_f16c(w + i, h + i);
#endif
    for (; i + 8 <= n; i += 8)
        kl_f16_widen8_f16c(w + i, h + i);
    if (n % 8)
        kl_f16_widen8_f16c(w + n - 8, h + n - 8);
}
KL_ROWS16_TARGET static inline void kl_f16_narrow_row_f16c(uint16_t *restrict h, const float *restrict w, int64_t n)
{
    if (n < 8) {
        for (int64_t i = 0; i < n; i++)
            h[i] = w[i] != w[i] ? kl_f32_to_f16(w[i]) : (uint16_t)_cvtss_sh(w[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        return;
    }
    int64_t i = 0;
#if KL_ROWS16_WIDE == 16
    for (; i + 16 <= n; i += 16)
        kl_f16_narrow16_f16c(h + i, w + i);
#endif
    for (; i + 8 <= n; i += 8)
        kl_f16_narrow8_f16c(h + i, w + i);
    if (n % 8)
        kl_f16_narrow8_f16c(h + n - 8, w + n - 8);
}
#endif
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
/* @text vecmath */
/* The transcendentals of the CPU kernels come from glibc's vector math
 * library, libmvec: declared here as OpenMP SIMD functions (glibc's
 * math.h declares them so only under -ffast-math, which the kernels do
 * not use), a loop of expf, logf, powf, tanhf, erff, expm1f or log1pf
 * (and their f64 forms) vectorises into calls of their vector variants,
 * chosen by the kernels' target (-march): _ZGVeN16v_tanhf where it has
 * AVX-512, _ZGVdN8v_ with AVX2, _ZGVbN4v_ with SSE only. -lm brings
 * libmvec in (glibc's libm.so names it). The sigmoid is kl_sigmoid's
 * expf form, the normal density 0.3989 expf(-x^2 / 2). Chosen by measurement
 * against SLEEF 3.5.1 and the hand-written polynomials this replaces
 * (docs/internals/vector-math.md); each function's error in ulp against
 * the f64 reference is checked over the whole float line by unit.vmath.
 * C kernels only: the CUDA prelude keeps CUDA's functions. Other CPUs
 * and older glibc (the f32 tanh, erf, expm1 and log1p variants are
 * glibc 2.35's) keep scalar calls of the same functions. */
#if defined(__x86_64__) && defined(_OPENMP) && defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 22)
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double pow(double, double);
#endif
#if __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float expm1f(float);
#pragma omp declare simd notinbranch
float log1pf(float);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
double erf(double);
#pragma omp declare simd notinbranch
double expm1(double);
#pragma omp declare simd notinbranch
double log1p(double);
#endif
#endif
/* The sigmoid from exp(-|x|), which cannot overflow: 1 / (1 + t) for
 * x >= 0, t / (1 + t) below (1 / (1 + exp(-x)) is 0 from x = -88.7 on,
 * where the sigmoid is still 2.9e-39: unit.vmath). Both sides computed,
 * then selected, so that the loop vectorises. NaN stays NaN. */
static inline float kl_sigmoid(float x)
{
    float t = expf(-fabsf(x)), s = 1.0f / (1.0f + t), r = t * s;
    return x >= 0.0f ? s : r;
}
static inline double kl_sigmoid_d(double x)
{
    double t = exp(-fabs(x)), s = 1.0 / (1.0 + t), r = t * s;
    return x >= 0.0 ? s : r;
}
/* @end */
/* exp of non-positive values for the runtime's own C
 * (runtime/cpu/cpu_attn.c's softmax, built without the kernels' -march),
 * in code gcc vectorises on any target. Selects are bitwise (kl_sel): a
 * float select there becomes a branch, since a floating-point compare
 * may trap. Integer and float operations only, no loops. Accuracy,
 * checked against double by tests/fusion/vecmath_check.c: within 1.5 ulp
 * of exp down to -87, 0 below. */
static inline float kl_sel(int32_t m, float a, float b)
{
    union { float f; int32_t i; } ua = {a}, ub = {b}, r;
    r.i = (ua.i & m) | (ub.i & ~m);
    return r.f;
}
static inline int32_t kl_mask(int c) { return -(int32_t)c; }
/* exp(x) for x <= 0, Cephes' expf: x = n ln 2 + r (ln 2 in two parts),
 * a degree-6 polynomial in r, times 2^n made from the exponent bits; 0
 * below -87 (2^-126, the smallest normal float, is exp(-87.3)). NaN
 * stays NaN. */
static inline float kl_exp_nonpos(float x)
{
    int32_t low = kl_mask(x < -87.0f), nan = kl_mask(x != x);
    float c = kl_sel(low | nan, -87.0f, x);
    float n = (float)(int32_t)(c * 1.44269504088896341f - 0.5f);
    float r = c - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    union { int32_t i; float f; } s = {.i = ((int32_t)n + 127) * 8388608};
    return kl_sel(nan, x, kl_sel(low, 0.0f, y * s.f));
}
#endif

#endif
