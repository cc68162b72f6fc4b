/* Hand-written tiled attention for the CUDA backend (FlashAttention-2's
 * arithmetic; codegen/cuda_attn.c instantiates it per kernel). The same
 * computation as codegen/k_attn.c's generated kernels, whose header
 * states the formulas: forward keeps a running maximum m and sum l per
 * query row and saves lse = m + log l; backward recomputes each
 * probability p = exp(s scale - lse) and owns its result rows (dq per
 * query tile, dk and dv per key tile), so there is no atomic and every
 * sum runs in one fixed order: the same bits on every run.
 *
 * One block of KL_FA_THREADS threads (4 warps) per (batch x head, tile of
 * R rows), block-stride over the tiles; each warp owns R / 4 of the rows.
 * The other operand streams through shared memory in tiles of KL_FA_BK
 * rows, stored transposed with a padded row (KL_FA_BK + 1 floats), so
 * that both the score phase (a lane per streamed row) and the
 * accumulation phase (a lane per output column) read it without bank
 * conflicts. In the score phase lane l computes the dot products of
 * streamed row l % 16 with the warp's rows 2i + l / 16; softmax
 * statistics combine over the 16 lanes of a half warp with shuffles.
 * Accumulators live in registers: lane l owns columns l, l + 32, ...
 * No T x T buffer exists; shared memory stays under the 48 KiB of a
 * static allocation for head sizes up to 128 (f32 operands). Causal
 * tiles above the diagonal are never visited. Included once per program
 * (several kernels may share one in the emulation harness). */
#ifndef KL_FLASH_ATTENTION
#define KL_FLASH_ATTENTION 1

#define KL_FA_WARPS 4
#define KL_FA_THREADS (32 * KL_FA_WARPS)
#define KL_FA_BK 16 /* streamed rows per tile */
#define KL_FA_LDT (KL_FA_BK + 1)

/* An operand element as f32: itself, or a bf16's bits (the top half of
 * its f32: exact). q, k, v and dout are f32, or bf16 with precision =
 * bf16 (T = unsigned short); results are f32. */
__device__ __forceinline__ float kl_fa_ld(float x) { return x; }
__device__ __forceinline__ float kl_fa_ld(unsigned short b) { return __int_as_float((int)((unsigned int)b << 16)); }

/* Rows [row0, row0 + R) of a row-major [n, W] matrix into sh[R][LD],
 * zeros past row n. */
template <int R, int W, int LD, typename T>
__device__ __forceinline__ void kl_fa_rows(float *sh, const T *g, int row0, int n)
{
    for (int e = threadIdx.x; e < R * W; e += blockDim.x) {
        const int r = e / W, c = e % W;
        sh[r * LD + c] = row0 + r < n ? kl_fa_ld(g[(row0 + r) * W + c]) : 0.0f;
    }
}

/* Rows [row0, row0 + KL_FA_BK) of a [n, W] matrix transposed into
 * sh[W][KL_FA_LDT], zeros past row n. */
template <int W, typename T>
__device__ __forceinline__ void kl_fa_cols(float *sh, const T *g, int row0, int n)
{
    for (int e = threadIdx.x; e < KL_FA_BK * W; e += blockDim.x) {
        const int r = e / W, c = e % W;
        sh[c * KL_FA_LDT + r] = row0 + r < n ? kl_fa_ld(g[(row0 + r) * W + c]) : 0.0f;
    }
}

/* s[i] = sum over c < W of A[w RW + 2i + h][c] * Bt[c][t] for this lane's
 * streamed row t = lane % 16 and half h = lane / 16 (A: [R][LDA]). */
template <int RW, int W, int LDA>
__device__ __forceinline__ void kl_fa_dots(float *s, const float *A, const float *Bt)
{
    const int lane = threadIdx.x & 31, t = lane & 15;
    const float *a = A + ((threadIdx.x >> 5) * RW + (lane >> 4)) * LDA;
#pragma unroll
    for (int i = 0; i < RW / 2; i++)
        s[i] = 0.0f;
    for (int c = 0; c < W; c++) {
        const float b = Bt[c * KL_FA_LDT + t];
#pragma unroll
        for (int i = 0; i < RW / 2; i++)
            s[i] += a[2 * i * LDA + c] * b;
    }
}

/* acc[r][u] += sum over j < KL_FA_BK of P[w RW + r][j] * Bt[lane + 32u][j]
 * for the warp's RW rows (P: [R][KL_FA_BK]; Bt: [W][KL_FA_LDT]). */
template <int RW, int W, int U>
__device__ __forceinline__ void kl_fa_accumulate(float (*acc)[U], const float *P, const float *Bt)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const float *pr = P + (w * RW + r) * KL_FA_BK;
#pragma unroll
        for (int j = 0; j < KL_FA_BK; j++) {
            const float p = pr[j];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (lane + 32 * u < W)
                    acc[r][u] += p * Bt[(lane + 32 * u) * KL_FA_LDT + j];
        }
    }
}

/* Maximum and sum over the 16 lanes of a half warp. */
__device__ __forceinline__ float kl_fa_half_max(float v)
{
    for (int o = 8; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float kl_fa_half_sum(float v)
{
    for (int o = 8; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Forward: (q [B, tq, D], k [B, tk, D], v [B, tk, DV]) -> (out [B, tq, DV],
 * lse [B, tq]). A block per tile of 64 queries. */
template <int D, int DV, bool CAUSAL, typename T>
__device__ void kl_fa_forward(const T *q, const T *k, const T *v, float *out, float *lse, int batch,
                              int tq, int tk, float scale)
{
    constexpr int R = 64, RW = R / KL_FA_WARPS, U = (DV + 31) / 32;
    constexpr int KVN = D * KL_FA_LDT > DV * KL_FA_LDT ? D * KL_FA_LDT : DV * KL_FA_LDT;
    __shared__ float Qs[R * (D + 1)]; /* the query tile */
    __shared__ float KV[KVN];         /* K^T, then V^T, of one key tile */
    __shared__ float Ps[R * KL_FA_BK];/* probabilities of the key tile */
    __shared__ float As[R];           /* per row: the rescale of its output, then 1 / l */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, t = lane & 15, h = lane >> 4;
    const int tiles = (tq + R - 1) / R;
    for (int unit = blockIdx.x; unit < batch * tiles; unit += gridDim.x) {
        const long long bh = unit / tiles; /* 32-bit division: no call */
        const int i0 = (int)(unit % tiles) * R;
        __syncthreads(); /* the previous tile's readers are done */
        kl_fa_rows<R, D, D + 1>(Qs, q + bh * tq * D, i0, tq);
        float m[RW / 2], l[RW / 2], o[RW][U];
#pragma unroll
        for (int i = 0; i < RW / 2; i++)
            m[i] = -KL_INF, l[i] = 0.0f;
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < U; u++)
                o[r][u] = 0.0f;
        /* Causal: keys after the tile's last query are hidden from all of it. */
        const int kend = CAUSAL && i0 + R < tk ? i0 + R : tk;
        for (int j0 = 0; j0 < kend; j0 += KL_FA_BK) {
            __syncthreads(); /* the previous V^T's readers are done */
            kl_fa_cols<D>(KV, k + bh * tk * D, j0, tk);
            __syncthreads();
            float s[RW / 2];
            kl_fa_dots<RW, D, D + 1>(s, Qs, KV);
#pragma unroll
            for (int i = 0; i < RW / 2; i++) {
                const int rr = w * RW + 2 * i + h;
                const int key = j0 + t;
                const bool seen = key < tk && (!CAUSAL || key <= i0 + rr);
                const float x = seen ? s[i] * scale : -KL_INF;
                /* Key 0 is visible to every row, so mn is finite from the
                 * first tile on, and exp(-inf) = 0 drops the empty start. */
                const float mn = fmaxf(m[i], kl_fa_half_max(x));
                const float p = expf(x - mn), alpha = expf(m[i] - mn);
                l[i] = l[i] * alpha + kl_fa_half_sum(p);
                m[i] = mn;
                Ps[rr * KL_FA_BK + t] = p;
                if (t == 0)
                    As[rr] = alpha;
            }
            __syncthreads(); /* K^T's readers are done; Ps and As are written */
            kl_fa_cols<DV>(KV, v + bh * tk * DV, j0, tk);
            __syncthreads();
#pragma unroll
            for (int r = 0; r < RW; r++)
#pragma unroll
                for (int u = 0; u < U; u++)
                    o[r][u] *= As[w * RW + r];
            kl_fa_accumulate<RW, DV, U>(o, Ps, KV);
        }
        __syncwarp(); /* the warp's readers of As are done */
#pragma unroll
        for (int i = 0; i < RW / 2; i++) {
            const int rr = w * RW + 2 * i + h;
            if (t == 0) {
                As[rr] = 1.0f / l[i];
                if (i0 + rr < tq)
                    lse[bh * tq + i0 + rr] = m[i] + logf(l[i]);
            }
        }
        __syncwarp();
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const int row = i0 + w * RW + r;
            if (row < tq)
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (lane + 32 * u < DV)
                        out[(bh * tq + row) * DV + lane + 32 * u] = o[r][u] * As[w * RW + r];
        }
    }
}

/* Per row of a tile of R rows from row0: lse (+inf past n, so that p = 0
 * there) and D = dout . out, a thread per row summing in increasing c (the
 * CPU's order: D's rounding reaches every score gradient of the row, and
 * where softmax is nearly one-hot dq is mostly that rounding). */
template <int R, int DV, typename T>
__device__ __forceinline__ void kl_fa_row_stats(float *Ls, float *Dd, const T *dout, const float *out,
                                                const float *lse, int row0, int n)
{
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        const bool in = row0 + r < n;
        float dd = 0.0f;
        if (in)
            for (int c = 0; c < DV; c++)
                dd += kl_fa_ld(dout[(row0 + r) * DV + c]) * out[(row0 + r) * DV + c];
        Dd[r] = dd;
        Ls[r] = in ? lse[row0 + r] : KL_INF;
    }
}

/* The rows of a backward tile: 64, or 32 when a head is wider than 64
 * (the staged query and gradient rows must fit the shared memory). */
#define KL_FA_BWD_ROWS(D, DV) ((D) > 64 || (DV) > 64 ? 32 : 64)

/* dq [B, tq, D] from (dout, q, k, v, out, lse): a block per query tile. */
template <int D, int DV, bool CAUSAL, typename T>
__device__ void kl_fa_grad_q(const T *dout, const T *q, const T *k, const T *v, const float *out,
                             const float *lse, float *dq, int batch, int tq, int tk, float scale)
{
    constexpr int R = KL_FA_BWD_ROWS(D, DV), RW = R / KL_FA_WARPS, U = (D + 31) / 32;
    constexpr int KVN = D > DV ? D * KL_FA_LDT : DV * KL_FA_LDT;
    __shared__ float Qs[R * (D + 1)];  /* the query tile */
    __shared__ float Gs[R * (DV + 1)]; /* its output gradient rows */
    __shared__ float KV[KVN];          /* V^T, then K^T, of one key tile */
    __shared__ float Ss[R * KL_FA_BK]; /* the score gradients of the key tile */
    __shared__ float Ls[R], Dd[R];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, t = lane & 15, h = lane >> 4;
    const int tiles = (tq + R - 1) / R;
    for (int unit = blockIdx.x; unit < batch * tiles; unit += gridDim.x) {
        const long long bh = unit / tiles; /* 32-bit division: no call */
        const int i0 = (int)(unit % tiles) * R;
        __syncthreads();
        kl_fa_rows<R, D, D + 1>(Qs, q + bh * tq * D, i0, tq);
        kl_fa_rows<R, DV, DV + 1>(Gs, dout + bh * tq * DV, i0, tq);
        kl_fa_row_stats<R, DV>(Ls, Dd, dout + bh * tq * DV, out + bh * tq * DV, lse + bh * tq, i0, tq);
        float g[RW][U];
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < U; u++)
                g[r][u] = 0.0f;
        const int kend = CAUSAL && i0 + R < tk ? i0 + R : tk;
        for (int j0 = 0; j0 < kend; j0 += KL_FA_BK) {
            __syncthreads(); /* the previous K^T's readers are done */
            kl_fa_cols<DV>(KV, v + bh * tk * DV, j0, tk);
            __syncthreads();
            float s[RW / 2], dp[RW / 2];
            kl_fa_dots<RW, DV, DV + 1>(dp, Gs, KV);
            __syncthreads(); /* V^T's readers are done */
            kl_fa_cols<D>(KV, k + bh * tk * D, j0, tk);
            __syncthreads();
            kl_fa_dots<RW, D, D + 1>(s, Qs, KV);
#pragma unroll
            for (int i = 0; i < RW / 2; i++) {
                const int rr = w * RW + 2 * i + h;
                const int key = j0 + t;
                const bool seen = key < tk && (!CAUSAL || key <= i0 + rr);
                const float p = seen ? expf(s[i] * scale - Ls[rr]) : 0.0f;
                Ss[rr * KL_FA_BK + t] = p * (dp[i] - Dd[rr]) * scale;
            }
            __syncwarp(); /* the warp's own rows of Ss */
            kl_fa_accumulate<RW, D, U>(g, Ss, KV);
        }
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const int row = i0 + w * RW + r;
            if (row < tq)
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (lane + 32 * u < D)
                        dq[(bh * tq + row) * D + lane + 32 * u] = g[r][u];
        }
    }
}

/* The keys of a grad_kv tile: 32, or 16 when a head is wider than 64. */
#define KL_FA_KV_ROWS(D, DV) ((D) > 64 || (DV) > 64 ? 16 : 32)

/* (dk [B, tk, D], dv [B, tk, DV]) from (dout, q, k, v, out, lse): a block
 * per key tile; the query tiles that see it stream through. */
template <int D, int DV, bool CAUSAL, typename T>
__device__ void kl_fa_grad_kv(const T *dout, const T *q, const T *k, const T *v, const float *out,
                              const float *lse, float *dk, float *dv, int batch, int tq, int tk,
                              float scale)
{
    constexpr int R = KL_FA_KV_ROWS(D, DV), RW = R / KL_FA_WARPS, UK = (D + 31) / 32, UV = (DV + 31) / 32;
    __shared__ float Ks[R * (D + 1)], Vs[R * (DV + 1)]; /* the key tile */
    __shared__ float Qt[D * KL_FA_LDT], Gt[DV * KL_FA_LDT]; /* q^T, dout^T of one query tile */
    __shared__ float Ps[R * KL_FA_BK], Ss[R * KL_FA_BK];   /* its p and score gradients */
    __shared__ float Ls[KL_FA_BK], Dd[KL_FA_BK];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, t = lane & 15, h = lane >> 4;
    const int tiles = (tk + R - 1) / R;
    for (int unit = blockIdx.x; unit < batch * tiles; unit += gridDim.x) {
        const long long bh = unit / tiles; /* 32-bit division: no call */
        const int j0 = (int)(unit % tiles) * R;
        __syncthreads();
        kl_fa_rows<R, D, D + 1>(Ks, k + bh * tk * D, j0, tk);
        kl_fa_rows<R, DV, DV + 1>(Vs, v + bh * tk * DV, j0, tk);
        float gk[RW][UK], gv[RW][UV];
#pragma unroll
        for (int r = 0; r < RW; r++) {
#pragma unroll
            for (int u = 0; u < UK; u++)
                gk[r][u] = 0.0f;
#pragma unroll
            for (int u = 0; u < UV; u++)
                gv[r][u] = 0.0f;
        }
        /* Causal: queries before the tile's first key see none of it. */
        for (int i0 = CAUSAL ? j0 / KL_FA_BK * KL_FA_BK : 0; i0 < tq; i0 += KL_FA_BK) {
            __syncthreads(); /* the previous query tile's readers are done */
            kl_fa_cols<D>(Qt, q + bh * tq * D, i0, tq);
            kl_fa_cols<DV>(Gt, dout + bh * tq * DV, i0, tq);
            kl_fa_row_stats<KL_FA_BK, DV>(Ls, Dd, dout + bh * tq * DV, out + bh * tq * DV, lse + bh * tq, i0, tq);
            __syncthreads();
            float s[RW / 2], dp[RW / 2];
            kl_fa_dots<RW, D, D + 1>(s, Ks, Qt);
            kl_fa_dots<RW, DV, DV + 1>(dp, Vs, Gt);
#pragma unroll
            for (int i = 0; i < RW / 2; i++) {
                const int rr = w * RW + 2 * i + h;
                const int key = j0 + rr, qi = i0 + t;
                const bool seen = qi < tq && key < tk && (!CAUSAL || key <= qi);
                const float p = seen ? expf(s[i] * scale - Ls[t]) : 0.0f;
                Ps[rr * KL_FA_BK + t] = p;
                Ss[rr * KL_FA_BK + t] = p * (dp[i] - Dd[t]) * scale;
            }
            __syncwarp(); /* the warp's own rows of Ps and Ss */
            kl_fa_accumulate<RW, DV, UV>(gv, Ps, Gt);
            kl_fa_accumulate<RW, D, UK>(gk, Ss, Qt);
        }
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const int key = j0 + w * RW + r;
            if (key >= tk)
                continue;
#pragma unroll
            for (int u = 0; u < UK; u++)
                if (lane + 32 * u < D)
                    dk[(bh * tk + key) * D + lane + 32 * u] = gk[r][u];
#pragma unroll
            for (int u = 0; u < UV; u++)
                if (lane + 32 * u < DV)
                    dv[(bh * tk + key) * DV + lane + 32 * u] = gv[r][u];
        }
    }
}

#endif
