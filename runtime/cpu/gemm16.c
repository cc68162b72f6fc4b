/* f16 GEMMs with fp32 accumulation on AVX-512 (gemm16.h).
 *
 * The classic blocked GEMM. Each thread takes whole strips of C's
 * columns (or, where columns share out badly, of its rows) and computes
 * its part in blocks of up to NC_MAX columns, then of MC rows, then K in
 * blocks of KC: a KC x nc block of B is packed into strips of NR
 * columns (once per block of columns when K is one block), an MC x KC
 * block of A into strips of MR rows, and the micro-kernel multiplies one
 * strip of A by one strip of B into an MR x NR tile of fp32 sums (24 zmm
 * registers). Packing widens f16 to fp32 with F16C; an operand stored
 * along K (A not transposed, B transposed) is transposed 16 x 16 in
 * registers on the way and fetches its next block of K into L2
 * meanwhile. A strip of B (KC x NR, 36 kB) stays in L1 while the strips
 * of A (KC x MR) go past it; a block of A (MC x KC, 144 kB) stays in
 * L2. A tile waits for its next block of K in the thread's sums (MC x
 * nc floats); after its last block it goes from the registers to C:
 * times alpha, plus beta times the old C, rounded to f16 where C is
 * with base/scalar.h's conversions' bits. */
#define KL_ROWS16_TARGET __attribute__((target("avx2,f16c")))
#include "cpu_features.h"
#include "gemm16.h"

#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/scalar.h"
#include "base/support.h"

#define G16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,fma")))

enum { MR = 8, NR = 48, KC = 192, MC = 192, NC_MAX = 16 * NR };
/* Rows of B read ahead of the one being packed (memory's latency). */
#define PREFETCH_ROWS 4

/* One batch item, row-major: A is m x k (k x m when ta), B is k x n
 * (n x k when tb), C is m x n. */
typedef struct g16 {
    const uint16_t *a, *b;
    void *c;
    bool ta, tb, c16;
    bool bf; /* operands (and a 16-bit C) bf16, else f16 */
    int64_t m, n, k, lda, ldb;
    float alpha, beta;
    /* On the tile unit, the GEMM whose C this one's transposes (C^T =
     * op(B)^T op(A)^T, where that packs cheaper); NULL: C itself. */
    const struct g16 *t;
} g16;

bool kl_gemm16_supported(void)
{
    return kl_cpu_has(KL_CPU_AVX512F) && kl_cpu_has(KL_CPU_AVX512BW) && kl_cpu_has(KL_CPU_AVX512VL) &&
           kl_cpu_has(KL_CPU_F16C) && kl_cpu_has(KL_CPU_FMA);
}

bool kl_gemm16_takes(const kl_gemm *g)
{
    return (g->dtype == IR_F16 || g->dtype == IR_BF16) && (g->out_dtype == g->dtype || g->out_dtype == IR_F32) &&
           g->k > 0 && !(g->accumulate && g->batch > 1 && g->out_dtype != IR_F32);
}

/* GEMMs under this many multiply-adds (per batch item) stay widened. */
#define MIN_MACS (1 << 18)
/* The FMA kernel pays from an operand or result of this many elements. */
#define FMA_MIN_ELEMS (1 << 21)

bool kl_gemm16_pays(const kl_gemm *g, bool amx)
{
    /* Small: under MR rows or 16 columns most of each tile is padding,
     * and under MIN_MACS the packing costs more than widening (the MLP's
     * 128 x 10 x 128 GEMMs: widened 29-38 GFLOP/s, the FMA kernel 16-21
     * on an AMD EPYC Zen 4; the tile unit 32-63 against 57-86 on a Xeon
     * with AMX). */
    if (g->m < MR || g->n < 16 || g->m * g->n * g->k < MIN_MACS)
        return false;
    if (amx)
        return true;
    /* Without the tile unit the FMA kernel runs at about the speed of
     * an fp32 sgemm's micro-kernel, and oneDNN's is faster (Zen 4, one
     * thread: 128 x 256 x 784 widened 100-106 GFLOP/s against 92-95),
     * so widening pays while the fp32 copies stay in cache (128 x 128 x
     * 3136, operands of 0.4M elements: 91-101 against 81-83); the kernel,
     * which widens while it packs, wins where an operand or C is so big
     * that its copy goes to memory (the CNN's 288 x 25088 x 64, C of
     * 7.2M elements: 89-91 against 66-73). */
    int64_t mk = g->m * g->k, kn = g->k * g->n, mn = g->m * g->n;
    int64_t big = mk > kn ? mk : kn;
    return (big > mn ? big : mn) >= FMA_MIN_ELEMS;
}

bool kl_gemm16_pays_bf16(const kl_gemm *g)
{
    return g->m >= MR && g->n >= 16 && g->m * g->n * g->k >= MIN_MACS;
}

/* bf16 against oneDNN 2.6's matmul (brgemm on AVX512_BF16): on an
 * Intel Xeon without AMX (family 6 model 207, AMX not exposed), one
 * thread, every GEMM of the examples' plans (kiln bench --gemms), the
 * kernel ran 151-159 GFLOP/s against oneDNN's 105-106: such a core issues
 * two 512-bit FMAs a cycle but one VDPBF16PS, so bf16's dot products
 * double nothing and oneDNN's reordering costs. On AMD Zen 4 the
 * FMAs are half as wide and oneDNN's bf16 ran 1.4-2.5x its sgemm
 * (docs/results.md), and on the tile unit oneDNN runs 492: there oneDNN
 * stays. */
bool kl_gemm16_bf16_preferred(void)
{
    return kl_gemm16_supported() && kl_cpu_has(KL_CPU_INTEL) && !kl_gemm16_amx_supported();
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
/* The low `count` bits (0 to 16) of a load mask. */
static uint32_t low_bits(int64_t count) { return count <= 0 ? 0 : count >= 16 ? 0xffffu : (1u << count) - 1; }

/* 16 (or 8) 16-bit values widened to fp32, exactly: f16 through F16C,
 * bf16 by moving its bits to the top of each lane. */
G16_TARGET static inline __attribute__((always_inline)) __m512 widen16(bool bf, __m256i h)
{
    return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}
G16_TARGET static inline __attribute__((always_inline)) __m256 widen8(bool bf, __m128i h)
{
    return bf ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
}

/* r[q] lane j <- r[j] lane q: pairs interleaved, then 4 x 4 blocks
 * within 128-bit lanes, then the lanes themselves. */
G16_TARGET static inline __attribute__((always_inline)) void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4g + c], 128-bit lane L: rows 4g..4g+3 at column 4L + c */
    for (int g = 0; g < 4; g++) {
        __m512 lo01 = t[4 * g], hi01 = t[4 * g + 1], lo23 = t[4 * g + 2], hi23 = t[4 * g + 3];
        u[4 * g + 0] = _mm512_shuffle_ps(lo01, lo23, 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(lo01, lo23, 0xee);
        u[4 * g + 2] = _mm512_shuffle_ps(hi01, hi23, 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(hi01, hi23, 0xee);
    }
    for (int c = 0; c < 4; c++) {
        __m512 v = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), w = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), w2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(v, v2, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v, v2, 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(w, w2, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(w, w2, 0xdd);
    }
}

/* `rows` rows (up to 16, the rest zero) of `w` f16 values (up to 16)
 * from src, ld apart, widened and transposed: r[q] holds column q. The
 * same rows `ahead` values on (the next block of K; 0: none) are
 * fetched into L2 meanwhile: rows far apart defeat the hardware's
 * prefetcher. */
G16_TARGET static void load_transposed(__m512 r[16], bool bf, const uint16_t *src, int64_t ld, int64_t rows,
                                       int64_t w, int64_t ahead)
{
    __mmask16 mask = (__mmask16)low_bits(w);
    for (int j = 0; j < 16; j++) {
        r[j] = j < rows ? widen16(bf, _mm256_maskz_loadu_epi16(mask, src + j * ld)) : _mm512_setzero_ps();
        if (ahead && j < rows)
            _mm_prefetch((const char *)(src + j * ld + ahead), _MM_HINT_T1);
    }
    transpose16(r);
}

/* Rows [i0, i0 + mc) and K [p0, p0 + kc) of A into strips of MR rows:
 * dst[s kc MR + p MR + r] = A(i0 + s MR + r, p0 + p), zero past m. */
G16_TARGET static void pack_a(const g16 *g, float *restrict dst, int64_t i0, int64_t mc, int64_t p0, int64_t kc)
{
    int64_t strips = (mc + MR - 1) / MR;
    if (g->ta) { /* A stored k x m: a strip's values at one p are adjacent */
        for (int64_t s = 0; s < strips; s++) {
            __mmask16 mask = (__mmask16)low_bits(min64(MR, mc - s * MR));
            const uint16_t *src = g->a + p0 * g->lda + i0 + s * MR;
            float *d = dst + s * kc * MR;
            for (int64_t p = 0; p < kc; p++)
                _mm256_store_ps(d + p * MR, widen8(g->bf, _mm_maskz_loadu_epi16(mask, src + p * g->lda)));
        }
        return;
    }
    /* A stored m x k: two strips (16 rows) at a time, 16 values of K */
    for (int64_t s = 0; s < strips; s += 2) {
        int64_t rows = min64(2 * MR, mc - s * MR);
        const uint16_t *src = g->a + (i0 + s * MR) * g->lda + p0;
        float *d0 = dst + s * kc * MR, *d1 = d0 + kc * MR;
        for (int64_t p = 0; p < kc; p += 16) {
            __m512 r[16];
            int64_t w = min64(16, kc - p);
            load_transposed(r, g->bf, src + p, g->lda, rows, w, p0 + KC < g->k ? KC : 0);
            for (int64_t q = 0; q < w; q++) {
                _mm256_store_ps(d0 + (p + q) * MR, _mm512_castps512_ps256(r[q]));
                if (rows > MR)
                    _mm256_store_ps(d1 + (p + q) * MR,
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r[q]), 1)));
            }
        }
    }
}

/* Columns [j0, j0 + nc) and K [p0, p0 + kc) of B into strips of NR
 * columns: dst[t kc NR + p NR + c] = B(p0 + p, j0 + t NR + c), zero
 * past the block. */
G16_TARGET static void pack_b(const g16 *g, float *restrict dst, int64_t j0, int64_t nc, int64_t p0, int64_t kc)
{
    int64_t strips = (nc + NR - 1) / NR;
    if (!g->tb) { /* B stored k x n: each row of the block in turn, read in order */
        int64_t full = nc / NR, rest = nc - full * NR;
        __mmask16 m0 = (__mmask16)low_bits(rest), m1 = (__mmask16)low_bits(rest - 16),
                  m2 = (__mmask16)low_bits(rest - 32);
        for (int64_t p = 0; p < kc; p++) {
            const uint16_t *row = g->b + (p0 + p) * g->ldb + j0;
            /* the row PREFETCH_ROWS ahead, a line per 32 values */
            if (p + PREFETCH_ROWS < kc)
                for (int64_t c = 0; c < nc; c += 32)
                    _mm_prefetch((const char *)(row + PREFETCH_ROWS * g->ldb + c), _MM_HINT_T0);
            float *d = dst + p * NR;
            for (int64_t t = 0; t < full; t++, row += NR, d += kc * NR) {
                _mm512_store_ps(d, widen16(g->bf, _mm256_loadu_si256((const __m256i *)row)));
                _mm512_store_ps(d + 16, widen16(g->bf, _mm256_loadu_si256((const __m256i *)(row + 16))));
                _mm512_store_ps(d + 32, widen16(g->bf, _mm256_loadu_si256((const __m256i *)(row + 32))));
            }
            if (rest) {
                _mm512_store_ps(d, widen16(g->bf, _mm256_maskz_loadu_epi16(m0, row)));
                _mm512_store_ps(d + 16, widen16(g->bf, _mm256_maskz_loadu_epi16(m1, row + 16)));
                _mm512_store_ps(d + 32, widen16(g->bf, _mm256_maskz_loadu_epi16(m2, row + 32)));
            }
        }
        return;
    }
    /* B stored n x k: 16 columns at a time, transposed */
    for (int64_t t = 0; t < strips; t++) {
        int64_t cols = min64(NR, nc - t * NR);
        float *d = dst + t * kc * NR;
        for (int64_t c0 = 0; c0 < NR; c0 += 16) {
            int64_t rows = min64(16, cols - c0);
            if (rows <= 0) {
                for (int64_t p = 0; p < kc; p++)
                    _mm512_store_ps(d + p * NR + c0, _mm512_setzero_ps());
                continue;
            }
            const uint16_t *src = g->b + (j0 + t * NR + c0) * g->ldb + p0;
            for (int64_t p = 0; p < kc; p += 16) {
                __m512 r[16];
                int64_t w = min64(16, kc - p);
                load_transposed(r, g->bf, src + p, g->ldb, rows, w, p0 + KC < g->k ? KC : 0);
                for (int64_t q = 0; q < w; q++)
                    _mm512_store_ps(d + (p + q) * NR + c0, r[q]);
            }
        }
    }
}

/* Where a tile goes after its last block of K: rows x cols of C from
 * `at` (f16 or fp32 as g says), C's rows g->n apart. */
typedef struct tile_out {
    void *at;
    int rows, cols;
} tile_out;

/* 16 sums (the lanes `mask` keeps) to C at `at`: alpha v + beta C, as
 * sgemm computes it, rounded to f16 where C is with the bits of
 * kl_f32_to_f16 (F16C's differ for NaN only, which goes through the
 * scalar conversion; an f16 C is read with base/scalar.h's exact rows);
 * beta 0 never reads C. */
G16_TARGET static inline __attribute__((always_inline)) void store16(const g16 *g, __m512 v, void *at, __mmask16 mask)
{
    if (g->alpha != 1.0f)
        v = _mm512_mul_ps(_mm512_set1_ps(g->alpha), v);
    if (!g->c16) {
        if (g->beta != 0.0f)
            v = _mm512_fmadd_ps(_mm512_set1_ps(g->beta), _mm512_maskz_loadu_ps(mask, at), v);
        _mm512_mask_storeu_ps(at, mask, v);
        return;
    }
    uint16_t *h = at;
    if (g->bf) {
        /* bf16 with kl_f32_to_bf16's bits: to nearest even on the
         * integer bits (no flush of subnormals), NaN kept quiet. */
        if (g->beta != 0.0f)
            v = _mm512_fmadd_ps(_mm512_set1_ps(g->beta), widen16(true, _mm256_maskz_loadu_epi16(mask, h)), v);
        __m512i u = _mm512_castps_si512(v);
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16(h, mask, _mm512_cvtepi32_epi16(r));
        return;
    }
    if (g->beta != 0.0f) { /* mask keeps the low lanes: that many elements of C */
        float old[16];
        kl_f16_widen_row_f16c(old, h, __builtin_popcount(mask));
        v = _mm512_fmadd_ps(_mm512_set1_ps(g->beta), _mm512_maskz_loadu_ps(mask, old), v);
    }
    _mm256_mask_storeu_epi16(h, mask, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __mmask16 nan = _mm512_mask_cmp_ps_mask(mask, v, v, _CMP_UNORD_Q);
    if (nan) {
        float w[16];
        _mm512_storeu_ps(w, v);
        for (int j = 0; j < 16; j++)
            if (nan >> j & 1)
                h[j] = kl_f32_to_f16(w[j]);
    }
}

/* Sums over p < kc of a[p MR + r] b[p NR + j] for an MR x NR tile: 24
 * accumulators, 3 vectors of B and a broadcast of A in registers. They
 * start from zero (first: the first block of K) or from sums[r ld + j],
 * and go back there, or, after the last block of K (out), to C. */
G16_TARGET static void micro(const g16 *g, int64_t kc, const float *restrict a, const float *restrict b,
                             float *restrict sums, int64_t ld, bool first, const tile_out *out)
{
    __m512 c0[MR], c1[MR], c2[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        c0[r] = first ? _mm512_setzero_ps() : _mm512_load_ps(sums + r * ld);
        c1[r] = first ? _mm512_setzero_ps() : _mm512_load_ps(sums + r * ld + 16);
        c2[r] = first ? _mm512_setzero_ps() : _mm512_load_ps(sums + r * ld + 32);
    }
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16), b2 = _mm512_load_ps(b + 32);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            __m512 ar = _mm512_set1_ps(a[r]);
            c0[r] = _mm512_fmadd_ps(ar, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(ar, b1, c1[r]);
            c2[r] = _mm512_fmadd_ps(ar, b2, c2[r]);
        }
        a += MR;
        b += NR;
    }
    if (!out) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            _mm512_store_ps(sums + r * ld, c0[r]);
            _mm512_store_ps(sums + r * ld + 16, c1[r]);
            _mm512_store_ps(sums + r * ld + 32, c2[r]);
        }
        return;
    }
    __mmask16 m0 = (__mmask16)low_bits(out->cols), m1 = (__mmask16)low_bits(out->cols - 16),
              m2 = (__mmask16)low_bits(out->cols - 32);
    size_t es = g->c16 ? 2 : 4;
    char *row = out->at;
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r < out->rows) {
            store16(g, c0[r], row, m0);
            if (m1)
                store16(g, c1[r], row + 16 * es, m1);
            if (m2)
                store16(g, c2[r], row + 32 * es, m2);
        }
        row += (size_t)g->n * es;
    }
}

/* Columns of C per block: a whole number of strips, at most NC_MAX. */
static int64_t block_cols(int64_t cols)
{
    return min64(NC_MAX, round_up(cols, NR));
}

/* Floats of scratch a thread needs for `rows` rows and `cols` columns
 * of C: a block of A, a block of B, the fp32 sums of a block of C. */
static size_t scratch_floats(int64_t rows, int64_t cols)
{
    int64_t mp = min64(MC, round_up(rows, MR)), nc = block_cols(cols);
    return (size_t)(MC * KC + KC * nc + mp * nc);
}

/* The part of C in rows [i0, i1) and columns [j0, j1): blocks of
 * columns, then of rows, then of K, where a block of C's sums waits for
 * its next block of K (B is packed again for each block of rows unless
 * K is one block). */
G16_TARGET static void gemm_part(const g16 *g, float *scratch, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    int64_t ncb = block_cols(j1 - j0);
    float *ap = scratch, *bp = ap + MC * KC, *sums = bp + KC * ncb;
    bool one_k = g->k <= KC;
    for (int64_t jc = j0; jc < j1; jc += ncb) {
        int64_t nc = min64(ncb, j1 - jc);
        for (int64_t ic = i0; ic < i1; ic += MC) {
            int64_t mc = min64(MC, i1 - ic);
            for (int64_t pc = 0; pc < g->k; pc += KC) {
                int64_t kc = min64(KC, g->k - pc);
                if (!one_k || ic == i0)
                    pack_b(g, bp, jc, nc, pc, kc);
                pack_a(g, ap, ic, mc, pc, kc);
                for (int64_t t = 0; t * NR < nc; t++)
                    for (int64_t s = 0; s * MR < mc; s++) {
                        int64_t i = ic + s * MR, j = jc + t * NR;
                        tile_out out = {
                            .at = g->c16 ? (void *)((uint16_t *)g->c + i * g->n + j)
                                         : (void *)((float *)g->c + i * g->n + j),
                            .rows = (int)min64(MR, ic + mc - i),
                            .cols = (int)min64(NR, jc + nc - j),
                        };
                        micro(g, kc, ap + s * kc * MR, bp + t * kc * NR, sums + s * MR * ncb + t * NR, ncb, pc == 0,
                              pc + kc == g->k ? &out : NULL);
                    }
            }
        }
    }
}

/* ---- AMX: the same GEMMs on the CPU's bf16 tile unit ----
 *
 * An f16 value x (11 significant bits) is exactly hi + lo with hi = x
 * rounded to bf16 (8 bits, nearest even) and lo = x - hi (at most 3
 * bits): both bf16, both normal (bf16 has fp32's exponents). So
 * a b = ah bh + ah bl + al bh + al bl, each product exact in fp32, and
 * four TDPBF16PS (fp32 sums of bf16 products) per pair of tiles give
 * what the FMA kernel computes, exact products summed in fp32 (in
 * another order: the last bits differ). Packing splits the operands:
 * a block of A into strips of 16 rows, each 32 values of K a tile of
 * hi and one of lo (16 rows x 32 bf16); a block of B into strips of 16
 * columns, each 32 values of K a pair of tiles in the unit's pair
 * layout (row i: B(2i, c), B(2i + 1, c) for the 16 columns c). A block
 * of C (32 x 32 fp32) sums over a block of K in tiles 0-3, with A's and
 * B's hi and lo loaded into tiles 4-7 as they are needed (amx_micro),
 * while the vector units pack the next block (packer). Where C^T =
 * op(B)^T op(A)^T is computed instead (it packs cheaper), the products
 * go in the mirrored order, so an element's sum is the same either way
 * and depends on K alone.
 *
 * No part is subnormal (the smallest, 2^-24 times at most 2^-8, is
 * normal in bf16, products at least 2^-48; the unit flushes
 * subnormals). Inf or NaN in an operand makes lo NaN, so every sum
 * that meets one is NaN: a block of C with a NaN is computed again by
 * the FMA kernel (C not yet written), which gives IEEE's inf or NaN. */
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx2,f16c,fma")))

enum {
    AMX_KC = 384,  /* K per block: 12 tiles deep */
    AMX_MC = 320,  /* rows per block of A (20 strips) */
    AMX_NC = 256,  /* columns per block of B (16 strips) */
    TILE_PAIR = 1024, /* u16s of a hi tile and its lo tile */
};

/* hi and lo of 16 floats (f16 values), as fp32 bits whose low halves
 * are zero: hi rounded to nearest even on the bits (exact for finite
 * values, and no f16 rounds past bf16's range), lo = x - hi exactly. */
AMX_TARGET static inline __attribute__((always_inline)) void split(__m512 x, __m512i *hi, __m512i *lo)
{
    __m512i bits = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    *hi = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
    *lo = _mm512_castps_si512(_mm512_sub_ps(x, _mm512_castsi512_ps(*hi)));
}

/* w (up to 32, the rest zero) f16 values from src as 32 bf16 hi and
 * 32 lo, in order: lane i of each, as 32 bits, holds parts 2i (low
 * half) and 2i + 1. */
AMX_TARGET static inline __attribute__((always_inline)) void split_row32(const uint16_t *src, int64_t w, __m512i *hi,
                                                                         __m512i *lo)
{
    __m512 x0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)low_bits(w), src));
    __m512 x1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)low_bits(w - 16), src + 16));
    __m512i h0, l0, h1, l1;
    split(x0, &h0, &l0);
    split(x1, &h1, &l1);
    /* the high halves (the bf16s) of both, in order */
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                         25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    *hi = _mm512_permutex2var_epi16(h0, odd, h1);
    *lo = _mm512_permutex2var_epi16(l0, odd, l1);
}

/* w (up to 16) f16 values of two rows of K, src0 and src1 (NULL: zero),
 * as pairs: lane c holds the bf16 part of row 0's value c (low half)
 * and of row 1's. */
AMX_TARGET static inline __attribute__((always_inline)) void split_pairs(const uint16_t *src0, const uint16_t *src1,
                                                                         int64_t w, __m512i *hi, __m512i *lo)
{
    __mmask16 mask = (__mmask16)low_bits(w);
    __m512i h0, l0, h1, l1;
    split(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src0)), &h0, &l0);
    split(src1 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src1)) : _mm512_setzero_ps(), &h1, &l1);
    *hi = _mm512_or_si512(_mm512_srli_epi32(h0, 16), h1);
    *lo = _mm512_or_si512(_mm512_srli_epi32(l0, 16), l1);
}

/* 16 vectors of pairs transposed into the 16 rows of a hi (then lo) tile. */
AMX_TARGET static inline __attribute__((always_inline)) void store_transposed(uint16_t *tile, __m512i hi[16],
                                                                              __m512i lo[16])
{
    __m512 *h = (__m512 *)hi, *l = (__m512 *)lo;
    transpose16(h);
    transpose16(l);
    for (int r = 0; r < 16; r++) {
        _mm512_store_si512(tile + r * 32, _mm512_castps_si512(h[r]));
        _mm512_store_si512(tile + 512 + r * 32, _mm512_castps_si512(l[r]));
    }
}

/* Tiles of K per block of kc values. */
static int64_t tiles_k(int64_t kc) { return (kc + 31) / 32; }
/* Strips of 16 in a block of `len` rows of A or columns of B: an even
 * number (blocks of C are 32 x 32). */
static int64_t strips16(int64_t len) { return round_up((len + 15) / 16, 2); }

/* A's tile pair for rows [i, i + rows) (up to 16; the rest zero) and K
 * [p, p + kw) (up to 32): hi at tile[0..511], lo at tile[512..]. */
AMX_TARGET static void tile_a(const g16 *g, uint16_t *restrict tile, int64_t i, int64_t rows, int64_t p, int64_t kw)
{
    if (!g->ta) { /* A stored m x k: a tile row is 32 values of a row of A */
        for (int64_t r = 0; r < 16; r++) {
            __m512i hi = _mm512_setzero_si512(), lo = hi;
            if (r < rows)
                split_row32(g->a + (i + r) * g->lda + p, kw, &hi, &lo);
            _mm512_store_si512(tile + r * 32, hi);
            _mm512_store_si512(tile + 512 + r * 32, lo);
        }
        return;
    }
    /* A stored k x m: pairs of rows of K across 16 rows of A, transposed */
    __m512i hi[16], lo[16];
    for (int64_t q = 0; q < 16; q++) {
        const uint16_t *src = g->a + (p + 2 * q) * g->lda + i;
        if (2 * q < kw && rows > 0)
            split_pairs(src, 2 * q + 1 < kw ? src + g->lda : NULL, rows, &hi[q], &lo[q]);
        else
            hi[q] = lo[q] = _mm512_setzero_si512();
    }
    store_transposed(tile, hi, lo);
}

/* B's tile pair for columns [j, j + cols) (up to 16) and K [p, p + kw)
 * (up to 32), in pairs of rows of K: row q holds B(p + 2q, c) and
 * B(p + 2q + 1, c) for the 16 columns c. */
AMX_TARGET static void tile_b(const g16 *g, uint16_t *restrict tile, int64_t j, int64_t cols, int64_t p, int64_t kw)
{
    if (!g->tb) { /* B stored k x n: two rows of B per tile row */
        for (int64_t q = 0; q < 16; q++) {
            __m512i hi = _mm512_setzero_si512(), lo = hi;
            const uint16_t *row = g->b + (p + 2 * q) * g->ldb + j;
            if (2 * q < kw && cols > 0)
                split_pairs(row, 2 * q + 1 < kw ? row + g->ldb : NULL, cols, &hi, &lo);
            _mm512_store_si512(tile + q * 32, hi);
            _mm512_store_si512(tile + 512 + q * 32, lo);
        }
        return;
    }
    /* B stored n x k: 32 values of K of each of 16 columns, transposed */
    __m512i hi[16], lo[16];
    for (int64_t c = 0; c < 16; c++) {
        if (c < cols)
            split_row32(g->b + (j + c) * g->ldb + p, kw, &hi[c], &lo[c]);
        else
            hi[c] = lo[c] = _mm512_setzero_si512();
    }
    store_transposed(tile, hi, lo);
}

/* Packing one block of A (rows [r0, r0 + len), b false) or of B
 * (columns, b true), K [p0, p0 + kc), a tile pair at a time: strip s,
 * tile q of K at dst[(s nq + q) TILE_PAIR]. The tile unit works on one
 * block while the next is packed, a few tile pairs between its
 * products (amx_micro), so that the vector units pack while it
 * multiplies; `points` is how many times it offers, and the pairs
 * are shared over them. */
typedef struct packer {
    const g16 *g;
    uint16_t *dst;
    bool b;
    int64_t r0, len, p0, kc, nq, strips;
    int64_t done, total;   /* tile pairs */
    int64_t offered, points;
} packer;

static void packer_set(packer *pk, const g16 *g, uint16_t *dst, bool b, int64_t r0, int64_t len, int64_t p0,
                       int64_t kc)
{
    *pk = (packer){.g = g, .dst = dst, .b = b, .r0 = r0, .len = len, .p0 = p0, .kc = kc, .nq = tiles_k(kc),
                   .strips = strips16(len)};
    pk->total = pk->nq * pk->strips;
}

/* Tile pair u: K's tiles of one strip in turn, except B stored k x n,
 * whose strips go across each tile of K in turn (its rows are read in
 * order). */
AMX_TARGET static void pack_one(packer *pk, int64_t u)
{
    bool across = pk->b && !pk->g->tb;
    int64_t s = across ? u % pk->strips : u / pk->nq, q = across ? u / pk->strips : u % pk->nq;
    uint16_t *tile = pk->dst + (s * pk->nq + q) * TILE_PAIR;
    int64_t at = pk->r0 + s * 16, n = min64(16, pk->len - s * 16), p = pk->p0 + q * 32, kw = min64(32, pk->kc - q * 32);
    if (pk->b)
        tile_b(pk->g, tile, at, n, p, kw);
    else
        tile_a(pk->g, tile, at, n, p, kw);
}

/* The pairs due at this offer (all of them when points is 0). */
AMX_TARGET static void pack_some(packer *pk)
{
    if (pk->done >= pk->total)
        return;
    int64_t due = pk->points ? pk->total * ++pk->offered / pk->points : pk->total;
    for (; pk->done < due && pk->done < pk->total; pk->done++)
        pack_one(pk, pk->done);
}

/* The tile unit's configuration: tiles 0-7 all 16 rows of 64 bytes. */
typedef struct __attribute__((packed, aligned(64))) tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* C's rows [i, i + rows) and columns [j, j + cols) by the FMA kernel:
 * a block of C whose sums met an inf or NaN (module comment). */
G16_TARGET static void recompute(const g16 *g, int64_t i, int64_t rows, int64_t j, int64_t cols)
{
    float *scratch = NULL;
    if (posix_memalign((void **)&scratch, 64, scratch_floats(rows, cols) * sizeof(float)))
        kl_panic("out of memory allocating GEMM scratch");
    gemm_part(g, scratch, i, i + rows, j, j + cols);
    free(scratch);
}

/* A block of 32 x 32 sums (`sums`, rows 32 floats apart) to C's rows
 * [i, i + rows) and columns [j, j + cols), or computed again where
 * one is NaN. */
AMX_TARGET static void amx_out(const g16 *g, const float *sums, int64_t i, int64_t rows, int64_t j, int64_t cols)
{
    if (g->t) { /* the block transposed, to the C this one transposes */
        float tr[32 * 32] __attribute__((aligned(64)));
        for (int bi = 0; bi < 2; bi++)
            for (int bj = 0; bj < 2; bj++) {
                __m512 r[16];
                for (int q = 0; q < 16; q++)
                    r[q] = _mm512_load_ps(sums + (bi * 16 + q) * 32 + bj * 16);
                transpose16(r);
                for (int q = 0; q < 16; q++)
                    _mm512_store_ps(tr + (bj * 16 + q) * 32 + bi * 16, r[q]);
            }
        amx_out(g->t, tr, j, cols, i, rows);
        return;
    }
    __mmask16 m0 = (__mmask16)low_bits(cols), m1 = (__mmask16)low_bits(cols - 16), nan = 0;
    for (int64_t r = 0; r < rows; r++) {
        __m512 v0 = _mm512_load_ps(sums + r * 32), v1 = _mm512_load_ps(sums + r * 32 + 16);
        nan |= _mm512_mask_cmp_ps_mask(m0, v0, v0, _CMP_UNORD_Q) | _mm512_mask_cmp_ps_mask(m1, v1, v1, _CMP_UNORD_Q);
    }
    if (nan) {
        recompute(g, i, rows, j, cols);
        return;
    }
    size_t es = g->c16 ? 2 : 4;
    char *row = (char *)g->c + (size_t)(i * g->n + j) * es;
    for (int64_t r = 0; r < rows; r++, row += (size_t)g->n * es) {
        store16(g, _mm512_load_ps(sums + r * 32), row, m0);
        if (m1)
            store16(g, _mm512_load_ps(sums + r * 32 + 16), row + 16 * es, m1);
    }
}

/* Tiles 0-3 (a 32 x 32 block of C) += tiles 4, 5 (two strips of A) by
 * tiles 6, 7 (two strips of B). */
#define FOUR_PRODUCTS()          \
    do {                         \
        _tile_dpbf16ps(0, 4, 6); \
        _tile_dpbf16ps(1, 4, 7); \
        _tile_dpbf16ps(2, 5, 6); \
        _tile_dpbf16ps(3, 5, 7); \
    } while (0)

/* Sums of a 32 x 32 block of C (tiles 0, 1 / 2, 3) over nq tiles of K:
 * two strips of A at a (TILE_PAIR nq apart), two of B at b. Each tile
 * of K multiplies hi by hi, hi by lo, lo by lo, lo by hi, loading A's
 * and B's tiles into tiles 4-7 as they are needed (four independent
 * sums keep the unit busy). The sums start from zero (first) or from
 * `sums` (ld floats a row) and go back there, or (out) to C. */
AMX_TARGET static void amx_micro(const g16 *g, int64_t nq, const uint16_t *a, const uint16_t *b, float *sums,
                                 int64_t ld, bool first, const int64_t *out, packer *pa, packer *pb)
{
    if (first) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        _tile_loadd(0, sums, ld * 4);
        _tile_loadd(1, sums + 16, ld * 4);
        _tile_loadd(2, sums + 16 * ld, ld * 4);
        _tile_loadd(3, sums + 16 * ld + 16, ld * 4);
    }
    const uint16_t *a1 = a + nq * TILE_PAIR, *b1 = b + nq * TILE_PAIR;
    /* The four products of a tile of K in the order hh, hl, ll, lh (hl:
     * A's hi by B's lo); where this GEMM is another's transpose, A and B
     * are that one's B and A, and the order hh, lh, ll, hl gives that
     * one's order: an element's sum is the same whichever is computed. */
    bool t = g->t != NULL;
#define LOAD_A(at)                       \
    do {                                 \
        _tile_loadd(4, a + (at), 64);    \
        _tile_loadd(5, a1 + (at), 64);   \
    } while (0)
#define LOAD_B(at)                       \
    do {                                 \
        _tile_loadd(6, b + (at), 64);    \
        _tile_loadd(7, b1 + (at), 64);   \
    } while (0)
    for (int64_t q = 0; q < nq; q++) {
        int64_t hi = q * TILE_PAIR, lo = hi + 512;
        LOAD_A(hi);
        LOAD_B(hi);
        FOUR_PRODUCTS();
        pack_some(pa);
        if (t)
            LOAD_A(lo);
        else
            LOAD_B(lo);
        FOUR_PRODUCTS();
        pack_some(pb);
        if (t)
            LOAD_B(lo);
        else
            LOAD_A(lo);
        FOUR_PRODUCTS();
        pack_some(pa);
        if (t)
            LOAD_A(hi);
        else
            LOAD_B(hi);
        FOUR_PRODUCTS();
        pack_some(pb);
    }
#undef LOAD_A
#undef LOAD_B
    if (!out) {
        _tile_stored(0, sums, ld * 4);
        _tile_stored(1, sums + 16, ld * 4);
        _tile_stored(2, sums + 16 * ld, ld * 4);
        _tile_stored(3, sums + 16 * ld + 16, ld * 4);
        __asm__ volatile("" ::: "memory");
        return;
    }
    float block[32 * 32] __attribute__((aligned(64)));
    _tile_stored(0, block, 128);
    _tile_stored(1, block + 16, 128);
    _tile_stored(2, block + 16 * 32, 128);
    _tile_stored(3, block + 16 * 32 + 16, 128);
    __asm__ volatile("" ::: "memory"); /* the tile stores wrote block */
    amx_out(g, block, out[0], out[1], out[2], out[3]);
}

/* Whether g packs cheaper as C^T = op(B)^T op(A)^T: an operand stored
 * along K (A) or across it (B) packs straight, the other way it is
 * transposed on the way, which costs most; the transpose swaps them. */
static bool amx_transposes(const g16 *g)
{
    int64_t direct = (g->ta ? g->m * g->k : 0) + (g->tb ? g->n * g->k : 0);
    int64_t swapped = (g->tb ? 0 : g->n * g->k) + (g->ta ? 0 : g->m * g->k);
    return swapped < direct;
}

/* Columns per block, rows per block (whole blocks of 32 x 32), K per
 * block (K in equal blocks of whole tiles, at most AMX_KC). */
static int64_t amx_block_cols(int64_t cols) { return min64(AMX_NC, round_up(cols, 32)); }
static int64_t amx_block_rows(int64_t rows) { return min64(AMX_MC, round_up(rows, 32)); }
static int64_t amx_block_k(int64_t k)
{
    int64_t blocks = (k + AMX_KC - 1) / AMX_KC;
    return round_up((k + blocks - 1) / blocks, 32);
}

/* Floats of scratch for AMX over `rows` x `cols` of C: two packed
 * blocks of A and two of B (one multiplied while the next is packed;
 * 2 bytes each, hi and lo) and the sums of a block of C. */
static size_t amx_scratch_floats(int64_t rows, int64_t cols)
{
    int64_t mp = amx_block_rows(rows), nc = amx_block_cols(cols);
    return (size_t)(2 * mp * AMX_KC + 2 * nc * AMX_KC + mp * nc);
}

/* A block of C's part: columns [jc, jc + nc), rows [ic, ic + mc), K
 * [pc, pc + kc). */
typedef struct blk {
    int64_t jc, nc, ic, mc, pc, kc;
} blk;

/* gemm_part on the tile unit: blocks of columns, then of rows, then of
 * K, as gemm_part, each block's A and B packed while the tile unit
 * multiplies the block before (the first block's before it). B is
 * packed once per block of columns when K is one block, A once for the
 * part when rows and K are one block each. */
AMX_TARGET static void amx_part(const g16 *g, float *scratch, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    int64_t ncb = amx_block_cols(j1 - j0), mcb = amx_block_rows(i1 - i0), kcb = amx_block_k(g->k);
    uint16_t *abuf[2], *bbuf[2];
    abuf[0] = (uint16_t *)scratch;
    abuf[1] = abuf[0] + 2 * mcb * AMX_KC;
    bbuf[0] = abuf[1] + 2 * mcb * AMX_KC;
    bbuf[1] = bbuf[0] + 2 * ncb * AMX_KC;
    float *sums = (float *)(bbuf[1] + 2 * ncb * AMX_KC);
    bool one_k = g->k <= kcb, one_a = one_k && i1 - i0 <= mcb;
    int ab = 0, bb = 0; /* the buffers the current block's A and B are in */
    blk cur = {j0, min64(ncb, j1 - j0), i0, min64(mcb, i1 - i0), 0, min64(kcb, g->k)};
    packer pa, pb;
    packer_set(&pa, g, abuf[ab], false, cur.ic, cur.mc, cur.pc, cur.kc);
    packer_set(&pb, g, bbuf[bb], true, cur.jc, cur.nc, cur.pc, cur.kc);
    pack_some(&pa);
    pack_some(&pb);
    for (;;) {
        /* the next block, and which of its operands are new */
        blk nx = cur;
        nx.pc += kcb;
        if (nx.pc >= g->k) {
            nx.pc = 0;
            nx.ic += mcb;
            if (nx.ic >= i1) {
                nx.ic = i0;
                nx.jc += ncb;
            }
        }
        bool more = nx.jc < j1, new_a = more && !one_a, new_b = more && (!one_k || nx.ic == i0);
        nx.nc = min64(ncb, j1 - nx.jc);
        nx.mc = min64(mcb, i1 - nx.ic);
        nx.kc = min64(kcb, g->k - nx.pc);
        pa = (packer){0};
        pb = (packer){0};
        int64_t nq = tiles_k(cur.kc), points = 4 * nq * ((cur.mc + 31) / 32) * ((cur.nc + 31) / 32);
        if (new_a) {
            packer_set(&pa, g, abuf[!ab], false, nx.ic, nx.mc, nx.pc, nx.kc);
            pa.points = points / 2; /* offered at two of the four points */
        }
        if (new_b) {
            packer_set(&pb, g, bbuf[!bb], true, nx.jc, nx.nc, nx.pc, nx.kc);
            pb.points = points / 2;
        }
        __asm__ volatile("" ::: "memory"); /* the packs are read by tile loads */
        bool last = cur.pc + cur.kc == g->k;
        for (int64_t s = 0; s * 16 < cur.mc; s += 2)
            for (int64_t t = 0; t * 16 < cur.nc; t += 2) {
                int64_t out[4] = {cur.ic + s * 16, min64(32, cur.mc - s * 16), cur.jc + t * 16,
                                  min64(32, cur.nc - t * 16)};
                amx_micro(g, nq, abuf[ab] + s * nq * TILE_PAIR, bbuf[bb] + t * nq * TILE_PAIR,
                          sums + s * 16 * ncb + t * 16, ncb, cur.pc == 0, last ? out : NULL, &pa, &pb);
            }
        if (!more)
            break;
        pa.points = pb.points = 0; /* whatever is left */
        pack_some(&pa);
        pack_some(&pb);
        ab ^= new_a;
        bb ^= new_b;
        cur = nx;
    }
    _tile_release();
}

bool kl_gemm16_amx_supported(void)
{
    static int known; /* 0: not asked yet, 1: yes, -1: no */
    if (!known) {
        bool ok = kl_gemm16_supported() && kl_cpu_has(KL_CPU_AMX_TILE) && kl_cpu_has(KL_CPU_AMX_BF16);
#ifdef __linux__
        /* Linux hands out the tile registers' state on request
         * (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18). */
        unsigned long features = 0;
        ok = ok && syscall(SYS_arch_prctl, 0x1023, 18) == 0 && syscall(SYS_arch_prctl, 0x1022, &features) == 0 &&
             (features >> 18 & 1);
#else
        ok = false;
#endif
        known = ok ? 1 : -1;
    }
    return known > 0;
}

/* Thread `t` of `nt`'s part of C: whole strips of columns (col_unit
 * wide) where there are enough to go round, else whole strips of rows
 * (row_unit high). */
static void part_of(const g16 *g, int t, int nt, bool by_cols, int64_t row_unit, int64_t col_unit, int64_t part[4])
{
    int64_t unit = by_cols ? col_unit : row_unit, len = by_cols ? g->n : g->m;
    int64_t units = (len + unit - 1) / unit;
    int64_t lo = units * t / nt * unit, hi = units * (t + 1) / nt * unit;
    hi = min64(hi, len);
    part[0] = by_cols ? 0 : lo;
    part[1] = by_cols ? g->m : hi;
    part[2] = by_cols ? lo : 0;
    part[3] = by_cols ? hi : g->n;
}

static float *thread_scratch(kl_gemm16_ws *ws, int t, size_t floats)
{
    if (ws->len[t] < floats) {
        free(ws->pack[t]);
        void *p = NULL;
        if (posix_memalign(&p, 64, floats * sizeof(float)))
            kl_panic("out of memory allocating %zu bytes of GEMM scratch", floats * sizeof(float));
        ws->pack[t] = p;
        ws->len[t] = floats;
    }
    return ws->pack[t];
}

static void gemm_item(kl_gemm16_ws *ws, int threads, const g16 *g)
{
    /* C's units: blocks of 32 x 32 on the tile unit, else the FMA
     * kernel's MR x NR tiles. */
    bool amx = ws->amx && !g->bf;
    int64_t row_unit = amx ? 32 : MR, col_unit = amx ? 32 : NR;
    int64_t col_strips = (g->n + col_unit - 1) / col_unit, row_strips = (g->m + row_unit - 1) / row_unit;
    /* A thread per 2^20 multiply-adds at least, and no more than strips. */
    int64_t most = g->m * g->n * g->k >> 20;
    int nt = threads;
    nt = most < nt ? (int)(most < 1 ? 1 : most) : nt;
    /* Columns (each thread packs its own part of B, and all of A, the
     * smaller operand where C is wide) unless they share out badly, the
     * largest part over 1.2 times the mean (three strips on two threads:
     * 2 against 1.5), and rows share out better. */
    int64_t col_max = (col_strips + nt - 1) / nt, row_max = (row_strips + nt - 1) / nt;
    bool by_cols = 5 * col_max * nt <= 6 * col_strips || col_max * row_strips <= row_max * col_strips;
    int64_t strips = by_cols ? col_strips : row_strips;
    nt = strips < nt ? (int)strips : nt;
    int64_t parts[nt][4];
    for (int t = 0; t < nt; t++) {
        part_of(g, t, nt, by_cols, row_unit, col_unit, parts[t]);
        int64_t rows = parts[t][1] - parts[t][0], cols = parts[t][3] - parts[t][2];
        thread_scratch(ws, t, amx ? amx_scratch_floats(rows, cols) : scratch_floats(rows, cols));
    }
    void (*part)(const g16 *, float *, int64_t, int64_t, int64_t, int64_t) = amx ? amx_part : gemm_part;
    if (nt == 1) {
        part(g, ws->pack[0], 0, g->m, 0, g->n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num();
        if (parts[t][0] < parts[t][1] && parts[t][2] < parts[t][3])
            part(g, ws->pack[t], parts[t][0], parts[t][1], parts[t][2], parts[t][3]);
    }
}

void kl_gemm16(kl_gemm16_ws *ws, int threads, const kl_gemm *g, const void *a, const void *b, void *c)
{
    threads = threads < 1 ? 1 : threads;
    if (ws->threads < threads) {
        ws->pack = kl_xrealloc(ws->pack, sizeof *ws->pack * (size_t)threads);
        ws->len = kl_xrealloc(ws->len, sizeof *ws->len * (size_t)threads);
        for (int t = ws->threads; t < threads; t++) {
            ws->pack[t] = NULL;
            ws->len[t] = 0;
        }
        ws->threads = threads;
    }
    for (int64_t i = 0; i < g->batch; i++) {
        g16 item = {
            .a = (const uint16_t *)a + g->off_a + i * g->stride_a,
            .b = (const uint16_t *)b + g->off_b + i * g->stride_b,
            .ta = g->ta,
            .tb = g->tb,
            .c16 = g->out_dtype != IR_F32,
            .bf = g->dtype == IR_BF16,
            .m = g->m,
            .n = g->n,
            .k = g->k,
            .lda = g->ta ? g->m : g->k,
            .ldb = g->tb ? g->k : g->n,
            .alpha = (float)g->alpha,
            .beta = (float)(g->accumulate && i > 0 ? 1.0 : g->beta),
        };
        int64_t oc = g->off_c + (g->accumulate ? 0 : i * g->stride_c);
        item.c = item.c16 ? (void *)((uint16_t *)c + oc) : (void *)((float *)c + oc);
        if (ws->amx && !item.bf && amx_transposes(&item)) {
            g16 tr = item;
            tr.a = item.b, tr.b = item.a;
            tr.ta = !item.tb, tr.tb = !item.ta;
            tr.m = item.n, tr.n = item.m;
            tr.lda = item.ldb, tr.ldb = item.lda;
            tr.t = &item;
            gemm_item(ws, threads, &tr);
        } else
            gemm_item(ws, threads, &item);
    }
}

void kl_gemm16_ws_free(kl_gemm16_ws *ws)
{
    for (int t = 0; t < ws->threads; t++)
        free(ws->pack[t]);
    free(ws->pack);
    free(ws->len);
    *ws = (kl_gemm16_ws){0};
}
