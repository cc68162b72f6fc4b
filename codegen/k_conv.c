/* Convolution's kernels: the im2col / col2im movements that turn a
 * convolution into GEMMs (plan/conv.c places the GEMMs), the swap of two
 * outer axes around them, and the direct convolution (with its weight
 * gradient) for few input taps.
 *
 * Reads outside the input (padding) use a clamped index and a validity
 * mask, or loops of their own, so no lane ever loads out of bounds. */
#include "k_window.h"

/* col[(c, kh, kw), n, (oh, ow)] = x[n, c, oh s - p + kh d, ow s - p + kw d]
 * (0 in the padding): one row per kernel tap, so the convolution of the
 * whole batch is one GEMM, W[o, ckk] col[ckk, n hw]. col is a scratch
 * buffer (a negative id).
 *
 * Per output row and tap, the columns that read x are one constant range
 * [lo, hi) of ow, so the copy is a plain strided loop and the padding on
 * either side and the rows outside x are stored as zeros by loops of
 * their own: no clamped indices or selects, which keep gcc from
 * vectorising (measured 2-2.5x slower). */
void cg_build_im2col(cg_builder *b, const cg_conv *cv, int x, int col)
{
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bx = cg_buf(b, x), bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw);
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    int kh = kir_loop_begin(K, KL_PAR, cv->kh, "kh");
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int oh = kir_loop_begin(K, KL_PAR, cv->oh, "oh");
    int ih = kir_let(K, kir_iadd(K, kir_iadd(K, kir_imul(K, VAR(oh), cv->s[0]), I(-cv->p[0])), kir_imul(K, VAR(kh), cv->d[0])), "ih");
    for (int inside = 1; inside >= 0; inside--) {
        kir_expr *row_ok = in_range(b, VAR(ih), cv->h);
        kir_if_begin(K, inside ? row_ok : kir_un(K, KU_NOT, row_ok));
        int xrow = -1;
        if (inside) {
            kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
            xrow = kir_let(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(ih)), cv->w), "xrow");
        }
        for (int64_t kw = 0; kw < cv->kw; kw++) {
            /* iw = ow s + shift; x has it for ow in [lo, hi). */
            int64_t shift = kw * cv->d[1] - cv->p[1], st = cv->s[1];
            int64_t lo = shift >= 0 ? 0 : (-shift + st - 1) / st;
            int64_t hi = cv->w - 1 - shift < 0 ? 0 : (cv->w - 1 - shift) / st + 1;
            if (hi > cv->ow)
                hi = cv->ow;
            if (!inside || hi < lo)
                lo = hi = cv->ow;
            kir_expr *row = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(c), cv->kh), VAR(kh)), cv->kw), I(kw));
            int dst = kir_let(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, row, cv->n), VAR(n)), hw),
                                          kir_imul(K, VAR(oh), cv->ow)), "dst");
            int64_t zeros[2][2] = {{0, lo}, {hi, cv->ow}};
            for (int z = 0; z < 2; z++) {
                if (zeros[z][1] <= zeros[z][0])
                    continue;
                int i = kir_loop_begin(K, KL_PAR, zeros[z][1] - zeros[z][0], "i");
                kir_store(K, bc, kir_iadd(K, VAR(dst), kir_iadd(K, VAR(i), I(zeros[z][0]))), kir_const_f(K, 0));
                kir_loop_end(K);
            }
            if (hi > lo) {
                int i = kir_loop_begin(K, KL_PAR, hi - lo, "i");
                kir_expr *ow = kir_iadd(K, VAR(i), I(lo));
                kir_expr *src = kir_iadd(K, VAR(xrow), kir_iadd(K, kir_imul(K, ow, st), I(shift)));
                kir_store(K, bc, kir_iadd(K, VAR(dst), ow), kir_load(K, bx, src));
                kir_loop_end(K);
            }
        }
        kir_if_end(K);
    }
    close_n(b, 4);
}

/* col2im for stride 1: per input row, zero it, then add each tap's row
 * of col over the columns it covers. The covered ranges are constants,
 * so every inner loop reads and writes contiguously with no clamps (the
 * general version gathers through clamped indices). */
static void col2im_stride1(cg_builder *b, const cg_conv *cv, int col, int x)
{
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw), bx = cg_buf(b, x);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    int h = kir_loop_begin(K, KL_PAR, cv->h, "h");
    kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
    int xrow = kir_let(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(h)), cv->w), "xrow");
    int z = kir_loop_begin(K, KL_PAR, cv->w, "w");
    kir_store(K, bx, kir_iadd(K, VAR(xrow), VAR(z)), kir_const_f(K, 0));
    kir_loop_end(K);
    for (int64_t kh = 0; kh < cv->kh; kh++) {
        /* The output row whose tap kh lands on row h. */
        int oh = kir_let(K, kir_iadd(K, VAR(h), I(cv->p[0] - kh * cv->d[0])), "oh");
        kir_if_begin(K, in_range(b, VAR(oh), cv->oh));
        for (int64_t kw = 0; kw < cv->kw; kw++) {
            int64_t shift = cv->p[1] - kw * cv->d[1]; /* ow = w + shift */
            int64_t lo = shift < 0 ? -shift : 0, hi = cv->ow - shift < cv->w ? cv->ow - shift : cv->w;
            if (hi <= lo)
                continue;
            kir_expr *row = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(c), cv->kh), I(kh)), cv->kw), I(kw));
            int src = kir_let(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, row, cv->n), VAR(n)), hw),
                                          kir_imul(K, VAR(oh), cv->ow)), "src");
            int i = kir_loop_begin(K, KL_PAR, hi - lo, "i");
            kir_expr *w = kir_iadd(K, VAR(i), I(lo));
            kir_addto(K, bx, kir_iadd(K, VAR(xrow), w), kir_load(K, bc, kir_iadd(K, VAR(src), kir_iadd(K, w, I(shift)))));
            kir_loop_end(K);
        }
        kir_if_end(K);
    }
    close_n(b, 3);
}

/* Splits [0, len) into the ranges over which the set of taps k (k < taps)
 * with 0 <= i + shift0 - k d < out is the same: cuts[0] = 0 < cuts[1] <
 * ... < cuts[return] = len. */
static int tap_ranges(int64_t len, int64_t taps, int64_t shift0, int64_t d, int64_t out, int64_t *cuts)
{
    int m = 0;
    cuts[m++] = 0;
    cuts[m++] = len;
    for (int64_t k = 0; k < taps; k++) { /* tap k covers [k d - shift0, k d - shift0 + out) */
        int64_t ends[2] = {k * d - shift0, k * d - shift0 + out};
        for (int e = 0; e < 2; e++)
            if (ends[e] > 0 && ends[e] < len)
                cuts[m++] = ends[e];
    }
    for (int i = 1; i < m; i++) /* sort, then drop repeats */
        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            int64_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    int u = 1;
    for (int i = 1; i < m; i++)
        if (cuts[i] != cuts[u - 1])
            cuts[u++] = cuts[i];
    return u - 1;
}

/* col2im for stride 1 as a gather: every x element is one sum of its taps,
 * in f32, rounded once when stored (the scatter above adds into x and,
 * for bf16/f16, rounds after every tap: 2.2x the f32 time, and less
 * precise). The rows and columns split into ranges over which the same
 * taps land (the padding borders and the middle), each a loop of its own
 * with those taps unrolled and no bounds checks. The sum starts at 0 and
 * goes in (kh, kw) order, so f32 results are the scatter's bit for bit. */
static void col2im_gather(cg_builder *b, const cg_conv *cv, int col, int x)
{
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw), bx = cg_buf(b, x);
    int64_t hcut[2 * 8 + 2], wcut[2 * 8 + 2];
    int nh = tap_ranges(cv->h, cv->kh, cv->p[0], cv->d[0], cv->oh, hcut);
    int nw = tap_ranges(cv->w, cv->kw, cv->p[1], cv->d[1], cv->ow, wcut);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
    for (int hr = 0; hr < nh; hr++) {
        int hi = kir_loop_begin(K, KL_PAR, hcut[hr + 1] - hcut[hr], "h");
        int h = kir_let(K, kir_iadd(K, VAR(hi), I(hcut[hr])), "hh");
        int xrow = kir_let(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(h)), cv->w), "xrow");
        for (int wr = 0; wr < nw; wr++) {
            int wi = kir_loop_begin(K, KL_PAR, wcut[wr + 1] - wcut[wr], "w");
            int w = kir_let(K, kir_iadd(K, VAR(wi), I(wcut[wr])), "ww");
            kir_expr *acc = kir_const_f(K, 0);
            for (int64_t kh = 0; kh < cv->kh; kh++) {
                int64_t oh0 = hcut[hr] + cv->p[0] - kh * cv->d[0]; /* the output row at the range's first h */
                if (oh0 < 0 || oh0 >= cv->oh)
                    continue;
                for (int64_t kw = 0; kw < cv->kw; kw++) {
                    int64_t shift = cv->p[1] - kw * cv->d[1], ow0 = wcut[wr] + shift;
                    if (ow0 < 0 || ow0 >= cv->ow)
                        continue;
                    kir_expr *r = kir_iadd(K, kir_imul(K, VAR(c), cv->kh * cv->kw), I(kh * cv->kw + kw));
                    kir_expr *oh = kir_iadd(K, VAR(h), I(cv->p[0] - kh * cv->d[0]));
                    kir_expr *src = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, r, cv->n), VAR(n)), hw),
                                             kir_iadd(K, kir_imul(K, oh, cv->ow), kir_iadd(K, VAR(w), I(shift))));
                    acc = BIN(KB_ADD, acc, kir_load(K, bc, src));
                }
            }
            kir_store(K, bx, kir_iadd(K, VAR(xrow), VAR(w)), acc);
            kir_loop_end(K);
        }
        kir_loop_end(K);
    }
    close_n(b, 2);
    /* The loads only meet sums: the border ranges (a column or two,
     * which GCC leaves scalar) widen f16 with F16C; the middle ones are
     * staged rows on the CPU (codegen/emit_c.c). */
    K->scalar_f16 = true;
}

/* x[n, c, h, w] = sum over (kh, kw) of col[(c, kh, kw), n, (oh, ow)] for the
 * outputs whose window puts (kh, kw) on (h, w). */
void cg_build_col2im(cg_builder *b, const cg_conv *cv, int col, int x)
{
    if (cv->s[0] == 1 && cv->s[1] == 1 && cv->kh <= 8 && cv->kw <= 8 && cv->kh * cv->kw <= 25) {
        col2im_gather(b, cv, col, x);
        return;
    }
    if (cv->s[0] == 1 && cv->s[1] == 1 && cv->kh * cv->kw <= 49) {
        col2im_stride1(b, cv, col, x);
        return;
    }
    int64_t rows = cv->c * cv->kh * cv->kw, hw = cv->oh * cv->ow;
    K->work = cv->n * rows * hw;
    int bc = kir_buf_add(K, col, cv->dtype, cv->n * rows * hw), bx = cg_buf(b, x);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int c = kir_loop_begin(K, KL_PAR, cv->c, "c");
    int h = kir_loop_begin(K, KL_PAR, cv->h, "h");
    int w = kir_loop_begin(K, KL_PAR, cv->w, "w");
    kir_expr *acc = NULL;
    int accv = -1;
    bool unroll = cv->kh * cv->kw <= 16;
    int kh = -1, kw = -1;
    if (!unroll) {
        kh = kir_loop_begin(K, KL_RED, cv->kh, "kh");
        accv = kir_loop_acc(K, KA_SUM, "acc");
        kw = kir_loop_begin(K, KL_RED, cv->kw, "kw");
    }
    for (int64_t i = 0; i < (unroll ? cv->kh : 1); i++) {
        for (int64_t j = 0; j < (unroll ? cv->kw : 1); j++) {
            kir_expr *khe = unroll ? I(i) : VAR(kh), *kwe = unroll ? I(j) : VAR(kw);
            int th = kir_let(K, kir_iadd(K, kir_iadd(K, VAR(h), I(cv->p[0])), kir_imul(K, khe, -cv->d[0])), "th");
            int tw = kir_let(K, kir_iadd(K, kir_iadd(K, VAR(w), I(cv->p[1])), kir_imul(K, kwe, -cv->d[1])), "tw");
            kir_expr *oh = cv->s[0] == 1 ? VAR(th) : BIN(KB_IDIV, VAR(th), I(cv->s[0]));
            kir_expr *ow = cv->s[1] == 1 ? VAR(tw) : BIN(KB_IDIV, VAR(tw), I(cv->s[1]));
            int ohv = kir_let(K, oh, "oh"), owv = kir_let(K, ow, "ow");
            kir_expr *ok = BIN(KB_AND, BIN(KB_GE, VAR(th), I(0)), BIN(KB_GE, VAR(tw), I(0)));
            if (cv->s[0] > 1)
                ok = BIN(KB_AND, ok, BIN(KB_EQ, BIN(KB_IMOD, VAR(th), I(cv->s[0])), I(0)));
            if (cv->s[1] > 1)
                ok = BIN(KB_AND, ok, BIN(KB_EQ, BIN(KB_IMOD, VAR(tw), I(cv->s[1])), I(0)));
            ok = BIN(KB_AND, ok, BIN(KB_AND, BIN(KB_LT, VAR(ohv), I(cv->oh)), BIN(KB_LT, VAR(owv), I(cv->ow))));
            kir_expr *row = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(c), cv->kh), khe), cv->kw), kwe);
            kir_expr *pos = kir_iadd(K, kir_imul(K, clamp(b, VAR(ohv), cv->oh), cv->ow), clamp(b, VAR(owv), cv->ow));
            kir_expr *src = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, row, cv->n), VAR(n)), hw), pos);
            kir_expr *v = kir_select(K, ok, kir_load(K, bc, src), kir_const_f(K, 0));
            if (unroll)
                acc = acc ? BIN(KB_ADD, acc, v) : v;
            else
                kir_acc_add(K, accv, v);
        }
    }
    if (!unroll) {
        close_n(b, 2);
        acc = VAR(accv);
    }
    kir_expr *plane = kir_iadd(K, kir_imul(K, VAR(n), cv->c), VAR(c));
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, cv->h), VAR(h)), cv->w), VAR(w));
    kir_store(K, bx, dst, acc);
    close_n(b, 4);
}

/* Swaps the two outer axes of [a, b, inner]: out[j, i, k] = in[i, j, k]. */
void cg_build_swap_outer(cg_builder *b, int from, int to, ir_dtype dt, int64_t a, int64_t bb, int64_t inner)
{
    K->work = a * bb * inner;
    int bi = kir_buf_add(K, from, dt, a * bb * inner), bo = kir_buf_add(K, to, dt, a * bb * inner);
    int j = kir_loop_begin(K, KL_PAR, bb, "j");
    int i = kir_loop_begin(K, KL_PAR, a, "i");
    int k = kir_loop_begin(K, KL_PAR, inner, "k");
    kir_expr *src = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(i), bb), VAR(j)), inner), VAR(k));
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(j), a), VAR(i)), inner), VAR(k));
    kir_store(K, bo, dst, kir_load(K, bi, src));
    close_n(b, 3);
}

/* ---- direct convolution, for few input taps (the first layer) ---- */

/* xpad[n, c, h + p, w + p] = x[n, c, h, w], 0 in the border, so the direct
 * kernels read without bounds checks; widened to f32 for 16-bit x
 * (cg_conv_pad_dtype): the forward and the weight gradient read each
 * input once per output channel, and converted it each time (the weight
 * gradient 5.5 ms bf16, 12.6 fp16 against 2.9 fp32 per call). */
void cg_build_pad(cg_builder *b, const cg_conv *cv, int x, int xpad)
{
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    K->work = cv->n * cv->c * hp * wp;
    int bx = cg_buf(b, x), bp = kir_buf_add(K, xpad, cg_conv_pad_dtype(cv), cv->n * cv->c * hp * wp);
    int nc = kir_loop_begin(K, KL_PAR, cv->n * cv->c, "nc");
    int h = kir_loop_begin(K, KL_PAR, hp, "h");
    int w = kir_loop_begin(K, KL_PAR, wp, "w");
    kir_expr *ih = kir_iadd(K, VAR(h), I(-cv->p[0])), *iw = kir_iadd(K, VAR(w), I(-cv->p[1]));
    kir_expr *valid = BIN(KB_AND, in_range(b, ih, cv->h), in_range(b, iw, cv->w));
    kir_expr *src = plane_index(b, &(ir_type){IR_F32, 4, {cv->n, cv->c, cv->h, cv->w}}, VAR(nc), clamp(b, ih, cv->h),
                                clamp(b, iw, cv->w));
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(nc), hp), VAR(h)), wp), VAR(w));
    kir_store(K, bp, dst, kir_select(K, valid, kir_load(K, bx, src), kir_const_f(K, 0)));
    close_n(b, 3);
    /* The CPU's form (the same values): per plane, the border rows zeroed
     * and each inner row's border columns, its middle copied from x in
     * one contiguous run, without clamps or selects, which the C printer
     * stages as a row (16-bit x widened 8 at a time: the CNN's fp16 pad
     * 0.13 -> 0.04 ms). */
    kir_begin_host_body(K);
    int64_t top = cv->p[0] * wp, bottom = (hp - cv->p[0] - cv->h) * wp, right = wp - cv->p[1] - cv->w;
    int pl = kir_loop_begin(K, KL_PAR, cv->n * cv->c, "nc");
    int base = kir_let(K, kir_imul(K, VAR(pl), hp * wp), "plane");
    if (top > 0) {
        int i = kir_loop_begin(K, KL_PAR, top, "i");
        kir_store(K, bp, kir_iadd(K, VAR(base), VAR(i)), kir_const_f(K, 0));
        kir_loop_end(K);
    }
    int hi = kir_loop_begin(K, KL_PAR, cv->h, "h");
    int row = kir_let(K, kir_iadd(K, VAR(base), kir_imul(K, kir_iadd(K, VAR(hi), I(cv->p[0])), wp)), "row");
    if (cv->p[1] > 0) {
        int i = kir_loop_begin(K, KL_PAR, cv->p[1], "i");
        kir_store(K, bp, kir_iadd(K, VAR(row), VAR(i)), kir_const_f(K, 0));
        kir_loop_end(K);
    }
    int wi = kir_loop_begin(K, KL_PAR, cv->w, "w");
    kir_expr *from = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(pl), cv->h), VAR(hi)), cv->w), VAR(wi));
    kir_store(K, bp, kir_iadd(K, VAR(row), kir_iadd(K, VAR(wi), I(cv->p[1]))), kir_load(K, bx, from));
    kir_loop_end(K);
    if (right > 0) {
        int i = kir_loop_begin(K, KL_PAR, right, "i");
        kir_store(K, bp, kir_iadd(K, VAR(row), kir_iadd(K, VAR(i), I(cv->p[1] + cv->w))), kir_const_f(K, 0));
        kir_loop_end(K);
    }
    kir_loop_end(K);
    if (bottom > 0) {
        int i = kir_loop_begin(K, KL_PAR, bottom, "i");
        kir_store(K, bp, kir_iadd(K, VAR(base), kir_iadd(K, VAR(i), I((cv->p[0] + cv->h) * wp))), kir_const_f(K, 0));
        kir_loop_end(K);
    }
    kir_loop_end(K);
}

/* The flat index of xpad[n, c, oh s + kh d, ow s + kw d]. */
static kir_expr *xpad_at(cg_builder *b, const cg_conv *cv, kir_expr *n, int64_t c, int64_t kh, int64_t kw, int oh, int ow)
{
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    kir_expr *plane = kir_iadd(K, kir_imul(K, n, cv->c), I(c));
    kir_expr *row = kir_iadd(K, kir_imul(K, VAR(oh), cv->s[0]), I(kh * cv->d[0]));
    kir_expr *col = kir_iadd(K, kir_imul(K, VAR(ow), cv->s[1]), I(kw * cv->d[1]));
    return kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, plane, hp), row), wp), col);
}

/* y[n, o, oh, ow] = sum over taps of xpad[...] w[o, tap]: every tap
 * unrolled, the loop over ow the vectorised leaf. */
void cg_build_conv_direct(cg_builder *b, const cg_conv *cv, int xpad, int w, int y)
{
    int64_t taps = cv->c * cv->kh * cv->kw;
    K->work = cv->n * cv->o * cv->oh * cv->ow * taps;
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    int bp = kir_buf_add(K, xpad, cg_conv_pad_dtype(cv), cv->n * cv->c * hp * wp), bw = cg_buf(b, w), by = cg_buf(b, y);
    int n = kir_loop_begin(K, KL_PAR, cv->n, "n");
    int o = kir_loop_begin(K, KL_PAR, cv->o, "o");
    int wt[64];
    for (int64_t t = 0; t < taps; t++)
        wt[t] = kir_let(K, kir_load(K, bw, kir_iadd(K, kir_imul(K, VAR(o), taps), I(t))), "wt");
    int oh = kir_loop_begin(K, KL_PAR, cv->oh, "oh");
    int ow = kir_loop_begin(K, KL_PAR, cv->ow, "ow");
    kir_expr *acc = NULL;
    for (int64_t c = 0, t = 0; c < cv->c; c++)
        for (int64_t kh = 0; kh < cv->kh; kh++)
            for (int64_t kw = 0; kw < cv->kw; kw++, t++) {
                kir_expr *term = BIN(KB_MUL, kir_load(K, bp, xpad_at(b, cv, VAR(n), c, kh, kw, oh, ow)), VAR(wt[t]));
                acc = acc ? BIN(KB_ADD, acc, term) : term;
            }
    kir_expr *dst = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(n), cv->o), VAR(o)), cv->oh), VAR(oh)),
                                         cv->ow), VAR(ow));
    kir_store(K, by, dst, acc);
    close_n(b, 4);
}

/* dw[o, tap] = sum over n, oh, ow of dy[n, o, oh, ow] xpad[n, tap...]:
 * one pass over dy per output channel, every tap a separate accumulator
 * of the same reduction. */
void cg_build_conv_direct_wgrad(cg_builder *b, const cg_conv *cv, int xpad, int dy, int dw)
{
    int64_t taps = cv->c * cv->kh * cv->kw;
    K->work = cv->n * cv->o * cv->oh * cv->ow * taps;
    int64_t hp = cv->h + 2 * cv->p[0], wp = cv->w + 2 * cv->p[1];
    int bp = kir_buf_add(K, xpad, cg_conv_pad_dtype(cv), cv->n * cv->c * hp * wp), bdy = cg_buf(b, dy), bdw = cg_buf(b, dw);
    int o = kir_loop_begin(K, KL_PAR, cv->o, "o");
    for (int64_t t0 = 0; t0 < taps; t0 += 16) {
        int64_t nt = taps - t0 < 16 ? taps - t0 : 16;
        int n = kir_loop_begin(K, KL_RED, cv->n, "n");
        int acc[16];
        for (int64_t t = 0; t < nt; t++)
            acc[t] = kir_loop_acc(K, KA_SUM, "acc");
        int oh = kir_loop_begin(K, KL_RED, cv->oh, "oh");
        int ow = kir_loop_begin(K, KL_RED, cv->ow, "ow");
        kir_expr *dyi = kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, VAR(n), cv->o), VAR(o)), cv->oh),
                                                         VAR(oh)), cv->ow), VAR(ow));
        int d = kir_let(K, kir_load(K, bdy, dyi), "dy");
        for (int64_t t = 0; t < nt; t++) {
            int64_t tap = t0 + t, c = tap / (cv->kh * cv->kw), kh = tap / cv->kw % cv->kh, kw = tap % cv->kw;
            kir_acc_add(K, acc[t], BIN(KB_MUL, VAR(d), kir_load(K, bp, xpad_at(b, cv, VAR(n), c, kh, kw, oh, ow))));
        }
        close_n(b, 3);
        for (int64_t t = 0; t < nt; t++)
            kir_store(K, bdw, kir_iadd(K, kir_imul(K, VAR(o), taps), I(t0 + t)), VAR(acc[t]));
    }
    kir_loop_end(K);
}
