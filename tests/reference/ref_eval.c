/* The reference evaluator: one naive function per op (see ref_eval.h).
 *
 * The table at the end is built by re-including ir/ops.def, so an op
 * added to the table without a ref_<ID> function here does not compile.
 * Every function reads its operands with IN, makes its results with OUT
 * (zero-filled) and computes them from the op's definition with plain
 * loops over indices: no tiling, no fusion, nothing shared with codegen. */
#include "ref_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"

/* ---- values and indices ---- */

static const ir_type *T(const ref_eval *r, int v) { return &ir_val(r->g, v)->type; }
static int64_t numel(const ir_type *t) { return ir_type_numel(t); }
static const ir_type *TIN(const ref_eval *r, const ir_node *n, int i) { return T(r, n->in.v[i]); }
static const ir_type *TOUT(const ref_eval *r, const ir_node *n, int k) { return T(r, n->out.v[k]); }

static double *IN(const ref_eval *r, const ir_node *n, int i)
{
    double *x = r->v[n->in.v[i]];
    if (!x)
        kl_panic("reference: %s reads %%%s, which has no value", ir_op_name(n->op), ir_val(r->g, n->in.v[i])->name);
    return x;
}

static double *OUT(ref_eval *r, const ir_node *n, int k)
{
    int v = n->out.v[k];
    free(r->v[v]);
    r->v[v] = kl_xcalloc((size_t)numel(T(r, v)) + 1, sizeof(double));
    return r->v[v];
}

static void unravel(const ir_type *t, int64_t flat, int64_t *idx)
{
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = flat % t->dim[d];
        flat /= t->dim[d];
    }
}

static int64_t ravel(const ir_type *t, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < t->rank; d++)
        f = f * t->dim[d] + idx[d];
    return f;
}

/* The flat index in `from` of the element that NumPy broadcasting puts at
 * index idx of `to` (shapes aligned at the right, size-1 dims repeat). */
static int64_t bcast_at(const ir_type *from, const ir_type *to, const int64_t *idx)
{
    int64_t f = 0;
    int lead = to->rank - from->rank;
    for (int d = 0; d < from->rank; d++)
        f = f * from->dim[d] + (from->dim[d] == 1 ? 0 : idx[lead + d]);
    return f;
}

double ref_round(ir_dtype dt, double x)
{
    switch (dt) {
    case IR_F64:
        return x;
    case IR_F32:
        return (double)(float)x;
    case IR_BF16:
        return kl_bf16_to_f32(kl_f32_to_bf16((float)x));
    case IR_F16:
        return kl_f16_to_f32(kl_f32_to_f16((float)x));
    case IR_U8:
    case IR_I32:
    case IR_I64:
        /* C's conversion: toward zero */
        return trunc(x);
    default:
        kl_panic("reference: no rounding for dtype %s", ir_dtype_name(dt));
    }
}

static void round_value(ref_eval *r, int v)
{
    ir_dtype dt = T(r, v)->dtype;
    for (int64_t i = 0, n = numel(T(r, v)); i < n; i++)
        r->v[v][i] = ref_round(dt, r->v[v][i]);
}

static double attr_f(const ir_node *n, const char *key, double dflt) { return ir_attr_float(&n->attrs, key, dflt); }
static int64_t attr_i(const ir_node *n, const char *key, int64_t dflt) { return ir_attr_int(&n->attrs, key, dflt); }

static void attr_pair(const ir_node *n, const char *key, int64_t *p)
{
    if (ir_attr_ints(&n->attrs, key, p, 2) != 2)
        kl_panic("reference: %s has no %s pair", ir_op_name(n->op), key);
}

/* ---- sources ---- */

static void ref_CONST(ref_eval *r, const ir_node *n)
{
    double *y = OUT(r, n, 0), c = attr_f(n, "value", 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = c;
}

/* ---- elementwise ---- */

typedef double (*fn1)(double);
typedef double (*fn2)(double, double);

static void unary(ref_eval *r, const ir_node *n, fn1 f)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = f(x[i]);
}

/* y = f(a, b) with NumPy broadcasting of both operands to y's shape. */
static void binary(ref_eval *r, const ir_node *n, fn2 f)
{
    const ir_type *ta = TIN(r, n, 0), *tb = TIN(r, n, 1), *ty = TOUT(r, n, 0);
    double *a = IN(r, n, 0), *b = IN(r, n, 1), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(ty); i < m; i++) {
        unravel(ty, i, idx);
        y[i] = f(a[bcast_at(ta, ty, idx)], b[bcast_at(tb, ty, idx)]);
    }
}

static double f_add(double a, double b) { return a + b; }
static double f_sub(double a, double b) { return a - b; }
static double f_mul(double a, double b) { return a * b; }
static double f_div(double a, double b) { return a / b; }
/* maximum/minimum propagate NaN (either operand) */
static double f_max(double a, double b) { return a != a || b != b ? NAN : a >= b ? a : b; }
static double f_min(double a, double b) { return a != a || b != b ? NAN : a <= b ? a : b; }
static double f_ge(double a, double b) { return a >= b ? 1 : 0; }
static double f_eq(double a, double b) { return a == b ? 1 : 0; }
static double f_isfinite(double x) { return isfinite(x) ? 1 : 0; }
static double f_neg(double x) { return -x; }
static double f_relu(double x) { return x > 0 ? x : 0; }
/* x Phi(x), Phi the standard normal distribution function */
static double f_gelu(double x) { return x * 0.5 * erfc(-x / sqrt(2.0)); }
static double f_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double f_rsqrt(double x) { return 1 / sqrt(x); }
static double f_id(double x) { return x; }

static void ref_ADD(ref_eval *r, const ir_node *n) { binary(r, n, f_add); }
static void ref_SUB(ref_eval *r, const ir_node *n) { binary(r, n, f_sub); }
static void ref_MUL(ref_eval *r, const ir_node *n) { binary(r, n, f_mul); }
static void ref_DIV(ref_eval *r, const ir_node *n) { binary(r, n, f_div); }
static void ref_POW(ref_eval *r, const ir_node *n) { binary(r, n, pow); }
static void ref_MAXIMUM(ref_eval *r, const ir_node *n) { binary(r, n, f_max); }
static void ref_MINIMUM(ref_eval *r, const ir_node *n) { binary(r, n, f_min); }
static void ref_GE(ref_eval *r, const ir_node *n) { binary(r, n, f_ge); }
static void ref_EQ(ref_eval *r, const ir_node *n) { binary(r, n, f_eq); }
static void ref_ISFINITE(ref_eval *r, const ir_node *n) { unary(r, n, f_isfinite); }
static void ref_NEG(ref_eval *r, const ir_node *n) { unary(r, n, f_neg); }
static void ref_RELU(ref_eval *r, const ir_node *n) { unary(r, n, f_relu); }
static void ref_GELU(ref_eval *r, const ir_node *n) { unary(r, n, f_gelu); }
static void ref_TANH(ref_eval *r, const ir_node *n) { unary(r, n, tanh); }
static void ref_SIGMOID(ref_eval *r, const ir_node *n) { unary(r, n, f_sigmoid); }
static void ref_EXP(ref_eval *r, const ir_node *n) { unary(r, n, exp); }
static void ref_LOG(ref_eval *r, const ir_node *n) { unary(r, n, log); }
static void ref_SQRT(ref_eval *r, const ir_node *n) { unary(r, n, sqrt); }
static void ref_RSQRT(ref_eval *r, const ir_node *n) { unary(r, n, f_rsqrt); }
/* The conversion itself is the rounding to the result's dtype on store. */
static void ref_CAST(ref_eval *r, const ir_node *n) { unary(r, n, f_id); }

/* ---- GEMM and convolution ---- */

/* y[..., i, j] = sum_k A[..., i, k] B[..., k, j], A = a or a^T, B = b or
 * b^T, batch dims broadcast. */
static void ref_MATMUL(ref_eval *r, const ir_node *n)
{
    const ir_type *ta = TIN(r, n, 0), *tb = TIN(r, n, 1), *ty = TOUT(r, n, 0);
    double *a = IN(r, n, 0), *b = IN(r, n, 1), *y = OUT(r, n, 0);
    bool tra = attr_i(n, "transpose_a", 0), trb = attr_i(n, "transpose_b", 0);
    int64_t M = ty->dim[ty->rank - 2], N = ty->dim[ty->rank - 1];
    int64_t K = ta->dim[ta->rank - (tra ? 2 : 1)];
    ir_type ya = *ty, ba = *ta, bb = *tb; /* batch shapes */
    ya.rank -= 2, ba.rank -= 2, bb.rank -= 2;
    int64_t idx[IR_MAX_RANK];
    for (int64_t t = 0, nb = numel(&ya); t < nb; t++) {
        unravel(&ya, t, idx);
        const double *A = a + bcast_at(&ba, &ya, idx) * M * K, *B = b + bcast_at(&bb, &ya, idx) * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (tra ? A[k * M + i] : A[i * K + k]) * (trb ? B[j * K + k] : B[k * N + j]);
                y[(t * M + i) * N + j] = s;
            }
    }
}

typedef struct conv_geom {
    int64_t n, c, h, w;     /* input */
    int64_t o, oh, ow;      /* output */
    int64_t kh, kw, groups;
    int64_t s[2], p[2], d[2];
} conv_geom;

static conv_geom conv_of(const ir_node *n, const ir_type *x, const ir_type *wt, const ir_type *y)
{
    conv_geom g = {x->dim[0], x->dim[1], x->dim[2], x->dim[3], y->dim[1], y->dim[2], y->dim[3],
                   wt->dim[2], wt->dim[3], attr_i(n, "groups", 1), {0}, {0}, {0}};
    attr_pair(n, "stride", g.s);
    attr_pair(n, "pad", g.p);
    attr_pair(n, "dilation", g.d);
    return g;
}

/* Visits every (output element, tap) pair of a convolution: out and w
 * flat indices, and the input's (-1 where the tap reads padding). */
typedef void (*conv_visit)(void *arg, int64_t yi, int64_t wi, int64_t xi);

static void conv_taps(const conv_geom *g, conv_visit f, void *arg)
{
    int64_t cg = g->c / g->groups, og = g->o / g->groups;
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t i = 0; i < g->oh; i++)
                for (int64_t j = 0; j < g->ow; j++) {
                    int64_t yi = ((b * g->o + o) * g->oh + i) * g->ow + j;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t u = 0; u < g->kh; u++)
                            for (int64_t v = 0; v < g->kw; v++) {
                                int64_t hi = i * g->s[0] - g->p[0] + u * g->d[0];
                                int64_t wi = j * g->s[1] - g->p[1] + v * g->d[1];
                                int64_t ci = (o / og) * cg + c;
                                int64_t xi = hi < 0 || hi >= g->h || wi < 0 || wi >= g->w
                                                 ? -1
                                                 : ((b * g->c + ci) * g->h + hi) * g->w + wi;
                                f(arg, yi, ((o * cg + c) * g->kh + u) * g->kw + v, xi);
                            }
                }
}

typedef struct conv_bufs {
    double *x, *w, *y;
} conv_bufs;

static void fwd_tap(void *arg, int64_t yi, int64_t wi, int64_t xi)
{
    conv_bufs *c = arg;
    if (xi >= 0)
        c->y[yi] += c->x[xi] * c->w[wi];
}

static void grad_input_tap(void *arg, int64_t yi, int64_t wi, int64_t xi)
{
    conv_bufs *c = arg; /* x is dx here, y is dy */
    if (xi >= 0)
        c->x[xi] += c->y[yi] * c->w[wi];
}

static void grad_weight_tap(void *arg, int64_t yi, int64_t wi, int64_t xi)
{
    conv_bufs *c = arg; /* w is dw here, y is dy */
    if (xi >= 0)
        c->w[wi] += c->y[yi] * c->x[xi];
}

static void ref_CONV2D(ref_eval *r, const ir_node *n)
{
    conv_geom g = conv_of(n, TIN(r, n, 0), TIN(r, n, 1), TOUT(r, n, 0));
    conv_bufs c = {IN(r, n, 0), IN(r, n, 1), OUT(r, n, 0)};
    conv_taps(&g, fwd_tap, &c);
    if (n->in.n == 3) {
        double *bias = IN(r, n, 2);
        for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
            c.y[i] += bias[(i / (g.oh * g.ow)) % g.o];
    }
}

/* conv2d_grad_input(dy, w) -> dx, dx's shape in the attributes */
static void ref_CONV2D_GRAD_INPUT(ref_eval *r, const ir_node *n)
{
    conv_geom g = conv_of(n, TOUT(r, n, 0), TIN(r, n, 1), TIN(r, n, 0));
    conv_bufs c = {OUT(r, n, 0), IN(r, n, 1), IN(r, n, 0)};
    conv_taps(&g, grad_input_tap, &c);
}

/* conv2d_grad_weight(dy, x) -> dw */
static void ref_CONV2D_GRAD_WEIGHT(ref_eval *r, const ir_node *n)
{
    conv_geom g = conv_of(n, TIN(r, n, 1), TOUT(r, n, 0), TIN(r, n, 0));
    conv_bufs c = {IN(r, n, 1), OUT(r, n, 0), IN(r, n, 0)};
    conv_taps(&g, grad_weight_tap, &c);
}

/* ---- data movement ---- */

/* Row-major data unchanged. */
static void same_data(ref_eval *r, const ir_node *n)
{
    memcpy(OUT(r, n, 0), IN(r, n, 0), sizeof(double) * (size_t)numel(TOUT(r, n, 0)));
}

static void ref_RESHAPE(ref_eval *r, const ir_node *n) { same_data(r, n); }
static void ref_FLATTEN(ref_eval *r, const ir_node *n) { same_data(r, n); }

/* y[idx] = x[idx permuted back]: out dim i is in dim perm[i]. */
static void permute(ref_eval *r, const ir_node *n, const int64_t *perm)
{
    const ir_type *tx = TIN(r, n, 0), *ty = TOUT(r, n, 0);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t iy[IR_MAX_RANK], ix[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(ty); i < m; i++) {
        unravel(ty, i, iy);
        for (int d = 0; d < ty->rank; d++)
            ix[perm[d]] = iy[d];
        y[i] = x[ravel(tx, ix)];
    }
}

static void ref_TRANSPOSE(ref_eval *r, const ir_node *n)
{
    int rank = TIN(r, n, 0)->rank;
    int64_t perm[IR_MAX_RANK];
    for (int d = 0; d < rank; d++)
        perm[d] = d;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    permute(r, n, perm);
}

static void ref_PERMUTE(ref_eval *r, const ir_node *n)
{
    int64_t perm[IR_MAX_RANK];
    ir_attr_ints(&n->attrs, "perm", perm, IR_MAX_RANK);
    permute(r, n, perm);
}

static void ref_BROADCAST(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0), *ty = TOUT(r, n, 0);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(ty); i < m; i++) {
        unravel(ty, i, idx);
        y[i] = x[bcast_at(tx, ty, idx)];
    }
}

static void ref_CONCAT(ref_eval *r, const ir_node *n)
{
    const ir_type *ty = TOUT(r, n, 0);
    int axis = (int)attr_i(n, "axis", 0);
    double *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK], off = 0;
    for (int k = 0; k < n->in.n; k++) {
        const ir_type *tx = TIN(r, n, k);
        double *x = IN(r, n, k);
        for (int64_t i = 0, m = numel(tx); i < m; i++) {
            unravel(tx, i, idx);
            idx[axis] += off;
            y[ravel(ty, idx)] = x[i];
        }
        off += tx->dim[axis];
    }
}

/* y[.., i, ..] = x[.., start + i step, ..] along axis */
static void ref_SLICE(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0), *ty = TOUT(r, n, 0);
    int axis = (int)attr_i(n, "axis", 0);
    int64_t start = attr_i(n, "start", 0), step = attr_i(n, "step", 1);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(ty); i < m; i++) {
        unravel(ty, i, idx);
        idx[axis] = start + idx[axis] * step;
        y[i] = x[ravel(tx, idx)];
    }
}

/* embedding(ids, table): y[..., d] = table[ids[...], d] */
static void ref_EMBEDDING(ref_eval *r, const ir_node *n)
{
    const ir_type *tt = TIN(r, n, 1);
    double *ids = IN(r, n, 0), *table = IN(r, n, 1), *y = OUT(r, n, 0);
    int64_t D = tt->dim[1];
    for (int64_t i = 0, m = numel(TIN(r, n, 0)); i < m; i++) {
        int64_t row = (int64_t)ids[i];
        kl_check(row >= 0 && row < tt->dim[0]);
        for (int64_t d = 0; d < D; d++)
            y[i * D + d] = table[row * D + d];
    }
}

/* ---- reductions and losses ---- */

/* x's shape with the reduced axes (attribute "axis", normalised by the
 * shape rule) set to 1: the keepdim shape, whose flat index is the
 * result's with or without keepdim. */
static ir_type kept_shape(const ir_node *n, const ir_type *x)
{
    int64_t axes[IR_MAX_RANK];
    int na = ir_attr_ints(&n->attrs, "axis", axes, IR_MAX_RANK);
    ir_type k = *x;
    for (int i = 0; i < na; i++)
        k.dim[axes[i]] = 1;
    return k;
}

typedef enum { RED_SUM, RED_MEAN, RED_MAX } red_kind;

static void reduce(ref_eval *r, const ir_node *n, red_kind kind)
{
    const ir_type *tx = TIN(r, n, 0);
    ir_type k = kept_shape(n, tx);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t m = numel(&k), idx[IR_MAX_RANK];
    for (int64_t j = 0; j < m; j++)
        y[j] = kind == RED_MAX ? -INFINITY : 0;
    for (int64_t i = 0, nx = numel(tx); i < nx; i++) {
        unravel(tx, i, idx);
        int64_t j = bcast_at(&k, tx, idx);
        y[j] = kind == RED_MAX ? (x[i] > y[j] || x[i] != x[i] ? x[i] : y[j]) : y[j] + x[i];
    }
    if (kind == RED_MEAN)
        for (int64_t j = 0; j < m; j++)
            y[j] /= (double)(numel(tx) / m);
}

static void ref_SUM(ref_eval *r, const ir_node *n) { reduce(r, n, RED_SUM); }
static void ref_MEAN(ref_eval *r, const ir_node *n) { reduce(r, n, RED_MEAN); }
static void ref_MAX(ref_eval *r, const ir_node *n) { reduce(r, n, RED_MAX); }

/* x viewed as [outer, len, inner] around axis */
typedef struct axis_view {
    int64_t outer, len, inner;
} axis_view;

static axis_view around(const ir_type *t, int axis)
{
    axis_view a = {1, t->dim[axis], 1};
    for (int d = 0; d < t->rank; d++)
        if (d < axis)
            a.outer *= t->dim[d];
        else if (d > axis)
            a.inner *= t->dim[d];
    return a;
}

#define AT(av, o, i, q) (((o) * (av).len + (i)) * (av).inner + (q))

/* softmax (log = false) or log-softmax along axis */
static void softmax(ref_eval *r, const ir_node *n, bool logs)
{
    axis_view a = around(TIN(r, n, 0), (int)attr_i(n, "axis", -1));
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t o = 0; o < a.outer; o++)
        for (int64_t q = 0; q < a.inner; q++) {
            double mx = -INFINITY, s = 0;
            for (int64_t i = 0; i < a.len; i++)
                mx = fmax(mx, x[AT(a, o, i, q)]);
            for (int64_t i = 0; i < a.len; i++)
                s += exp(x[AT(a, o, i, q)] - mx);
            for (int64_t i = 0; i < a.len; i++) {
                double z = x[AT(a, o, i, q)] - mx;
                y[AT(a, o, i, q)] = logs ? z - log(s) : exp(z) / s;
            }
        }
}

static void ref_SOFTMAX(ref_eval *r, const ir_node *n) { softmax(r, n, false); }
static void ref_LOG_SOFTMAX(ref_eval *r, const ir_node *n) { softmax(r, n, true); }

/* log sum_c exp(row[c]) */
static double logsumexp(const double *row, int64_t C)
{
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; c++)
        mx = fmax(mx, row[c]);
    for (int64_t c = 0; c < C; c++)
        s += exp(row[c] - mx);
    return mx + log(s);
}

static int64_t label_at(const double *labels, int64_t i, int64_t C)
{
    int64_t l = (int64_t)labels[i];
    if (l < 0 || l >= C)
        kl_panic("reference: label %lld out of range [0, %lld)", (long long)l, (long long)C);
    return l;
}

/* mean over rows of -log softmax(logits)[label] */
static void ref_CROSS_ENTROPY(ref_eval *r, const ir_node *n)
{
    const ir_type *t = TIN(r, n, 0);
    int64_t N = t->dim[0], C = t->dim[1];
    double *l = IN(r, n, 0), *lab = IN(r, n, 1), *y = OUT(r, n, 0), s = 0;
    for (int64_t i = 0; i < N; i++)
        s += logsumexp(l + i * C, C) - l[i * C + label_at(lab, i, C)];
    y[0] = s / (double)N;
}

/* the fraction of rows whose largest logit (the first, on ties) is the label */
static void ref_ACCURACY(ref_eval *r, const ir_node *n)
{
    const ir_type *t = TIN(r, n, 0);
    int64_t N = t->dim[0], C = t->dim[1], hits = 0;
    double *l = IN(r, n, 0), *lab = IN(r, n, 1), *y = OUT(r, n, 0);
    for (int64_t i = 0; i < N; i++) {
        int64_t best = 0;
        for (int64_t c = 1; c < C; c++)
            if (l[i * C + c] > l[i * C + best])
                best = c;
        hits += best == label_at(lab, i, C);
    }
    y[0] = (double)hits / (double)N;
}

/* cross_entropy_grad(dloss, logits, labels) = dloss (softmax - onehot) / N */
static void ref_CROSS_ENTROPY_GRAD(ref_eval *r, const ir_node *n)
{
    const ir_type *t = TIN(r, n, 1);
    int64_t N = t->dim[0], C = t->dim[1];
    double *dl = IN(r, n, 0), *l = IN(r, n, 1), *lab = IN(r, n, 2), *y = OUT(r, n, 0);
    for (int64_t i = 0; i < N; i++) {
        double lse = logsumexp(l + i * C, C);
        int64_t k = label_at(lab, i, C);
        for (int64_t c = 0; c < C; c++)
            y[i * C + c] = dl[0] * (exp(l[i * C + c] - lse) - (c == k)) / (double)N;
    }
}

/* sum_to(x): x summed down to the shape it broadcasts from */
static void ref_SUM_TO(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0), *ty = TOUT(r, n, 0);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(tx); i < m; i++) {
        unravel(tx, i, idx);
        y[bcast_at(ty, tx, idx)] += x[i];
    }
}

/* softmax_grad(dy, y) = y (dy - sum(dy y)) along axis */
static void ref_SOFTMAX_GRAD(ref_eval *r, const ir_node *n)
{
    axis_view a = around(TIN(r, n, 0), (int)attr_i(n, "axis", -1));
    double *dy = IN(r, n, 0), *y = IN(r, n, 1), *dx = OUT(r, n, 0);
    for (int64_t o = 0; o < a.outer; o++)
        for (int64_t q = 0; q < a.inner; q++) {
            double s = 0;
            for (int64_t i = 0; i < a.len; i++)
                s += dy[AT(a, o, i, q)] * y[AT(a, o, i, q)];
            for (int64_t i = 0; i < a.len; i++)
                dx[AT(a, o, i, q)] = y[AT(a, o, i, q)] * (dy[AT(a, o, i, q)] - s);
        }
}

/* log_softmax_grad(dy, y) = dy - exp(y) sum(dy) along axis */
static void ref_LOG_SOFTMAX_GRAD(ref_eval *r, const ir_node *n)
{
    axis_view a = around(TIN(r, n, 0), (int)attr_i(n, "axis", -1));
    double *dy = IN(r, n, 0), *y = IN(r, n, 1), *dx = OUT(r, n, 0);
    for (int64_t o = 0; o < a.outer; o++)
        for (int64_t q = 0; q < a.inner; q++) {
            double s = 0;
            for (int64_t i = 0; i < a.len; i++)
                s += dy[AT(a, o, i, q)];
            for (int64_t i = 0; i < a.len; i++)
                dx[AT(a, o, i, q)] = dy[AT(a, o, i, q)] - exp(y[AT(a, o, i, q)]) * s;
        }
}

/* ---- windows ---- */

typedef struct pool_geom {
    int64_t nc, h, w, oh, ow, k[2], s[2], p[2];
} pool_geom;

/* x is the input [N, C, H, W], y the output */
static pool_geom pool_of(const ir_node *n, const ir_type *x, const ir_type *y)
{
    pool_geom g = {x->dim[0] * x->dim[1], x->dim[2], x->dim[3], y->dim[2], y->dim[3], {0}, {0}, {0}};
    attr_pair(n, "size", g.k);
    attr_pair(n, "stride", g.s);
    attr_pair(n, "pad", g.p);
    return g;
}

/* The input index of tap (u, v) of output (c, i, j), -1 in the padding. */
static int64_t pool_tap(const pool_geom *g, int64_t c, int64_t i, int64_t j, int64_t u, int64_t v)
{
    int64_t hi = i * g->s[0] - g->p[0] + u, wi = j * g->s[1] - g->p[1] + v;
    return hi < 0 || hi >= g->h || wi < 0 || wi >= g->w ? -1 : (c * g->h + hi) * g->w + wi;
}

/* The window's first largest input (row-major), -1 when all padding. */
static int64_t pool_argmax(const pool_geom *g, const double *x, int64_t c, int64_t i, int64_t j)
{
    int64_t best = -1;
    for (int64_t u = 0; u < g->k[0]; u++)
        for (int64_t v = 0; v < g->k[1]; v++) {
            int64_t t = pool_tap(g, c, i, j, u, v);
            if (t >= 0 && (best < 0 || x[t] > x[best]))
                best = t;
        }
    return best;
}

/* max over the window; padding never wins */
static void ref_MAXPOOL(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TIN(r, n, 0), TOUT(r, n, 0));
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++)
                y[(c * g.oh + i) * g.ow + j] = x[pool_argmax(&g, x, c, i, j)];
}

/* the mean over the window, padding counting as zeros (divisor: the window size) */
static void ref_AVGPOOL(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TIN(r, n, 0), TOUT(r, n, 0));
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++) {
                double s = 0;
                for (int64_t u = 0; u < g.k[0]; u++)
                    for (int64_t v = 0; v < g.k[1]; v++) {
                        int64_t t = pool_tap(&g, c, i, j, u, v);
                        s += t >= 0 ? x[t] : 0;
                    }
                y[(c * g.oh + i) * g.ow + j] = s / (double)(g.k[0] * g.k[1]);
            }
}

/* maxpool_grad(dy, x, y): dy goes to each window's first maximum */
static void ref_MAXPOOL_GRAD(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TIN(r, n, 1), TIN(r, n, 0));
    double *dy = IN(r, n, 0), *x = IN(r, n, 1), *dx = OUT(r, n, 0);
    (void)IN(r, n, 2);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++)
                dx[pool_argmax(&g, x, c, i, j)] += dy[(c * g.oh + i) * g.ow + j];
}

/* avgpool_grad(dy): dy / window size to every tap inside the input */
static void ref_AVGPOOL_GRAD(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TOUT(r, n, 0), TIN(r, n, 0));
    double *dy = IN(r, n, 0), *dx = OUT(r, n, 0);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++)
                for (int64_t u = 0; u < g.k[0]; u++)
                    for (int64_t v = 0; v < g.k[1]; v++) {
                        int64_t t = pool_tap(&g, c, i, j, u, v);
                        if (t >= 0)
                            dx[t] += dy[(c * g.oh + i) * g.ow + j] / (double)(g.k[0] * g.k[1]);
                    }
}

/* ---- normalisation ---- */

/* Batch norm statistics run over every axis but the channel (dim 1):
 * x viewed as [N, C, S]. Layer norm's over the last axis: [rows, D]. */
typedef struct norm_view {
    int64_t n, c, s; /* element (b, ch, k) at (b * c + ch) * s + k */
    bool batch;      /* per channel (batch norm) or per row (layer norm) */
} norm_view;

static norm_view norm_of(const ir_type *x, bool batch)
{
    if (!batch)
        return (norm_view){numel(x) / x->dim[x->rank - 1], x->dim[x->rank - 1], 1, false};
    norm_view v = {x->dim[0], x->dim[1], 1, true};
    for (int d = 2; d < x->rank; d++)
        v.s *= x->dim[d];
    return v;
}

/* Statistic index (channel or row) and feature index (gamma's) of element e. */
static int64_t stat_of(const norm_view *v, int64_t e) { return v->batch ? (e / v->s) % v->c : e / v->c; }
static int64_t feat_of(const norm_view *v, int64_t e) { return v->batch ? (e / v->s) % v->c : e % v->c; }
static int64_t nstats(const norm_view *v) { return v->batch ? v->c : v->n; }

/* mean and biased variance of every statistic */
static void moments(const norm_view *v, const double *x, int64_t total, double *mean, double *var)
{
    int64_t ns = nstats(v), cnt = total / ns;
    for (int64_t k = 0; k < ns; k++)
        mean[k] = var[k] = 0;
    for (int64_t e = 0; e < total; e++)
        mean[stat_of(v, e)] += x[e];
    for (int64_t k = 0; k < ns; k++)
        mean[k] /= (double)cnt;
    for (int64_t e = 0; e < total; e++) {
        double d = x[e] - mean[stat_of(v, e)];
        var[stat_of(v, e)] += d * d;
    }
    for (int64_t k = 0; k < ns; k++)
        var[k] /= (double)cnt;
}

/* y = (x - mean) invstd gamma + beta */
static void normalize(const norm_view *v, int64_t total, const double *x, const double *gamma, const double *beta,
                      const double *mean, const double *invstd, double *y)
{
    for (int64_t e = 0; e < total; e++) {
        int64_t k = stat_of(v, e), f = feat_of(v, e);
        y[e] = (x[e] - mean[k]) * invstd[k] * gamma[f] + beta[f];
    }
}

/* batchnorm(x, gamma, beta, running_mean, running_var) -> y, mean,
 * invstd = 1/sqrt(var + eps) over the batch; running statistics move by
 * momentum towards the batch's (the variance unbiased) in place. */
static void ref_BATCHNORM(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, true);
    int64_t total = numel(tx), cnt = total / v.c;
    double eps = attr_f(n, "eps", 1e-5), m = attr_f(n, "momentum", 0.1);
    double *x = IN(r, n, 0), *rm = IN(r, n, 3), *rv = IN(r, n, 4);
    double *mean = OUT(r, n, 1), *invstd = OUT(r, n, 2), *var = kl_xmalloc(sizeof(double) * (size_t)v.c);
    moments(&v, x, total, mean, var);
    for (int64_t c = 0; c < v.c; c++)
        invstd[c] = 1 / sqrt(var[c] + eps);
    normalize(&v, total, x, IN(r, n, 1), IN(r, n, 2), mean, invstd, OUT(r, n, 0));
    ir_dtype dm = TIN(r, n, 3)->dtype, dv = TIN(r, n, 4)->dtype;
    for (int64_t c = 0; c < v.c; c++) {
        rm[c] = ref_round(dm, (1 - m) * rm[c] + m * mean[c]);
        rv[c] = ref_round(dv, (1 - m) * rv[c] + m * var[c] * (double)cnt / (double)(cnt > 1 ? cnt - 1 : 1));
    }
    free(var);
}

/* batchnorm_infer(x, gamma, beta, running_mean, running_var): the running
 * statistics in place of the batch's */
static void ref_BATCHNORM_INFER(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, true);
    double eps = attr_f(n, "eps", 1e-5), *rv = IN(r, n, 4);
    double *invstd = kl_xmalloc(sizeof(double) * (size_t)v.c);
    for (int64_t c = 0; c < v.c; c++)
        invstd[c] = 1 / sqrt(rv[c] + eps);
    normalize(&v, numel(tx), IN(r, n, 0), IN(r, n, 1), IN(r, n, 2), IN(r, n, 3), invstd, OUT(r, n, 0));
    free(invstd);
}

/* batchnorm_apply(x, gamma, beta, mean, invstd): the saved statistics */
static void ref_BATCHNORM_APPLY(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, true);
    normalize(&v, numel(tx), IN(r, n, 0), IN(r, n, 1), IN(r, n, 2), IN(r, n, 3), IN(r, n, 4), OUT(r, n, 0));
}

/* layernorm(x, gamma, beta) -> y, mean, invstd over the last axis */
static void ref_LAYERNORM(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, false);
    double eps = attr_f(n, "eps", 1e-5), *x = IN(r, n, 0);
    double *mean = OUT(r, n, 1), *invstd = OUT(r, n, 2), *var = kl_xmalloc(sizeof(double) * (size_t)v.n);
    moments(&v, x, numel(tx), mean, var);
    for (int64_t k = 0; k < v.n; k++)
        invstd[k] = 1 / sqrt(var[k] + eps);
    normalize(&v, numel(tx), x, IN(r, n, 1), IN(r, n, 2), mean, invstd, OUT(r, n, 0));
    free(var);
}

/* (dy, x, gamma, mean, invstd) -> dx, dgamma, dbeta of y = xhat gamma +
 * beta, xhat = (x - mean) invstd, the statistics over m elements:
 * dx = invstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma. */
static void norm_grad(ref_eval *r, const ir_node *n, bool batch)
{
    const ir_type *tx = TIN(r, n, 1);
    norm_view v = norm_of(tx, batch);
    int64_t total = numel(tx), ns = nstats(&v), cnt = total / ns;
    double *dy = IN(r, n, 0), *x = IN(r, n, 1), *gamma = IN(r, n, 2), *mean = IN(r, n, 3), *invstd = IN(r, n, 4);
    double *dx = OUT(r, n, 0), *dgamma = OUT(r, n, 1), *dbeta = OUT(r, n, 2);
    double *sg = kl_xcalloc((size_t)ns, sizeof(double)), *sgx = kl_xcalloc((size_t)ns, sizeof(double));
    for (int64_t e = 0; e < total; e++) {
        int64_t k = stat_of(&v, e), f = feat_of(&v, e);
        double xhat = (x[e] - mean[k]) * invstd[k], g = dy[e] * gamma[f];
        sg[k] += g;
        sgx[k] += g * xhat;
        dgamma[f] += dy[e] * xhat;
        dbeta[f] += dy[e];
    }
    for (int64_t e = 0; e < total; e++) {
        int64_t k = stat_of(&v, e), f = feat_of(&v, e);
        double xhat = (x[e] - mean[k]) * invstd[k];
        dx[e] = invstd[k] * (dy[e] * gamma[f] - sg[k] / (double)cnt - xhat * sgx[k] / (double)cnt);
    }
    free(sg);
    free(sgx);
}

static void ref_BATCHNORM_GRAD(ref_eval *r, const ir_node *n) { norm_grad(r, n, true); }
static void ref_LAYERNORM_GRAD(ref_eval *r, const ir_node *n) { norm_grad(r, n, false); }

/* ---- dropout ---- */

/* dropout(x) -> y, mask: y = x mask / (1 - p), mask 1 for a kept element
 * and 0 for a dropped one. The mask is random: the caller hands the
 * reference the mask the kernels drew (ref_set before the run); this
 * function checks that it is a mask and applies it. */
static void ref_DROPOUT(ref_eval *r, const ir_node *n)
{
    int mv = n->out.v[1];
    double *mask = r->v[mv], p = attr_f(n, "p", 0.5);
    if (!mask)
        kl_panic("reference: dropout needs its mask %%%s given", ir_val(r->g, mv)->name);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TIN(r, n, 0)); i < m; i++) {
        if (mask[i] != 0 && mask[i] != 1)
            kl_panic("reference: dropout mask %%%s[%lld] is %g, not 0 or 1", ir_val(r->g, mv)->name, (long long)i,
                     mask[i]);
        y[i] = x[i] * mask[i] / (1 - p);
    }
}

/* ---- backward ops ---- */

/* the elementwise backward ops: dx = dy f'(z), z the operand they read */
static void grad_elem(ref_eval *r, const ir_node *n, fn1 dfdz)
{
    double *dy = IN(r, n, 0), *z = IN(r, n, 1), *dx = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        dx[i] = dy[i] * dfdz(z[i]);
}

/* f' in terms of what the op reads: relu's, tanh's and sigmoid's result,
 * gelu's operand */
static double d_relu(double y) { return y > 0 ? 1 : 0; }
static double d_tanh(double y) { return 1 - y * y; }
static double d_sigmoid(double y) { return y * (1 - y); }
static double d_gelu(double x) { return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI); }

static void ref_RELU_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_relu); }
static void ref_GELU_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_gelu); }
static void ref_TANH_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_tanh); }
static void ref_SIGMOID_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_sigmoid); }

/* dropout_grad(dy, mask) = dy mask / (1 - p) */
static void ref_DROPOUT_GRAD(ref_eval *r, const ir_node *n)
{
    double *dy = IN(r, n, 0), *mask = IN(r, n, 1), *dx = OUT(r, n, 0), p = attr_f(n, "p", 0.5);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        dx[i] = dy[i] * mask[i] / (1 - p);
}

/* embedding_grad(dy, ids): row ids[i] of the table gets dy[i] summed */
static void ref_EMBEDDING_GRAD(ref_eval *r, const ir_node *n)
{
    const ir_type *tw = TOUT(r, n, 0);
    double *dy = IN(r, n, 0), *ids = IN(r, n, 1), *dw = OUT(r, n, 0);
    int64_t D = tw->dim[1];
    for (int64_t i = 0, m = numel(TIN(r, n, 1)); i < m; i++) {
        int64_t row = (int64_t)ids[i];
        kl_check(row >= 0 && row < tw->dim[0]);
        for (int64_t d = 0; d < D; d++)
            dw[row * D + d] += dy[i * D + d];
    }
}

/* slice_grad(dy): zeros of the sliced operand's shape, dy where the slice read */
static void ref_SLICE_GRAD(ref_eval *r, const ir_node *n)
{
    const ir_type *tdy = TIN(r, n, 0), *tx = TOUT(r, n, 0);
    int axis = (int)attr_i(n, "axis", 0);
    int64_t start = attr_i(n, "start", 0), step = attr_i(n, "step", 1);
    double *dy = IN(r, n, 0), *dx = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(tdy); i < m; i++) {
        unravel(tdy, i, idx);
        idx[axis] = start + idx[axis] * step;
        dx[ravel(tx, idx)] = dy[i];
    }
}

/* ---- optimizer updates (operands: w, g, hyper, scale, state..., copy) ---- */

/* hyper = [lr, 1 - beta1^t, 1 - beta2^t, gradient multiplier]; scale 0
 * skips the step. The gradient an update uses is g x multiplier x scale. */
typedef struct update_args {
    double *w, *g, *hyper, scale;
    ir_dtype wt;
    int64_t n;
} update_args;

static update_args update_of(ref_eval *r, const ir_node *n)
{
    update_args u = {IN(r, n, 0), IN(r, n, 1), IN(r, n, 2), IN(r, n, 3)[0], TIN(r, n, 0)->dtype, numel(TIN(r, n, 0))};
    return u;
}

/* The low-precision copy of the weight, when the update has one (the last
 * operand, bf16 or f16). */
static void write_copy(ref_eval *r, const ir_node *n, int nstate, const update_args *u)
{
    if (n->in.n <= 4 + nstate)
        return;
    double *c = IN(r, n, 4 + nstate);
    for (int64_t i = 0; i < u->n; i++)
        c[i] = ref_round(TIN(r, n, 4 + nstate)->dtype, u->w[i]);
}

/* SGD: g' = g + wd w; with momentum m = mu m + g', d = nesterov ? g' + mu m : m;
 * w -= lr d */
static void ref_SGD_UPDATE(ref_eval *r, const ir_node *n)
{
    update_args u = update_of(r, n);
    double mu = attr_f(n, "momentum", 0), wd = attr_f(n, "weight_decay", 0);
    bool nesterov = attr_i(n, "nesterov", 0);
    int nstate = mu > 0;
    double *m = nstate ? IN(r, n, 4) : NULL;
    if (u.scale != 0) {
        for (int64_t i = 0; i < u.n; i++) {
            double g = u.g[i] * u.hyper[3] * u.scale + wd * u.w[i], d = g;
            if (m) {
                m[i] = ref_round(TIN(r, n, 4)->dtype, mu * m[i] + g);
                d = nesterov ? g + mu * m[i] : m[i];
            }
            u.w[i] = ref_round(u.wt, u.w[i] - u.hyper[0] * d);
        }
    }
    write_copy(r, n, nstate, &u);
}

/* Adam: g' = g (+ wd w unless decoupled); m = b1 m + (1 - b1) g';
 * v = b2 v + (1 - b2) g'^2; u = (m / bc1) / (sqrt(v / bc2) + eps)
 * (+ wd w when decoupled); w -= lr u */
static void ref_ADAM_UPDATE(ref_eval *r, const ir_node *n)
{
    update_args u = update_of(r, n);
    double b1 = attr_f(n, "beta1", 0.9), b2 = attr_f(n, "beta2", 0.999), eps = attr_f(n, "eps", 1e-8);
    double wd = attr_f(n, "weight_decay", 0);
    bool decoupled = attr_i(n, "decoupled", 1);
    double *m = IN(r, n, 4), *v = IN(r, n, 5);
    ir_dtype dm = TIN(r, n, 4)->dtype, dv = TIN(r, n, 5)->dtype;
    if (u.scale != 0) {
        for (int64_t i = 0; i < u.n; i++) {
            double g = u.g[i] * u.hyper[3] * u.scale + (decoupled ? 0 : wd * u.w[i]);
            m[i] = ref_round(dm, b1 * m[i] + (1 - b1) * g);
            v[i] = ref_round(dv, b2 * v[i] + (1 - b2) * g * g);
            double step = (m[i] / u.hyper[1]) / (sqrt(v[i] / u.hyper[2]) + eps) + (decoupled ? wd * u.w[i] : 0);
            u.w[i] = ref_round(u.wt, u.w[i] - u.hyper[0] * step);
        }
    }
    write_copy(r, n, 2, &u);
}

/* grad_accumulate(acc, g): acc = g on a step's first micro-batch
 * (step % steps == 0), acc += g after */
static void ref_GRAD_ACCUMULATE(ref_eval *r, const ir_node *n)
{
    double *acc = IN(r, n, 0), *g = IN(r, n, 1);
    bool first = r->step % attr_i(n, "steps", 1) == 0;
    for (int64_t i = 0, m = numel(TIN(r, n, 0)); i < m; i++)
        acc[i] = ref_round(TIN(r, n, 0)->dtype, first ? g[i] : acc[i] + g[i]);
}

/* ---- the table, from the op row ---- */

typedef void (*ref_fn)(ref_eval *r, const ir_node *n);

static const ref_fn ref_table[IR_NOPS] = {
#define OP(id, ...) [IR_OP_##id] = ref_##id,
#include "ir/ops.def"
#undef OP
};

ref_eval *ref_new(const ir_graph *g)
{
    ref_eval *r = kl_xcalloc(1, sizeof *r);
    r->g = g;
    r->v = kl_xcalloc((size_t)g->values.n + 1, sizeof *r->v);
    r->steps = 1;
    return r;
}

void ref_free(ref_eval *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->g->values.n; i++)
        free(r->v[i]);
    free(r->v);
    free(r);
}

void ref_set(ref_eval *r, int v, const double *x)
{
    size_t n = (size_t)numel(T(r, v));
    free(r->v[v]);
    r->v[v] = kl_xmalloc(sizeof(double) * (n + 1));
    memcpy(r->v[v], x, sizeof(double) * n);
    round_value(r, v);
}

void ref_run(ref_eval *r, unsigned phase_mask)
{
    const ir_graph *g = r->g;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || !(phase_mask & (1u << n->phase)))
            continue;
        ref_table[n->op](r, n);
        for (int k = 0; k < n->out.n; k++)
            if (r->v[n->out.v[k]])
                round_value(r, n->out.v[k]);
    }
}
