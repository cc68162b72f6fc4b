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
#include "gemm16.h"

#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/scalar.h"
#include "base/support.h"

#define G16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,fma")))

enum { MR = 8, NR = 48, KC = 192, MC = 192, NC_MAX = 16 * NR };
/* GEMMs under this many multiply-adds stay on the widened path. */
#define MIN_MACS (1 << 18)
/* Rows of B read ahead of the one being packed (memory's latency). */
#define PREFETCH_ROWS 4

/* One batch item, row-major: A is m x k (k x m when ta), B is k x n
 * (n x k when tb), C is m x n. */
typedef struct g16 {
    const uint16_t *a, *b;
    void *c;
    bool ta, tb, c16;
    int64_t m, n, k, lda, ldb;
    float alpha, beta;
} g16;

bool kl_gemm16_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

bool kl_gemm16_takes(const kl_gemm *g)
{
    /* Under MR rows or 16 columns most of each tile would be padding
     * (a matrix-vector product: the widened sgemm does those better). */
    return g->dtype == IR_F16 && (g->out_dtype == IR_F16 || g->out_dtype == IR_F32) && g->m >= MR && g->n >= 16 &&
           g->k > 0 && g->m * g->n * g->k >= MIN_MACS && !(g->accumulate && g->batch > 1 && g->out_dtype != IR_F32);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
/* The low `count` bits (0 to 16) of a load mask. */
static uint32_t low_bits(int64_t count) { return count <= 0 ? 0 : count >= 16 ? 0xffffu : (1u << count) - 1; }

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
G16_TARGET static void load_transposed(__m512 r[16], const uint16_t *src, int64_t ld, int64_t rows, int64_t w,
                                       int64_t ahead)
{
    __mmask16 mask = (__mmask16)low_bits(w);
    for (int j = 0; j < 16; j++) {
        r[j] = j < rows ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src + j * ld)) : _mm512_setzero_ps();
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
                _mm256_store_ps(d + p * MR, _mm256_cvtph_ps(_mm_maskz_loadu_epi16(mask, src + p * g->lda)));
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
            load_transposed(r, src + p, g->lda, rows, w, p0 + KC < g->k ? KC : 0);
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
                _mm512_store_ps(d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)row)));
                _mm512_store_ps(d + 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 16))));
                _mm512_store_ps(d + 32, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 32))));
            }
            if (rest) {
                _mm512_store_ps(d, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, row)));
                _mm512_store_ps(d + 16, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, row + 16)));
                _mm512_store_ps(d + 32, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m2, row + 32)));
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
                load_transposed(r, src + p, g->ldb, rows, w, p0 + KC < g->k ? KC : 0);
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

/* Thread `t` of `nt`'s part of C: whole strips of columns where there
 * are enough to go round, else whole strips of rows. */
static void part_of(const g16 *g, int t, int nt, bool by_cols, int64_t part[4])
{
    int64_t unit = by_cols ? NR : MR, len = by_cols ? g->n : g->m;
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
    int64_t col_strips = (g->n + NR - 1) / NR, row_strips = (g->m + MR - 1) / MR;
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
    for (int t = 0; t < nt; t++) {
        int64_t part[4];
        part_of(g, t, nt, by_cols, part);
        thread_scratch(ws, t, scratch_floats(part[1] - part[0], part[3] - part[2]));
    }
    if (nt == 1) {
        gemm_part(g, ws->pack[0], 0, g->m, 0, g->n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num();
        int64_t part[4];
        part_of(g, t, nt, by_cols, part);
        if (part[0] < part[1] && part[2] < part[3])
            gemm_part(g, ws->pack[t], part[0], part[1], part[2], part[3]);
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
            .c16 = g->out_dtype == IR_F16,
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
