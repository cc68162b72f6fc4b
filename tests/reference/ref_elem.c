/* Reference functions of the sources, the elementwise ops (forward and
 * backward) and dropout. */
#include "ref_ops.h"

/* ---- sources ---- */

void ref_CONST(ref_eval *r, const ir_node *n)
{
    double *y = OUT(r, n, 0), c = attr_f(n, "value", 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = c;
}

/* y[i] = i */
void ref_ARANGE(ref_eval *r, const ir_node *n)
{
    double *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = (double)i;
}

/* x where col - row <= k (tril) or >= k (triu), over the last two axes */
static void tri(ref_eval *r, const ir_node *n, bool lower)
{
    const ir_type *t = TOUT(r, n, 0);
    int64_t rows = t->dim[t->rank - 2], cols = t->dim[t->rank - 1], k = attr_i(n, "k", 0);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(t); i < m; i++) {
        int64_t d = i % cols - (i / cols) % rows;
        y[i] = (lower ? d <= k : d >= k) ? x[i] : 0;
    }
}
void ref_TRIL(ref_eval *r, const ir_node *n) { tri(r, n, true); }
void ref_TRIU(ref_eval *r, const ir_node *n) { tri(r, n, false); }

/* ---- elementwise ---- */

static void unary(ref_eval *r, const ir_node *n, ref_fn1 f)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = f(x[i]);
}

/* y = f(a, b) with NumPy broadcasting of both operands to y's shape. */
static void binary(ref_eval *r, const ir_node *n, ref_fn2 f)
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
static double f_gt(double a, double b) { return a > b ? 1 : 0; }
static double f_ne(double a, double b) { return a != b ? 1 : 0; }
static double f_isfinite(double x) { return isfinite(x) ? 1 : 0; }
static double f_neg(double x) { return -x; }
/* relu keeps NaN, as maximum does */
static double f_relu(double x) { return x != x ? x : x > 0 ? x : 0; }
/* x Phi(x), Phi the standard normal distribution function */
static double f_gelu(double x) { return x * 0.5 * erfc(-x / sqrt(2.0)); }
static double f_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double f_softplus(double x) { return log1p(exp(x)); }
static double f_rsqrt(double x) { return 1 / sqrt(x); }
static double f_id(double x) { return x; }

void ref_ADD(ref_eval *r, const ir_node *n) { binary(r, n, f_add); }
void ref_SUB(ref_eval *r, const ir_node *n) { binary(r, n, f_sub); }
void ref_MUL(ref_eval *r, const ir_node *n) { binary(r, n, f_mul); }
void ref_DIV(ref_eval *r, const ir_node *n) { binary(r, n, f_div); }
void ref_POW(ref_eval *r, const ir_node *n) { binary(r, n, pow); }
void ref_MAXIMUM(ref_eval *r, const ir_node *n) { binary(r, n, f_max); }
void ref_MINIMUM(ref_eval *r, const ir_node *n) { binary(r, n, f_min); }
void ref_GE(ref_eval *r, const ir_node *n) { binary(r, n, f_ge); }
void ref_EQ(ref_eval *r, const ir_node *n) { binary(r, n, f_eq); }
void ref_GT(ref_eval *r, const ir_node *n) { binary(r, n, f_gt); }
void ref_NE(ref_eval *r, const ir_node *n) { binary(r, n, f_ne); }

/* y = a where cond is nonzero (NaN included), else b; the three operands
 * broadcast to y's shape. */
void ref_WHERE(ref_eval *r, const ir_node *n)
{
    const ir_type *tc = TIN(r, n, 0), *ta = TIN(r, n, 1), *tb = TIN(r, n, 2), *ty = TOUT(r, n, 0);
    double *c = IN(r, n, 0), *a = IN(r, n, 1), *b = IN(r, n, 2), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(ty); i < m; i++) {
        unravel(ty, i, idx);
        y[i] = c[bcast_at(tc, ty, idx)] != 0 ? a[bcast_at(ta, ty, idx)] : b[bcast_at(tb, ty, idx)];
    }
}

void ref_ISFINITE(ref_eval *r, const ir_node *n) { unary(r, n, f_isfinite); }
void ref_NEG(ref_eval *r, const ir_node *n) { unary(r, n, f_neg); }
void ref_RELU(ref_eval *r, const ir_node *n) { unary(r, n, f_relu); }
/* GPT-2's form, gelu(x, approximate = "tanh") */
static double f_gelu_tanh(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
void ref_GELU(ref_eval *r, const ir_node *n) { unary(r, n, ir_gelu_is_tanh(&n->attrs) ? f_gelu_tanh : f_gelu); }
void ref_TANH(ref_eval *r, const ir_node *n) { unary(r, n, tanh); }
void ref_SIGMOID(ref_eval *r, const ir_node *n) { unary(r, n, f_sigmoid); }
void ref_SOFTPLUS(ref_eval *r, const ir_node *n) { unary(r, n, f_softplus); }
void ref_EXP(ref_eval *r, const ir_node *n) { unary(r, n, exp); }
void ref_LOG(ref_eval *r, const ir_node *n) { unary(r, n, log); }
void ref_SQRT(ref_eval *r, const ir_node *n) { unary(r, n, sqrt); }
void ref_RSQRT(ref_eval *r, const ir_node *n) { unary(r, n, f_rsqrt); }
/* The conversion itself is the rounding to the result's dtype on store. */
void ref_CAST(ref_eval *r, const ir_node *n) { unary(r, n, f_id); }

/* ---- dropout ---- */

/* dropout(x) -> y, mask: y = x mask / (1 - p), mask 1 for a kept element
 * and 0 for a dropped one. The mask is random: the caller hands the
 * reference the mask the kernels drew (ref_set before the run); this
 * function checks that it is a mask and applies it. */
void ref_DROPOUT(ref_eval *r, const ir_node *n)
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
static void grad_elem(ref_eval *r, const ir_node *n, ref_fn1 dfdz)
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

void ref_RELU_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_relu); }
static double d_gelu_tanh(double x)
{
    double c = sqrt(2 / M_PI), t = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}
void ref_GELU_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, ir_gelu_is_tanh(&n->attrs) ? d_gelu_tanh : d_gelu); }
void ref_TANH_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_tanh); }
void ref_SIGMOID_GRAD(ref_eval *r, const ir_node *n) { grad_elem(r, n, d_sigmoid); }

/* dropout_grad(dy, mask) = dy mask / (1 - p) */
void ref_DROPOUT_GRAD(ref_eval *r, const ir_node *n)
{
    double *dy = IN(r, n, 0), *mask = IN(r, n, 1), *dx = OUT(r, n, 0), p = attr_f(n, "p", 0.5);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        dx[i] = dy[i] * mask[i] / (1 - p);
}
