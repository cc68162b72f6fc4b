/* Attention kernels: softmax(scale q k^T) v with an online softmax, so no
 * Tq x Tk buffer exists in forward or backward (FlashAttention-2's
 * arithmetic, one query or key row per iteration).
 *
 * Forward: one PAR iteration per query row (batch x heads x Tq): a pass
 * over the keys keeps the running maximum m and sum l of exp(s - m) and
 * rescales the partial output row, which lives in the result buffer,
 * whenever m grows; at the end the row is divided by l and lse = m + log l
 * is stored for backward.
 *
 * Backward recomputes each probability from lse, p = exp(s - lse), and is
 * split by who owns the result rows, so no two iterations write the same
 * element and there is no atomic or cross-thread reduction (bit for bit
 * the same result for any thread count):
 *   grad_q, per query row i:  dq_i = scale sum_j p_ij (dp_ij - D_i) k_j
 *   grad_kv, per key row j:   dv_j = sum_i p_ij dout_i,
 *                             dk_j = scale sum_i p_ij (dp_ij - D_i) q_i
 * with dp_ij = dout_i . v_j and D_i = dout_i . out_i.
 *
 * Every dot product is a SEQ loop inside the row's iteration: on the GPU
 * that is one thread per row, grid-stride (codegen/cuda_map.c). The
 * result dtype is f32 (f64 for f64 models), also for bf16 operands
 * (precision = bf16: widened as they are loaded), so the accumulating
 * rows stay out of bf16. */
#include <math.h>

#include "attn_native.h"
#include "cg.h"

#define K (b->k)
#define BIN(op, x, y) kir_bin(K, op, x, y)
#define VAR(v) kir_varref(K, v)
#define F(x) kir_const_f(K, x)
#define I(x) kir_const_i(K, x)

typedef struct attn_geom {
    int64_t batch; /* product of the leading dims (batch x heads) */
    int64_t tq, tk, d, dv;
    bool causal;
    double scale;
} attn_geom;

/* q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] from operands q0.. */
static attn_geom geom_of(const ir_graph *g, const ir_node *n, int q0)
{
    const ir_type *q = &ir_val(g, n->in.v[q0])->type, *v = &ir_val(g, n->in.v[q0 + 2])->type;
    const ir_type *k = &ir_val(g, n->in.v[q0 + 1])->type;
    attn_geom a = {.batch = 1};
    for (int i = 0; i < q->rank - 2; i++)
        a.batch *= q->dim[i];
    a.tq = q->dim[q->rank - 2];
    a.d = q->dim[q->rank - 1];
    a.tk = k->dim[k->rank - 2];
    a.dv = v->dim[v->rank - 1];
    a.causal = ir_attr_int(&n->attrs, "causal", 1) != 0;
    a.scale = ir_attr_float(&n->attrs, "scale", 1);
    return a;
}

/* Rows are processed in tiles of TILE (or fewer: the largest power of two
 * up to 8 dividing the row count), one tile per PAR iteration: each load
 * of a shared key, value, query or gradient row serves every row of the
 * tile, and the tile's dot products are independent accumulator chains.
 * Keys (in backward: queries) are visited one at a time; the running
 * output rows live in the result buffer. */
enum { TILE_MAX = 8, TILE_KV = 4 };

static int tile_of(int64_t rows, int max)
{
    int t = max;
    while (t > 1 && rows % t)
        t /= 2;
    return t;
}

/* s[r] = sum over c < n of x[xb[r] + c] * y[yb + c] for r < nr: the rows
 * of x against one shared row of y. Inside the key loop the sums are a
 * RED loop's accumulators (vectorised on the CPU, serial per GPU thread);
 * directly inside the PAR loop (serial: a RED loop there would be a
 * block-level reduction on the GPU) a SEQ loop adds into locals. */
static void dots(cg_builder *b, int nr, int *s, int x, const int *xb, int y, int yb, int64_t n, bool serial, const char *hint)
{
    if (serial)
        for (int r = 0; r < nr; r++)
            s[r] = kir_let(K, F(0), hint);
    int c = kir_loop_begin(K, serial ? KL_SEQ : KL_RED, n, "c");
    if (!serial)
        for (int r = 0; r < nr; r++)
            s[r] = kir_loop_acc(K, KA_SUM, hint);
    int yc = kir_let(K, kir_load(K, y, kir_iadd(K, VAR(yb), VAR(c))), "yc");
    for (int r = 0; r < nr; r++) {
        kir_expr *t = BIN(KB_MUL, kir_load(K, x, kir_iadd(K, VAR(xb[r]), VAR(c))), VAR(yc));
        if (serial)
            kir_set(K, s[r], BIN(KB_ADD, VAR(s[r]), t));
        else
            kir_acc_add(K, s[r], t);
    }
    kir_loop_end(K);
}

/* buf[base[r] + c] = buf[base[r] + c] * keep[r] + add[r] * src[sb + c] for
 * c < n, r < nr (keep NULL: 1): one shared source row into each row. */
static void axpys(cg_builder *b, int nr, int buf, const int *base, const int *keep, const int *add, int src, int sb, int64_t n)
{
    int c = kir_loop_begin(K, KL_SEQ, n, "c");
    int sc = kir_let(K, kir_load(K, src, kir_iadd(K, VAR(sb), VAR(c))), "sc");
    for (int r = 0; r < nr; r++) {
        kir_expr *idx = kir_iadd(K, VAR(base[r]), VAR(c));
        kir_expr *old = kir_load(K, buf, idx);
        if (keep)
            old = BIN(KB_MUL, old, VAR(keep[r]));
        kir_store(K, buf, idx, BIN(KB_ADD, old, BIN(KB_MUL, VAR(add[r]), VAR(sc))));
    }
    kir_loop_end(K);
}

/* Zeroes the row an iteration owns before it accumulates into it. */
static void zero_row(cg_builder *b, int buf, int base, int64_t n)
{
    K->bufs[buf].written_first = true;
    int c = kir_loop_begin(K, KL_SEQ, n, "c");
    kir_store(K, buf, kir_iadd(K, VAR(base), VAR(c)), F(0));
    kir_loop_end(K);
}

/* var = row * len, for the rows first + r of a tile. */
static void row_offsets(cg_builder *b, int nr, int first, int64_t len, int *out, const char *hint)
{
    for (int r = 0; r < nr; r++)
        out[r] = kir_let(K, kir_imul(K, kir_iadd(K, VAR(first), I(r)), len), hint);
}

static void attention_forward(cg_builder *b, const ir_node *n)
{
    attn_geom a = geom_of(b->grp->g, n, 0);
    int qb = cg_buf(b, n->in.v[0]), kb = cg_buf(b, n->in.v[1]), vb = cg_buf(b, n->in.v[2]);
    int ob = cg_buf(b, n->out.v[0]), lb = cg_buf(b, n->out.v[1]);
    int nt = tile_of(a.tq, TILE_MAX);
    K->work = a.batch * a.tq * a.tk * (a.d + a.dv);
    int t = kir_loop_begin(K, KL_PAR, a.batch * a.tq / nt, "t");
    int r0 = kir_let(K, kir_imul(K, VAR(t), nt), "r0");
    int i0 = kir_let(K, BIN(KB_IMOD, VAR(r0), I(a.tq)), "i0");
    int bh = kir_let(K, BIN(KB_IDIV, VAR(r0), I(a.tq)), "bh");
    int qo[TILE_MAX], oo[TILE_MAX], m[TILE_MAX], l[TILE_MAX], s[TILE_MAX], alpha[TILE_MAX], p[TILE_MAX];
    row_offsets(b, nt, r0, a.d, qo, "qo");
    row_offsets(b, nt, r0, a.dv, oo, "oo");
    for (int r = 0; r < nt; r++) {
        m[r] = kir_let(K, F(-INFINITY), "m");
        l[r] = kir_let(K, F(0), "l");
        zero_row(b, ob, oo[r], a.dv);
    }
    int j = kir_loop_begin(K, KL_SEQ, a.tk, "j");
    if (a.causal) /* keys after the tile's last query are hidden from all of it */
        kir_if_begin(K, BIN(KB_LE, VAR(j), kir_iadd(K, VAR(i0), I(nt - 1))));
    int ko = kir_let(K, kir_iadd(K, kir_imul(K, VAR(bh), a.tk * a.d), kir_imul(K, VAR(j), a.d)), "ko");
    int vo = kir_let(K, kir_iadd(K, kir_imul(K, VAR(bh), a.tk * a.dv), kir_imul(K, VAR(j), a.dv)), "vo");
    dots(b, nt, s, qb, qo, kb, ko, a.d, false, "s");
    for (int r = 0; r < nt; r++) {
        kir_expr *sc = BIN(KB_MUL, VAR(s[r]), F(a.scale));
        if (a.causal) /* key 0 is never hidden, so m is finite from then on */
            sc = kir_select(K, BIN(KB_LE, VAR(j), kir_iadd(K, VAR(i0), I(r))), sc, F(-INFINITY));
        int scv = kir_let(K, sc, "sc");
        int mn = kir_let(K, BIN(KB_MAX, VAR(m[r]), VAR(scv)), "mn");
        /* exp(-inf) = 0 at the first key: the empty partial row vanishes. */
        alpha[r] = kir_let(K, kir_un(K, KU_EXP, BIN(KB_SUB, VAR(m[r]), VAR(mn))), "alpha");
        p[r] = kir_let(K, kir_un(K, KU_EXP, BIN(KB_SUB, VAR(scv), VAR(mn))), "p");
        kir_set(K, l[r], BIN(KB_ADD, BIN(KB_MUL, VAR(l[r]), VAR(alpha[r])), VAR(p[r])));
        kir_set(K, m[r], VAR(mn));
    }
    axpys(b, nt, ob, oo, alpha, p, vb, vo, a.dv);
    if (a.causal)
        kir_if_end(K);
    kir_loop_end(K);
    int inv[TILE_MAX];
    for (int r = 0; r < nt; r++) {
        inv[r] = kir_let(K, BIN(KB_DIV, F(1), VAR(l[r])), "inv");
        kir_store(K, lb, kir_iadd(K, VAR(r0), I(r)), BIN(KB_ADD, VAR(m[r]), kir_un(K, KU_LOG, VAR(l[r]))));
    }
    int c = kir_loop_begin(K, KL_SEQ, a.dv, "c");
    for (int r = 0; r < nt; r++) {
        kir_expr *idx = kir_iadd(K, VAR(oo[r]), VAR(c));
        kir_store(K, ob, idx, BIN(KB_MUL, kir_load(K, ob, idx), VAR(inv[r])));
    }
    kir_loop_end(K);
    kir_loop_end(K);
}

/* ds = p (dp - D) scale, with p = exp(s scale - lse) or 0 where hidden. */
static int grad_of_score(cg_builder *b, int s, int lse, int dp, int dd, kir_expr *visible, double scale, int *p)
{
    kir_expr *e = kir_un(K, KU_EXP, BIN(KB_SUB, BIN(KB_MUL, VAR(s), F(scale)), VAR(lse)));
    if (visible)
        e = kir_select(K, visible, e, F(0));
    *p = kir_let(K, e, "p");
    return kir_let(K, BIN(KB_MUL, BIN(KB_MUL, VAR(*p), BIN(KB_SUB, VAR(dp), VAR(dd))), F(scale)), "ds");
}

static void attention_grad_q(cg_builder *b, const ir_node *n)
{
    attn_geom a = geom_of(b->grp->g, n, 1);
    int dob = cg_buf(b, n->in.v[0]), qb = cg_buf(b, n->in.v[1]), kb = cg_buf(b, n->in.v[2]);
    int vb = cg_buf(b, n->in.v[3]), ob = cg_buf(b, n->in.v[4]), lb = cg_buf(b, n->in.v[5]);
    int dqb = cg_buf(b, n->out.v[0]);
    int nt = tile_of(a.tq, TILE_MAX);
    K->work = a.batch * a.tq * a.tk * (2 * a.d + a.dv);
    int t = kir_loop_begin(K, KL_PAR, a.batch * a.tq / nt, "t");
    int r0 = kir_let(K, kir_imul(K, VAR(t), nt), "r0");
    int i0 = kir_let(K, BIN(KB_IMOD, VAR(r0), I(a.tq)), "i0");
    int bh = kir_let(K, BIN(KB_IDIV, VAR(r0), I(a.tq)), "bh");
    int qo[TILE_MAX], oo[TILE_MAX], lse[TILE_MAX], dd[TILE_MAX], s[TILE_MAX], dp[TILE_MAX], p[TILE_MAX], ds[TILE_MAX];
    row_offsets(b, nt, r0, a.d, qo, "qo");
    row_offsets(b, nt, r0, a.dv, oo, "oo");
    for (int r = 0; r < nt; r++) {
        lse[r] = kir_let(K, kir_load(K, lb, kir_iadd(K, VAR(r0), I(r))), "lse");
        dots(b, 1, &dd[r], dob, &oo[r], ob, oo[r], a.dv, true, "dd");
        zero_row(b, dqb, qo[r], a.d);
    }
    int j = kir_loop_begin(K, KL_SEQ, a.tk, "j");
    if (a.causal)
        kir_if_begin(K, BIN(KB_LE, VAR(j), kir_iadd(K, VAR(i0), I(nt - 1))));
    int ko = kir_let(K, kir_iadd(K, kir_imul(K, VAR(bh), a.tk * a.d), kir_imul(K, VAR(j), a.d)), "ko");
    int vo = kir_let(K, kir_iadd(K, kir_imul(K, VAR(bh), a.tk * a.dv), kir_imul(K, VAR(j), a.dv)), "vo");
    dots(b, nt, s, qb, qo, kb, ko, a.d, false, "s");
    dots(b, nt, dp, dob, oo, vb, vo, a.dv, false, "dp");
    for (int r = 0; r < nt; r++) {
        kir_expr *vis = a.causal ? BIN(KB_LE, VAR(j), kir_iadd(K, VAR(i0), I(r))) : NULL;
        ds[r] = grad_of_score(b, s[r], lse[r], dp[r], dd[r], vis, a.scale, &p[r]);
    }
    axpys(b, nt, dqb, qo, NULL, ds, kb, ko, a.d);
    if (a.causal)
        kir_if_end(K);
    kir_loop_end(K);
    kir_loop_end(K);
}

static void attention_grad_kv(cg_builder *b, const ir_node *n)
{
    attn_geom a = geom_of(b->grp->g, n, 1);
    int dob = cg_buf(b, n->in.v[0]), qb = cg_buf(b, n->in.v[1]), kb = cg_buf(b, n->in.v[2]);
    int vb = cg_buf(b, n->in.v[3]), ob = cg_buf(b, n->in.v[4]), lb = cg_buf(b, n->in.v[5]);
    int dkb = cg_buf(b, n->out.v[0]), dvb = cg_buf(b, n->out.v[1]);
    int nt = tile_of(a.tk, TILE_KV); /* four values per row: 8 rows spill GPU registers */
    K->work = a.batch * a.tq * a.tk * (2 * a.d + 3 * a.dv);
    int t = kir_loop_begin(K, KL_PAR, a.batch * a.tk / nt, "t");
    int r0 = kir_let(K, kir_imul(K, VAR(t), nt), "r0");
    int j0 = kir_let(K, BIN(KB_IMOD, VAR(r0), I(a.tk)), "j0");
    int bh = kir_let(K, BIN(KB_IDIV, VAR(r0), I(a.tk)), "bh");
    int ko[TILE_MAX], vo[TILE_MAX], s[TILE_MAX], dp[TILE_MAX], p[TILE_MAX], ds[TILE_MAX];
    row_offsets(b, nt, r0, a.d, ko, "ko");
    row_offsets(b, nt, r0, a.dv, vo, "vo");
    for (int r = 0; r < nt; r++) {
        zero_row(b, dkb, ko[r], a.d);
        zero_row(b, dvb, vo[r], a.dv);
    }
    int i = kir_loop_begin(K, KL_SEQ, a.tq, "i");
    if (a.causal) /* queries before the tile's first key see none of it */
        kir_if_begin(K, BIN(KB_LE, VAR(j0), VAR(i)));
    int row = kir_let(K, kir_iadd(K, kir_imul(K, VAR(bh), a.tq), VAR(i)), "row");
    int qo = kir_let(K, kir_imul(K, VAR(row), a.d), "qo");
    int oo = kir_let(K, kir_imul(K, VAR(row), a.dv), "oo");
    int lse = kir_let(K, kir_load(K, lb, VAR(row)), "lse");
    int dd;
    dots(b, 1, &dd, dob, &oo, ob, oo, a.dv, false, "dd");
    dots(b, nt, s, kb, ko, qb, qo, a.d, false, "s");
    dots(b, nt, dp, vb, vo, dob, oo, a.dv, false, "dp");
    for (int r = 0; r < nt; r++) {
        kir_expr *vis = a.causal ? BIN(KB_LE, kir_iadd(K, VAR(j0), I(r)), VAR(i)) : NULL;
        ds[r] = grad_of_score(b, s[r], lse, dp[r], dd, vis, a.scale, &p[r]);
    }
    axpys(b, nt, dvb, vo, NULL, p, dob, oo, a.dv);
    axpys(b, nt, dkb, ko, NULL, ds, qb, qo, a.d);
    if (a.causal)
        kir_if_end(K);
    kir_loop_end(K);
    kir_loop_end(K);
}

void cg_build_attention(cg_builder *b, const ir_node *n)
{
    switch (n->op) {
    case IR_OP_ATTENTION:
        attention_forward(b, n);
        break;
    case IR_OP_ATTENTION_GRAD_Q:
        attention_grad_q(b, n);
        break;
    case IR_OP_ATTENTION_GRAD_KV:
        attention_grad_kv(b, n);
        break;
    default:
        kl_panic("cg_build_attention: %s is not an attention op", ir_op_name(n->op));
    }
}

static int kernel_param_of(const kir_kernel *k, int value)
{
    for (int i = 0; i < k->nbufs; i++)
        if (k->bufs[i].value == value)
            return i;
    return -1;
}

bool cg_attention_native(const cg_group *grp, const kir_kernel *k, cg_attn_native *out)
{
    *out = (cg_attn_native){.kind = CG_ATTN_NONE};
    if (grp->n != 1)
        return false;
    const ir_graph *g = grp->g;
    const ir_node *n = ir_nd(g, grp->nodes[0]);
    cg_attn_kind kind = n->op == IR_OP_ATTENTION           ? CG_ATTN_FORWARD
                        : n->op == IR_OP_ATTENTION_GRAD_Q  ? CG_ATTN_GRAD_Q
                        : n->op == IR_OP_ATTENTION_GRAD_KV ? CG_ATTN_GRAD_KV
                                                           : CG_ATTN_NONE;
    if (kind == CG_ATTN_NONE || n->in.n + n->out.n > CG_ATTN_MAX_ARGS)
        return false;
    cg_attn_native a = {.kind = kind, .nargs = n->in.n + n->out.n};
    for (int i = 0; i < a.nargs; i++) {
        int v = i < n->in.n ? n->in.v[i] : n->out.v[i - n->in.n];
        ir_dtype dt = ir_val(g, v)->type.dtype;
        /* Results f32; operands f32 or bf16 (q, k and v alike). */
        bool operand = i < n->in.n && (kind == CG_ATTN_FORWARD || i < 4);
        if (dt != IR_F32 && !(dt == IR_BF16 && operand))
            return false;
        a.bf16[i] = dt == IR_BF16;
        a.arg[i] = kernel_param_of(k, v);
        if (a.arg[i] < 0)
            return false;
    }
    int q0 = kind == CG_ATTN_FORWARD ? 0 : 1;
    if (a.bf16[q0 + 1] != a.bf16[q0] || a.bf16[q0 + 2] != a.bf16[q0])
        return false;
    attn_geom geo = geom_of(g, n, q0);
    a.batch = geo.batch;
    a.tq = geo.tq;
    a.tk = geo.tk;
    a.d = geo.d;
    a.dv = geo.dv;
    a.causal = geo.causal;
    a.scale = geo.scale;
    *out = a;
    return true;
}
