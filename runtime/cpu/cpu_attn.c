/* Hand-written CPU kernels of the attention ops (f32 results; f32 or bf16
 * operands), run by the CPU
 * backend in place of the kernel IR's generated ones (codegen/k_attn.c),
 * which compute the same thing one key at a time and stay the reference
 * (KILN_CPU_ATTENTION=generated runs them instead).
 *
 * Blocked over query and key tiles as FlashAttention-2 is: a tile's scores
 * are a small GEMM against the key tile, transposed into a local buffer so
 * that the inner loop runs along keys and vectorises; an online softmax
 * (running maximum m and sum l per query row) rescales the output rows,
 * which live in a local accumulator, so no Tq x Tk buffer exists in
 * forward or backward, only BQ x BK per thread. The tiles are locals: at
 * most 176 KB of a thread's stack (grad_q_tile, grad_kv_tile), far below
 * the 2-8 MB threads get by default. With precision = bf16, q, k, v and
 * dout are bf16: each row is widened to f32 as a tile is loaded
 * (transposed or into a local copy), and every sum is f32 as for f32
 * operands; results are f32. Backward recomputes the
 * probabilities from the saved lse, p = exp(s scale - lse), and is split
 * by who owns the result rows (query tiles for dq, key tiles for dk and
 * dv), so there are no atomics and no reductions across threads.
 *
 * Every sum runs in one fixed order (vector lanes are along an output
 * index, never along a sum): the same bits for any thread count. This
 * file is built with -ffp-contract=fast, so a product added to a sum is
 * one FMA (1.2-1.5x faster than a multiply and an add, README "CPU
 * attention kernels"): the x86-64-v4 (AVX-512) and x86-64-v3 (AVX2 and
 * FMA) clones give the same bits; the baseline clone, for CPUs without
 * FMA, rounds each product and differs in the last bits
 * (attn.cpu.isa checks both). */
#include "cpu_attn.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/scalar.h"

enum {
    BQ = 32,   /* query rows per tile */
    BK = 64,   /* key rows per tile */
    DMAX = 128 /* the largest head size these kernels take (d and dv) */
};

/* ISA levels, not CPU models (arch=skylake-avx512 is picked on Intel CPUs
 * of that family only; AMD's with AVX-512 would miss it), and levels that
 * hold FMA (plain "avx2" does not). A test builds this file with one
 * target of its own in place of the clones (tests/attention/attn_isa_check.c). */
#ifndef KL_ATTN_CLONES
#define KL_ATTN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

bool kl_cpu_attention_supported(const cg_attn_native *a)
{
    return a->kind != CG_ATTN_NONE && a->d > 0 && a->dv > 0 && a->d <= DMAX && a->dv <= DMAX && a->tq > 0 && a->tk > 0;
}

/* The exponentials are base/scalar.h's kl_exp_nonpos (Cephes' expf,
 * branch-free, so a loop of it vectorises; within 1.5 ulp): every
 * argument here is at most 0 in exact arithmetic (a score less the
 * running maximum or less the row's lse) and rounding can leave it only
 * a few ulp above 0, where the polynomial is still exact to float
 * precision; below -87 it gives 0, so exp(-inf - m), the first tile's
 * rescale of an empty row, is 0. */

/* 16 floats, lane by lane: one AVX-512 register, two AVX2 ones or four
 * SSE ones, whichever clone runs; loads and stores need no alignment. */
typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
enum { W = 16 };

/* An operand: f32, or bf16 (precision = bf16), widened to f32 as it is
 * loaded (exactly: a bf16 value is the top half of its f32). */
typedef struct operand {
    const void *p;
    bool bf16;
} operand;

static inline __attribute__((always_inline)) float widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rows r0 .. r0 + rows - 1 of x ([.., n]) as f32: x's own rows, or
 * widened into buf (rows x n floats). */
static inline __attribute__((always_inline)) const float *rows_f32(float *restrict buf, operand x, int64_t r0, int rows,
                                                                   int64_t n)
{
    if (!x.bf16)
        return (const float *)x.p + r0 * n;
    const uint16_t *h = (const uint16_t *)x.p + r0 * n;
    for (int64_t e = 0; e < rows * n; e++)
        buf[e] = widen(h[e]);
    return buf;
}

/* dst[c * BK + j] = x[(r0 + j) * n + c] for j < rows, c < n, and 0 for the
 * columns from rows up to the next multiple of W: a tile of rows
 * transposed, so a loop along the tile's rows is contiguous. */
static inline __attribute__((always_inline)) void transpose_tile(float *restrict dst, operand x, int64_t r0, int rows,
                                                                 int64_t n)
{
    int padded = (rows + W - 1) / W * W;
    for (int64_t c = 0; c < n; c++)
        for (int j = rows; j < padded; j++)
            dst[c * BK + j] = 0;
    if (x.bf16) {
        const uint16_t *src = (const uint16_t *)x.p + r0 * n;
        for (int j = 0; j < rows; j++)
            for (int64_t c = 0; c < n; c++)
                dst[c * BK + j] = widen(src[j * n + c]);
    } else {
        const float *src = (const float *)x.p + r0 * n;
        for (int j = 0; j < rows; j++)
            for (int64_t c = 0; c < n; c++)
                dst[c * BK + j] = src[j * n + c];
    }
}

/* s[i * BK + j] = sum over c < n (in order) of x[i * ldx + c] * yt[c * BK + j]
 * for i < nx and j below ny rounded up to W (yt zero-padded): rows of x
 * against a transposed tile, the micro-kernel of a GEMM: 4 rows x 2
 * vectors of accumulators stay in registers over c. */
static inline __attribute__((always_inline)) void tile_scores(float *restrict s, const float *restrict x, int64_t ldx,
                                                               int nx, const float *restrict yt, int ny, int64_t n)
{
    int nj = (ny + W - 1) / W;
    for (int i = 0; i < nx; i += 4) {
        int ni = nx - i < 4 ? nx - i : 4;
        const float *xr[4];
        for (int r = 0; r < 4; r++)
            xr[r] = x + (i + (r < ni ? r : 0)) * ldx;
        for (int jb = 0; jb < nj; jb += 2) {
            v16 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
            bool two = jb + 1 < nj;
            for (int64_t c = 0; c < n; c++) {
                const float *y = yt + c * BK + jb * W;
                v16 y0 = *(const v16 *)y, y1 = two ? *(const v16 *)(y + W) : y0;
                float b0 = xr[0][c], b1 = xr[1][c], b2 = xr[2][c], b3 = xr[3][c];
                a00 += b0 * y0;
                a01 += b0 * y1;
                a10 += b1 * y0;
                a11 += b1 * y1;
                a20 += b2 * y0;
                a21 += b2 * y1;
                a30 += b3 * y0;
                a31 += b3 * y1;
            }
            v16 *out = (v16 *)(s + i * BK + jb * W);
            v16 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
            for (int r = 0; r < ni; r++) {
                out[r * (BK / W)] = acc[r][0];
                if (two)
                    out[r * (BK / W) + 1] = acc[r][1];
            }
        }
    }
}

/* acc[i * lda + c] += sum over j < ny (in order) of p[i * ldp + j * sp] *
 * rows[j * ldr + c] for i < nx, c < n: weights times rows, accumulated
 * into rows of acc, 4 rows x 2 vectors in registers over j; columns past
 * the last whole vector one at a time, in the same order. Each weight is
 * a broadcast scalar, so a transposed p (sp = its row length, ldp = 1)
 * costs nothing: grad_kv reads the score tile that way instead of
 * transposing it. */
static inline __attribute__((always_inline)) void tile_accumulate(float *restrict acc, int64_t lda, int nx,
                                                                   const float *restrict p, int ldp, int sp, int ny,
                                                                   const float *restrict rows, int64_t ldr, int64_t n)
{
    int64_t nv = n / W * W;
    for (int i = 0; i < nx; i += 4) {
        int ni = nx - i < 4 ? nx - i : 4;
        const float *pr[4];
        for (int r = 0; r < 4; r++)
            pr[r] = p + (i + (r < ni ? r : 0)) * ldp;
        for (int64_t c = 0; c < nv; c += 2 * W) {
            bool two = c + W < nv;
            v16 a[4][2];
            for (int r = 0; r < 4; r++) {
                const float *ar = acc + (i + (r < ni ? r : 0)) * lda + c;
                a[r][0] = *(const v16 *)ar;
                a[r][1] = two ? *(const v16 *)(ar + W) : a[r][0];
            }
            for (int j = 0; j < ny; j++) {
                const float *y = rows + j * ldr + c;
                v16 y0 = *(const v16 *)y, y1 = two ? *(const v16 *)(y + W) : y0;
                for (int r = 0; r < 4; r++) {
                    float w = pr[r][j * sp];
                    a[r][0] += w * y0;
                    a[r][1] += w * y1;
                }
            }
            for (int r = 0; r < ni; r++) {
                float *ar = acc + (i + r) * lda + c;
                *(v16 *)ar = a[r][0];
                if (two)
                    *(v16 *)(ar + W) = a[r][1];
            }
        }
        for (int r = 0; r < ni; r++)
            for (int64_t c = nv; c < n; c++) {
                float t = acc[(i + r) * lda + c];
                for (int j = 0; j < ny; j++)
                    t += pr[r][j * sp] * rows[j * ldr + c];
                acc[(i + r) * lda + c] = t;
            }
    }
}

static inline float dot(const float *x, const float *y, int64_t n)
{
    float s = 0;
    for (int64_t c = 0; c < n; c++)
        s += x[c] * y[c];
    return s;
}

/* The keys query row i (of the whole sequence) sees among the tile's ny
 * keys starting at j0: all of them unless causal (key j visible when
 * j <= i), possibly none. */
static inline int visible_keys(const cg_attn_native *a, int64_t i, int64_t j0, int ny)
{
    if (!a->causal)
        return ny;
    int64_t v = i - j0 + 1;
    return v < 0 ? 0 : v > ny ? ny : (int)v;
}

/* The keys the query rows i0 .. i0 + nq - 1 see at all. */
static int64_t key_end(const cg_attn_native *a, int64_t i0, int nq)
{
    return a->causal && i0 + nq < a->tk ? i0 + nq : a->tk;
}

KL_ATTN_CLONES static void forward_tile(const cg_attn_native *a, operand q, operand k, operand v, float *out, float *lse,
                                        int64_t bh, int64_t i0, int nq)
{
    const int64_t d = a->d, dv = a->dv;
    const float scale = (float)a->scale;
    float kt[DMAX * BK], s[BQ * BK], acc[BQ * DMAX], m[BQ], l[BQ], qw[BQ * DMAX], vw[BK * DMAX];
    const float *qt = rows_f32(qw, q, bh * a->tq + i0, nq, d);
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(acc, 0, sizeof(float) * (size_t)(nq * dv));
    int64_t kend = key_end(a, i0, nq);
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        int nk = kend - j0 < BK ? (int)(kend - j0) : BK;
        transpose_tile(kt, k, bh * a->tk + j0, nk, d);
        tile_scores(s, qt, d, nq, kt, nk, d);
        for (int i = 0; i < nq; i++) {
            float *row = s + i * BK, *o = acc + i * dv;
            int nv = visible_keys(a, i0 + i, j0, nk);
            for (int j = nv; j < nk; j++)
                row[j] = 0;
            if (!nv)
                continue;
            float mx = m[i];
            for (int j = 0; j < nv; j++) {
                row[j] *= scale;
                mx = row[j] > mx ? row[j] : mx;
            }
            /* m is -inf before the first key: alpha is then 0 and scales
             * an accumulator and a sum that are still 0. */
            float alpha = kl_exp_nonpos(m[i] - mx), sum = 0;
#pragma omp simd
            for (int j = 0; j < nv; j++)
                row[j] = kl_exp_nonpos(row[j] - mx);
            for (int j = 0; j < nv; j++)
                sum += row[j];
            l[i] = l[i] * alpha + sum;
            m[i] = mx;
#pragma omp simd
            for (int64_t c = 0; c < dv; c++)
                o[c] *= alpha;
        }
        tile_accumulate(acc, dv, nq, s, BK, 1, nk, rows_f32(vw, v, bh * a->tk + j0, nk, dv), dv, dv);
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i], *o = out + (bh * a->tq + i0 + i) * dv;
        for (int64_t c = 0; c < dv; c++)
            o[c] = acc[i * dv + c] * inv;
        lse[bh * a->tq + i0 + i] = m[i] + logf(l[i]);
    }
}

/* ds = p (dp - D) scale in place of dp, p in place of s, for the visible
 * keys of a row; both 0 after them. */
static inline void score_grads(float *restrict s, float *restrict dp, int nv, int ny, float scale, float lse, float dd)
{
#pragma omp simd
    for (int j = 0; j < nv; j++) {
        float p = kl_exp_nonpos(s[j] * scale - lse);
        s[j] = p;
        dp[j] = p * (dp[j] - dd) * scale;
    }
    for (int j = nv; j < ny; j++)
        s[j] = dp[j] = 0;
}

KL_ATTN_CLONES static void grad_q_tile(const cg_attn_native *a, const operand *t, int64_t bh, int64_t i0, int nq)
{
    const float *out = t[4].p, *lse = t[5].p;
    float *dq = (float *)t[6].p;
    const int64_t d = a->d, dv = a->dv;
    const float scale = (float)a->scale;
    const int64_t r0 = bh * a->tq + i0;
    float kt[DMAX * BK], vt[DMAX * BK], s[BQ * BK], dp[BQ * BK], acc[BQ * DMAX], dd[BQ];
    float qw[BQ * DMAX], gw[BQ * DMAX], kw[BK * DMAX];
    const float *dout = rows_f32(gw, t[0], r0, nq, dv), *qt = rows_f32(qw, t[1], r0, nq, d);
    for (int i = 0; i < nq; i++)
        dd[i] = dot(dout + i * dv, out + (r0 + i) * dv, dv);
    memset(acc, 0, sizeof(float) * (size_t)(nq * d));
    int64_t kend = key_end(a, i0, nq);
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        int nk = kend - j0 < BK ? (int)(kend - j0) : BK;
        transpose_tile(kt, t[2], bh * a->tk + j0, nk, d);
        transpose_tile(vt, t[3], bh * a->tk + j0, nk, dv);
        tile_scores(s, qt, d, nq, kt, nk, d);
        tile_scores(dp, dout, dv, nq, vt, nk, dv);
        for (int i = 0; i < nq; i++)
            score_grads(s + i * BK, dp + i * BK, visible_keys(a, i0 + i, j0, nk), nk, scale, lse[r0 + i], dd[i]);
        tile_accumulate(acc, d, nq, dp, BK, 1, nk, rows_f32(kw, t[2], bh * a->tk + j0, nk, d), d, d);
    }
    memcpy(dq + r0 * d, acc, sizeof(float) * (size_t)(nq * d));
}

KL_ATTN_CLONES static void grad_kv_tile(const cg_attn_native *a, const operand *t, int64_t bh, int64_t j0, int nk)
{
    const float *out = t[4].p, *lse = t[5].p;
    float *dk = (float *)t[6].p, *dvo = (float *)t[7].p;
    const int64_t d = a->d, dv = a->dv;
    const float scale = (float)a->scale;
    const int64_t rk = bh * a->tk + j0, rq = bh * a->tq;
    float kt[DMAX * BK], vt[DMAX * BK], s[BQ * BK], dp[BQ * BK], qw[BQ * DMAX], gw[BQ * DMAX];
    float acck[BK * DMAX], accv[BK * DMAX];
    transpose_tile(kt, t[2], rk, nk, d);
    transpose_tile(vt, t[3], rk, nk, dv);
    memset(acck, 0, sizeof(float) * (size_t)(nk * d));
    memset(accv, 0, sizeof(float) * (size_t)(nk * dv));
    /* Under causal masking the queries before j0 see none of the tile. */
    int64_t first = a->causal ? j0 / BQ * BQ : 0;
    for (int64_t i0 = first; i0 < a->tq; i0 += BQ) {
        int nq = a->tq - i0 < BQ ? (int)(a->tq - i0) : BQ;
        const float *qt = rows_f32(qw, t[1], rq + i0, nq, d), *dot_ = rows_f32(gw, t[0], rq + i0, nq, dv);
        tile_scores(s, qt, d, nq, kt, nk, d);
        tile_scores(dp, dot_, dv, nq, vt, nk, dv);
        for (int i = 0; i < nq; i++) {
            float dd = dot(dot_ + i * dv, out + (rq + i0 + i) * dv, dv);
            score_grads(s + i * BK, dp + i * BK, visible_keys(a, i0 + i, j0, nk), nk, scale, lse[rq + i0 + i], dd);
        }
        /* p^T and ds^T: the key tile's rows of s and dp read down
         * their columns (stride BK), no transposed copies. */
        tile_accumulate(accv, dv, nk, s, 1, BK, nq, dot_, dv, dv);
        tile_accumulate(acck, d, nk, dp, 1, BK, nq, qt, d, d);
    }
    memcpy(dk + rk * d, acck, sizeof(float) * (size_t)(nk * d));
    memcpy(dvo + rk * dv, accv, sizeof(float) * (size_t)(nk * dv));
}

void kl_cpu_attention(const cg_attn_native *a, void *const *bufs)
{
    operand t[CG_ATTN_MAX_ARGS];
    for (int i = 0; i < a->nargs; i++)
        t[i] = (operand){bufs[a->arg[i]], a->bf16[i]};
    /* Tasks own their result rows: query tiles, or key tiles for dk, dv. */
    int64_t rows = a->kind == CG_ATTN_GRAD_KV ? a->tk : a->tq;
    int64_t tile = a->kind == CG_ATTN_GRAD_KV ? BK : BQ;
    int64_t per = (rows + tile - 1) / tile, ntasks = a->batch * per;
    bool parallel = a->batch * a->tq * a->tk * (a->d + a->dv) > (1 << 16);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int64_t task = 0; task < ntasks; task++) {
        int64_t bh = task / per, r0 = task % per * tile;
        int n = rows - r0 < tile ? (int)(rows - r0) : (int)tile;
        switch (a->kind) {
        case CG_ATTN_FORWARD:
            forward_tile(a, t[0], t[1], t[2], (float *)t[3].p, (float *)t[4].p, bh, r0, n);
            break;
        case CG_ATTN_GRAD_Q:
            grad_q_tile(a, t, bh, r0, n);
            break;
        case CG_ATTN_GRAD_KV:
            grad_kv_tile(a, t, bh, r0, n);
            break;
        case CG_ATTN_NONE:
            break;
        }
    }
}
