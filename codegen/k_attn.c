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
 * result dtype is f32 (f64 for f64 models): the op's precision class
 * keeps the accumulating rows out of bf16. */
#include <math.h>

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

static kir_expr *at(cg_builder *b, int buf, int base, int64_t row_len, kir_expr *row, int c)
{
    kir_expr *idx = kir_iadd(K, VAR(base), kir_iadd(K, kir_imul(K, row, row_len), VAR(c)));
    return kir_load(K, buf, idx);
}

/* sum over c < n of x[xb + xr * n + c] * y[yb + yr * n + c], serially. */
static int dot(cg_builder *b, int x, int xb, kir_expr *xr, int y, int yb, kir_expr *yr, int64_t n, const char *hint)
{
    int s = kir_let(K, F(0), hint);
    int c = kir_loop_begin(K, KL_SEQ, n, "c");
    kir_set(K, s, BIN(KB_ADD, VAR(s), BIN(KB_MUL, at(b, x, xb, n, xr, c), at(b, y, yb, n, yr, c))));
    kir_loop_end(K);
    return s;
}

/* buf[base + c] = buf[base + c] * keep + add * src[sb + sr * n + c] for c < n
 * (keep NULL: 1). */
static void axpy_row(cg_builder *b, int buf, int base, kir_expr *keep, kir_expr *add, int src, int sb, kir_expr *sr, int64_t n)
{
    int c = kir_loop_begin(K, KL_SEQ, n, "c");
    kir_expr *idx = kir_iadd(K, VAR(base), VAR(c));
    kir_expr *old = kir_load(K, buf, idx);
    if (keep)
        old = BIN(KB_MUL, old, keep);
    kir_store(K, buf, idx, BIN(KB_ADD, old, BIN(KB_MUL, add, at(b, src, sb, n, sr, c))));
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

/* Opens the IF that hides key j from query i in a causal attention. */
static void mask_begin(cg_builder *b, const attn_geom *a, int i, int j)
{
    if (a->causal)
        kir_if_begin(K, BIN(KB_LE, VAR(j), VAR(i)));
}

static void mask_end(cg_builder *b, const attn_geom *a)
{
    if (a->causal)
        kir_if_end(K);
}

static void attention_forward(cg_builder *b, const ir_node *n)
{
    attn_geom a = geom_of(b->grp->g, n, 0);
    int qb = cg_buf(b, n->in.v[0]), kb = cg_buf(b, n->in.v[1]), vb = cg_buf(b, n->in.v[2]);
    int ob = cg_buf(b, n->out.v[0]), lb = cg_buf(b, n->out.v[1]);
    K->work = a.batch * a.tq * a.tk * (a.d + a.dv);
    int r = kir_loop_begin(K, KL_PAR, a.batch * a.tq, "r");
    int i = kir_let(K, BIN(KB_IMOD, VAR(r), I(a.tq)), "i");
    int bh = kir_let(K, BIN(KB_IDIV, VAR(r), I(a.tq)), "bh");
    int qo = kir_let(K, kir_imul(K, VAR(r), a.d), "qo");
    int oo = kir_let(K, kir_imul(K, VAR(r), a.dv), "oo");
    int kbase = kir_let(K, kir_imul(K, VAR(bh), a.tk * a.d), "kbase");
    int vbase = kir_let(K, kir_imul(K, VAR(bh), a.tk * a.dv), "vbase");
    int m = kir_let(K, F(-INFINITY), "m");
    int l = kir_let(K, F(0), "l");
    zero_row(b, ob, oo, a.dv);
    int j = kir_loop_begin(K, KL_SEQ, a.tk, "j");
    mask_begin(b, &a, i, j);
    int s = dot(b, qb, qo, I(0), kb, kbase, VAR(j), a.d, "s");
    int sc = kir_let(K, BIN(KB_MUL, VAR(s), F(a.scale)), "sc");
    int mn = kir_let(K, BIN(KB_MAX, VAR(m), VAR(sc)), "mn");
    /* exp(-inf) = 0 at the first key: the empty partial row vanishes. */
    int alpha = kir_let(K, kir_un(K, KU_EXP, BIN(KB_SUB, VAR(m), VAR(mn))), "alpha");
    int p = kir_let(K, kir_un(K, KU_EXP, BIN(KB_SUB, VAR(sc), VAR(mn))), "p");
    kir_set(K, l, BIN(KB_ADD, BIN(KB_MUL, VAR(l), VAR(alpha)), VAR(p)));
    axpy_row(b, ob, oo, VAR(alpha), VAR(p), vb, vbase, VAR(j), a.dv);
    kir_set(K, m, VAR(mn));
    mask_end(b, &a);
    kir_loop_end(K);
    int inv = kir_let(K, BIN(KB_DIV, F(1), VAR(l)), "inv");
    int c = kir_loop_begin(K, KL_SEQ, a.dv, "c");
    kir_expr *idx = kir_iadd(K, VAR(oo), VAR(c));
    kir_store(K, ob, idx, BIN(KB_MUL, kir_load(K, ob, idx), VAR(inv)));
    kir_loop_end(K);
    kir_store(K, lb, VAR(r), BIN(KB_ADD, VAR(m), kir_un(K, KU_LOG, VAR(l))));
    kir_loop_end(K);
}

static void attention_grad_q(cg_builder *b, const ir_node *n)
{
    attn_geom a = geom_of(b->grp->g, n, 1);
    int dob = cg_buf(b, n->in.v[0]), qb = cg_buf(b, n->in.v[1]), kb = cg_buf(b, n->in.v[2]);
    int vb = cg_buf(b, n->in.v[3]), ob = cg_buf(b, n->in.v[4]), lb = cg_buf(b, n->in.v[5]);
    int dqb = cg_buf(b, n->out.v[0]);
    K->work = a.batch * a.tq * a.tk * (2 * a.d + a.dv);
    int r = kir_loop_begin(K, KL_PAR, a.batch * a.tq, "r");
    int i = kir_let(K, BIN(KB_IMOD, VAR(r), I(a.tq)), "i");
    int bh = kir_let(K, BIN(KB_IDIV, VAR(r), I(a.tq)), "bh");
    int qo = kir_let(K, kir_imul(K, VAR(r), a.d), "qo");
    int oo = kir_let(K, kir_imul(K, VAR(r), a.dv), "oo");
    int kbase = kir_let(K, kir_imul(K, VAR(bh), a.tk * a.d), "kbase");
    int vbase = kir_let(K, kir_imul(K, VAR(bh), a.tk * a.dv), "vbase");
    int dd = dot(b, dob, oo, I(0), ob, oo, I(0), a.dv, "dd");
    int lse = kir_let(K, kir_load(K, lb, VAR(r)), "lse");
    zero_row(b, dqb, qo, a.d);
    int j = kir_loop_begin(K, KL_SEQ, a.tk, "j");
    mask_begin(b, &a, i, j);
    int s = dot(b, qb, qo, I(0), kb, kbase, VAR(j), a.d, "s");
    int p = kir_let(K, kir_un(K, KU_EXP, BIN(KB_SUB, BIN(KB_MUL, VAR(s), F(a.scale)), VAR(lse))), "p");
    int dp = dot(b, dob, oo, I(0), vb, vbase, VAR(j), a.dv, "dp");
    int ds = kir_let(K, BIN(KB_MUL, BIN(KB_MUL, VAR(p), BIN(KB_SUB, VAR(dp), VAR(dd))), F(a.scale)), "ds");
    axpy_row(b, dqb, qo, NULL, VAR(ds), kb, kbase, VAR(j), a.d);
    mask_end(b, &a);
    kir_loop_end(K);
    kir_loop_end(K);
}

static void attention_grad_kv(cg_builder *b, const ir_node *n)
{
    attn_geom a = geom_of(b->grp->g, n, 1);
    int dob = cg_buf(b, n->in.v[0]), qb = cg_buf(b, n->in.v[1]), kb = cg_buf(b, n->in.v[2]);
    int vb = cg_buf(b, n->in.v[3]), ob = cg_buf(b, n->in.v[4]), lb = cg_buf(b, n->in.v[5]);
    int dkb = cg_buf(b, n->out.v[0]), dvb = cg_buf(b, n->out.v[1]);
    K->work = a.batch * a.tq * a.tk * (2 * a.d + 3 * a.dv);
    int r = kir_loop_begin(K, KL_PAR, a.batch * a.tk, "r");
    int j = kir_let(K, BIN(KB_IMOD, VAR(r), I(a.tk)), "j");
    int bh = kir_let(K, BIN(KB_IDIV, VAR(r), I(a.tk)), "bh");
    int ko = kir_let(K, kir_imul(K, VAR(r), a.d), "ko");
    int vo = kir_let(K, kir_imul(K, VAR(r), a.dv), "vo");
    int qbase = kir_let(K, kir_imul(K, VAR(bh), a.tq * a.d), "qbase");
    int obase = kir_let(K, kir_imul(K, VAR(bh), a.tq * a.dv), "obase");
    int lbase = kir_let(K, kir_imul(K, VAR(bh), a.tq), "lbase");
    zero_row(b, dkb, ko, a.d);
    zero_row(b, dvb, vo, a.dv);
    int i = kir_loop_begin(K, KL_SEQ, a.tq, "i");
    mask_begin(b, &a, i, j);
    int s = dot(b, qb, qbase, VAR(i), kb, ko, I(0), a.d, "s");
    int lse = kir_let(K, kir_load(K, lb, kir_iadd(K, VAR(lbase), VAR(i))), "lse");
    int p = kir_let(K, kir_un(K, KU_EXP, BIN(KB_SUB, BIN(KB_MUL, VAR(s), F(a.scale)), VAR(lse))), "p");
    int dp = dot(b, dob, obase, VAR(i), vb, vo, I(0), a.dv, "dp");
    int dd = dot(b, dob, obase, VAR(i), ob, obase, VAR(i), a.dv, "dd");
    int ds = kir_let(K, BIN(KB_MUL, BIN(KB_MUL, VAR(p), BIN(KB_SUB, VAR(dp), VAR(dd))), F(a.scale)), "ds");
    axpy_row(b, dvb, vo, NULL, VAR(p), dob, obase, VAR(i), a.dv);
    axpy_row(b, dkb, ko, NULL, VAR(ds), qb, qbase, VAR(i), a.d);
    mask_end(b, &a);
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
