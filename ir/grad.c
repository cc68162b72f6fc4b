/* Gradient rules of the op table, used by the autodiff pass.
 *
 * Each rule reads the summed gradients of its node's results with
 * ir_grad_get() and hands each differentiable operand its contribution
 * with ir_grad_put(). Contributions whose shape is a broadcast of the
 * operand's are summed back to the operand's shape there, so rules need not
 * care about broadcasting. Rules build from forward ops where that is as
 * good (fusion merges the elementwise ones) and from backward ops where a
 * dedicated kernel is better (softmax, norms, convolution, pooling). */
#include <string.h>

#include "grad.h"

bool ir_grad_wanted(ir_grad_ctx *c, int v)
{
    return v < c->ncontrib && c->wanted[v];
}

int ir_grad_get(ir_grad_ctx *c, int v)
{
    if (v >= c->ncontrib || c->contrib[v].n == 0)
        return -1;
    /* Sum the contributions explicitly, once; later gets see the sum. */
    while (c->contrib[v].n > 1) {
        int n = c->contrib[v].n;
        int s = ir_emit2(c->g, IR_OP_ADD, c->contrib[v].v[n - 2], c->contrib[v].v[n - 1], NULL);
        c->contrib[v].v[n - 2] = s;
        c->contrib[v].n--;
    }
    return c->contrib[v].v[0];
}

/* Sums g down to the shape of v when g is a broadcast of it. */
static int unbroadcast(ir_grad_ctx *c, int g, const ir_type *target)
{
    const ir_type *gt = &ir_val(c->g, g)->type;
    if (gt->rank == target->rank && !memcmp(gt->dim, target->dim, sizeof(int64_t) * (size_t)gt->rank))
        return g;
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "shape", target->dim, target->rank);
    int r = ir_emit(c->g, IR_OP_SUM_TO, &g, 1, &a, NULL);
    ir_attrs_free(&a);
    return r;
}

void ir_grad_put(ir_grad_ctx *c, int v, int g)
{
    if (g < 0 || !ir_grad_wanted(c, v))
        return;
    g = unbroadcast(c, g, &ir_val(c->g, v)->type);
    kl_vec_push(c->contrib[v], g);
}

/* ---- small builders ---- */

static int in(ir_node *n, int i) { return n->in.v[i]; }
static int out(ir_node *n, int i) { return n->out.v[i]; }
static const ir_type *T(ir_grad_ctx *c, int v) { return &ir_val(c->g, v)->type; }

static int emit_attrs(ir_grad_ctx *c, ir_op op, const int *args, int nargs, const ir_attrs *a)
{
    return ir_emit(c->g, op, args, nargs, a, NULL);
}

static int konst(ir_grad_ctx *c, double x, int like)
{
    return ir_emit_const(c->g, x, T(c, like)->dtype);
}

static int mul(ir_grad_ctx *c, int a, int b) { return ir_emit2(c->g, IR_OP_MUL, a, b, NULL); }
static int divide(ir_grad_ctx *c, int a, int b) { return ir_emit2(c->g, IR_OP_DIV, a, b, NULL); }
static int neg(ir_grad_ctx *c, int a) { return ir_emit1(c->g, IR_OP_NEG, a, NULL); }

static int reshape(ir_grad_ctx *c, int v, const int64_t *dims, int rank)
{
    if (T(c, v)->rank == rank && !memcmp(T(c, v)->dim, dims, sizeof(int64_t) * (size_t)rank))
        return v;
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "shape", dims, rank);
    int r = emit_attrs(c, IR_OP_RESHAPE, &v, 1, &a);
    ir_attrs_free(&a);
    return r;
}

static int broadcast_to(ir_grad_ctx *c, int v, const ir_type *t)
{
    if (ir_type_eq(T(c, v), t))
        return v;
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "shape", t->dim, t->rank);
    int r = emit_attrs(c, IR_OP_BROADCAST, &v, 1, &a);
    ir_attrs_free(&a);
    return r;
}

/* The gradient of a unary op through a backward op op(dy, z). */
static void unary_via(ir_grad_ctx *c, ir_node *n, ir_op op, int z)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int args[2] = {dy, z};
    ir_grad_put(c, in(n, 0), emit_attrs(c, op, args, 2, NULL));
}

/* ---- elementwise ---- */

static void ir_grad_add(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    ir_grad_put(c, in(n, 0), dy);
    ir_grad_put(c, in(n, 1), dy);
}

static void ir_grad_sub(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    ir_grad_put(c, in(n, 0), dy);
    if (ir_grad_wanted(c, in(n, 1)))
        ir_grad_put(c, in(n, 1), neg(c, dy));
}

static void ir_grad_mul(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    if (ir_grad_wanted(c, in(n, 0)))
        ir_grad_put(c, in(n, 0), mul(c, dy, in(n, 1)));
    if (ir_grad_wanted(c, in(n, 1)))
        ir_grad_put(c, in(n, 1), mul(c, dy, in(n, 0)));
}

static void ir_grad_div(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int da = divide(c, dy, in(n, 1));
    ir_grad_put(c, in(n, 0), da);
    /* d(a/b)/db = -(a/b)/b */
    if (ir_grad_wanted(c, in(n, 1)))
        ir_grad_put(c, in(n, 1), neg(c, mul(c, da, out(n, 0))));
}

static void ir_grad_pow(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int a = in(n, 0), b = in(n, 1);
    if (ir_grad_wanted(c, a)) {
        int bm1 = ir_emit2(c->g, IR_OP_SUB, b, konst(c, 1, b), NULL);
        ir_grad_put(c, a, mul(c, dy, mul(c, b, ir_emit2(c->g, IR_OP_POW, a, bm1, NULL))));
    }
    if (ir_grad_wanted(c, b))
        ir_grad_put(c, b, mul(c, dy, mul(c, out(n, 0), ir_emit1(c->g, IR_OP_LOG, a, NULL))));
}

/* maximum/minimum: the gradient goes to the operand that won (to a on ties). */
static void grad_select(ir_grad_ctx *c, ir_node *n, bool is_max)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int a = in(n, 0), b = in(n, 1);
    int mask = is_max ? ir_emit2(c->g, IR_OP_GE, a, b, NULL) : ir_emit2(c->g, IR_OP_GE, b, a, NULL);
    int da = mul(c, dy, mask);
    ir_grad_put(c, a, da);
    if (ir_grad_wanted(c, b))
        ir_grad_put(c, b, ir_emit2(c->g, IR_OP_SUB, dy, da, NULL));
}

static void ir_grad_maximum(ir_grad_ctx *c, ir_node *n) { grad_select(c, n, true); }
static void ir_grad_minimum(ir_grad_ctx *c, ir_node *n) { grad_select(c, n, false); }

/* where(cond, a, b): dy goes to a where cond holds and to b elsewhere;
 * cond gets none. Selected with where itself, not multiplied by the
 * mask, so an inf or NaN in dy stays on its own side. */
static void ir_grad_where(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int cond = in(n, 0), zero = konst(c, 0, dy);
    if (ir_grad_wanted(c, in(n, 1))) {
        int args[3] = {cond, dy, zero};
        ir_grad_put(c, in(n, 1), ir_emit(c->g, IR_OP_WHERE, args, 3, NULL, NULL));
    }
    if (ir_grad_wanted(c, in(n, 2))) {
        int args[3] = {cond, zero, dy};
        ir_grad_put(c, in(n, 2), ir_emit(c->g, IR_OP_WHERE, args, 3, NULL, NULL));
    }
}

/* tril/triu keep the same triangle of the gradient */
static void grad_tri(ir_grad_ctx *c, ir_node *n, ir_op op)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), emit_attrs(c, op, &dy, 1, &n->attrs));
}
static void ir_grad_tril(ir_grad_ctx *c, ir_node *n) { grad_tri(c, n, IR_OP_TRIL); }
static void ir_grad_triu(ir_grad_ctx *c, ir_node *n) { grad_tri(c, n, IR_OP_TRIU); }

static void ir_grad_neg(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), neg(c, dy));
}

static void ir_grad_relu(ir_grad_ctx *c, ir_node *n) { unary_via(c, n, IR_OP_RELU_GRAD, out(n, 0)); }
/* gelu_grad takes gelu's form (approximate) with it. */
static void ir_grad_gelu(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int args[2] = {dy, in(n, 0)};
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_GELU_GRAD, args, 2, &n->attrs));
}
static void ir_grad_tanh(ir_grad_ctx *c, ir_node *n) { unary_via(c, n, IR_OP_TANH_GRAD, out(n, 0)); }
static void ir_grad_sigmoid(ir_grad_ctx *c, ir_node *n) { unary_via(c, n, IR_OP_SIGMOID_GRAD, out(n, 0)); }

/* softplus(x) = log(1 + exp(x)), softplus'(x) = sigmoid(x) */
static void ir_grad_softplus(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), mul(c, dy, ir_emit1(c->g, IR_OP_SIGMOID, in(n, 0), NULL)));
}

static void ir_grad_exp(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), mul(c, dy, out(n, 0)));
}

static void ir_grad_log(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), divide(c, dy, in(n, 0)));
}

static void ir_grad_sqrt(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), divide(c, mul(c, dy, konst(c, 0.5, dy)), out(n, 0)));
}

static void ir_grad_rsqrt(ir_grad_ctx *c, ir_node *n)
{
    /* d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3 */
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int y = out(n, 0);
    ir_grad_put(c, in(n, 0), mul(c, dy, mul(c, konst(c, -0.5, y), mul(c, y, mul(c, y, y)))));
}

static void ir_grad_cast(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    int x = in(n, 0);
    if (dy < 0 || !ir_grad_wanted(c, x))
        return;
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "to", ir_dtype_name(T(c, x)->dtype));
    ir_grad_put(c, x, emit_attrs(c, IR_OP_CAST, &dy, 1, &a));
    ir_attrs_free(&a);
}

/* ---- GEMM and convolution ---- */

static int matmul(ir_grad_ctx *c, int a, int b, int ta, int tb)
{
    ir_attrs at = {0};
    ir_attrs_set_int(&at, "transpose_a", ta);
    ir_attrs_set_int(&at, "transpose_b", tb);
    int args[2] = {a, b};
    int r = emit_attrs(c, IR_OP_MATMUL, args, 2, &at);
    ir_attrs_free(&at);
    return r;
}

/* Folds the leading dims of x [..., r, c] into one: [prod, c]. */
static int fold_rows(ir_grad_ctx *c, int x)
{
    const ir_type *t = T(c, x);
    int64_t d[2] = {ir_type_numel(t) / t->dim[t->rank - 1], t->dim[t->rank - 1]};
    return reshape(c, x, d, 2);
}

static void ir_grad_matmul(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int a = in(n, 0), b = in(n, 1);
    int ta = (int)ir_attr_int(&n->attrs, "transpose_a", 0), tb = (int)ir_attr_int(&n->attrs, "transpose_b", 0);
    /* y = A' @ B' with A' = ta ? a^T : a, and B' likewise. */
    if (ir_grad_wanted(c, a)) {
        int da = ta ? matmul(c, b, dy, tb, 1) : matmul(c, dy, b, 0, !tb);
        ir_grad_put(c, a, da);
    }
    if (ir_grad_wanted(c, b)) {
        int db;
        if (T(c, b)->rank == 2 && T(c, a)->rank > 2 && !ta) {
            /* A 2-D weight under a batch of rows: fold the batch into rows
             * instead of summing per-batch products. */
            int a2 = fold_rows(c, a), dy2 = fold_rows(c, dy);
            db = tb ? matmul(c, dy2, a2, 1, 0) : matmul(c, a2, dy2, 1, 0);
        } else {
            db = tb ? matmul(c, dy, a, 1, ta) : matmul(c, a, dy, !ta, 0);
        }
        ir_grad_put(c, b, db);
    }
}

static void copy_conv_attrs(ir_attrs *dst, const ir_attrs *src, const ir_type *shape)
{
    ir_attrs_copy(dst, src);
    ir_attrs_set_ints(dst, "shape", shape->dim, shape->rank);
}

static void ir_grad_conv2d(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int x = in(n, 0), w = in(n, 1);
    if (ir_grad_wanted(c, x)) {
        ir_attrs a;
        copy_conv_attrs(&a, &n->attrs, T(c, x));
        int args[2] = {dy, w};
        ir_grad_put(c, x, emit_attrs(c, IR_OP_CONV2D_GRAD_INPUT, args, 2, &a));
        ir_attrs_free(&a);
    }
    if (ir_grad_wanted(c, w)) {
        ir_attrs a;
        copy_conv_attrs(&a, &n->attrs, T(c, w));
        int args[2] = {dy, x};
        ir_grad_put(c, w, emit_attrs(c, IR_OP_CONV2D_GRAD_WEIGHT, args, 2, &a));
        ir_attrs_free(&a);
    }
    if (n->in.n == 3 && ir_grad_wanted(c, in(n, 2))) {
        ir_attrs a = {0};
        int64_t axes[3] = {0, 2, 3};
        ir_attrs_set_ints(&a, "axis", axes, 3);
        ir_grad_put(c, in(n, 2), emit_attrs(c, IR_OP_SUM, &dy, 1, &a));
        ir_attrs_free(&a);
    }
}

/* ---- data movement ---- */

static void ir_grad_reshape(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), reshape(c, dy, T(c, in(n, 0))->dim, T(c, in(n, 0))->rank));
}

/* all_reduce sum over the tensor-parallel group (group = "tp", the "g"
 * of passes/shard_tp.c): every rank of the group computes the same loss
 * from the sum, so the sum's gradient is each rank's own dy (Megatron's
 * identity). Over any other group the ranks' losses add up, so the
 * gradient is dy summed over the group. No gradient flows through max. */
static void ir_grad_all_reduce(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    if (strcmp(ir_attr_str(&n->attrs, "reduce", "sum"), "sum"))
        return;
    const char *group = ir_attr_str(&n->attrs, "group", NULL);
    if (group && !strcmp(group, "tp")) {
        ir_grad_put(c, in(n, 0), dy);
        return;
    }
    ir_attrs a = {0};
    ir_attrs_copy(&a, &n->attrs);
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_ALL_REDUCE, &dy, 1, &a));
    ir_attrs_free(&a);
}

/* tp_copy (Megatron's "f"): x forward, dy summed over the
 * tensor-parallel group backward (each rank's dy is its split's share). */
static void ir_grad_tp_copy(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "reduce", "sum");
    ir_attrs_set_int(&a, "ranks", ir_attr_int(&n->attrs, "ranks", 1));
    ir_attrs_set_str(&a, "group", "tp");
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_ALL_REDUCE, &dy, 1, &a));
    ir_attrs_free(&a);
}

static void ir_grad_transpose(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), ir_emit1(c->g, IR_OP_TRANSPOSE, dy, NULL));
}

static void ir_grad_permute(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK];
    int r = ir_attr_ints(&n->attrs, "perm", perm, IR_MAX_RANK);
    for (int i = 0; i < r; i++)
        inv[perm[i]] = i;
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "perm", inv, r);
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_PERMUTE, &dy, 1, &a));
    ir_attrs_free(&a);
}

static void ir_grad_broadcast(ir_grad_ctx *c, ir_node *n)
{
    ir_grad_put(c, in(n, 0), ir_grad_get(c, out(n, 0)));
}

static void ir_grad_concat(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int64_t axis = ir_attr_int(&n->attrs, "axis", 0), off = 0;
    for (int i = 0; i < n->in.n; i++) {
        int64_t size = T(c, in(n, i))->dim[axis];
        if (ir_grad_wanted(c, in(n, i))) {
            ir_attrs a = {0};
            ir_attrs_set_int(&a, "axis", axis);
            ir_attrs_set_int(&a, "start", off);
            ir_attrs_set_int(&a, "end", off + size);
            ir_grad_put(c, in(n, i), emit_attrs(c, IR_OP_SLICE, &dy, 1, &a));
            ir_attrs_free(&a);
        }
        off += size;
    }
}

static void ir_grad_slice(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int64_t axis = ir_attr_int(&n->attrs, "axis", 0);
    ir_attrs a = {0};
    ir_attrs_set_int(&a, "axis", axis);
    ir_attrs_set_int(&a, "start", ir_attr_int(&n->attrs, "start", 0));
    ir_attrs_set_int(&a, "step", ir_attr_int(&n->attrs, "step", 1));
    ir_attrs_set_int(&a, "size", T(c, in(n, 0))->dim[axis]);
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_SLICE_GRAD, &dy, 1, &a));
    ir_attrs_free(&a);
}

static void ir_grad_embedding(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    int table = in(n, 1);
    if (dy < 0 || !ir_grad_wanted(c, table))
        return;
    ir_attrs a = {0};
    ir_attrs_set_int(&a, "rows", T(c, table)->dim[0]);
    int args[2] = {dy, in(n, 0)};
    ir_grad_put(c, table, emit_attrs(c, IR_OP_EMBEDDING_GRAD, args, 2, &a));
    ir_attrs_free(&a);
}

/* ---- reductions and losses ---- */

/* dy of a reduction, reshaped to keep the reduced axes as size 1. */
static int keepdim_grad(ir_grad_ctx *c, ir_node *n, int dy)
{
    const ir_type *x = T(c, in(n, 0));
    int64_t axes[IR_MAX_RANK], dims[IR_MAX_RANK];
    int na = ir_attr_ints(&n->attrs, "axis", axes, IR_MAX_RANK);
    bool red[IR_MAX_RANK] = {0};
    for (int i = 0; i < na; i++)
        red[axes[i]] = true;
    for (int i = 0; i < x->rank; i++)
        dims[i] = red[i] ? 1 : x->dim[i];
    return reshape(c, dy, dims, x->rank);
}

static void ir_grad_sum(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy >= 0)
        ir_grad_put(c, in(n, 0), broadcast_to(c, keepdim_grad(c, n, dy), T(c, in(n, 0))));
}

static void ir_grad_mean(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    double count = (double)ir_type_numel(T(c, in(n, 0))) / (double)ir_type_numel(T(c, out(n, 0)));
    int g = mul(c, keepdim_grad(c, n, dy), konst(c, 1.0 / count, dy));
    ir_grad_put(c, in(n, 0), broadcast_to(c, g, T(c, in(n, 0))));
}

/* max over axes: the gradient is split evenly among the elements that
 * tie for the maximum (as JAX and torch.amax do), so it sums to dy
 * whatever the number of ties: dx = dy / count * (x == max). Ties are
 * common in low precision, where rounding makes neighbours equal. */
static void ir_grad_max(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    const ir_type *x = T(c, in(n, 0));
    int y = broadcast_to(c, keepdim_grad(c, n, out(n, 0)), x);
    int mask = ir_emit2(c->g, IR_OP_EQ, in(n, 0), y, NULL);
    ir_attrs a = {0};
    ir_attrs_copy(&a, &n->attrs);
    ir_attrs_set_int(&a, "keepdim", 0);
    int count = emit_attrs(c, IR_OP_SUM, &mask, 1, &a);
    ir_attrs_free(&a);
    int share = divide(c, keepdim_grad(c, n, dy), keepdim_grad(c, n, count));
    ir_grad_put(c, in(n, 0), mul(c, broadcast_to(c, share, x), mask));
}

static void softmax_like(ir_grad_ctx *c, ir_node *n, ir_op op)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    ir_attrs a = {0};
    ir_attrs_set_int(&a, "axis", ir_attr_int(&n->attrs, "axis", -1));
    int args[2] = {dy, out(n, 0)};
    ir_grad_put(c, in(n, 0), emit_attrs(c, op, args, 2, &a));
    ir_attrs_free(&a);
}

static void ir_grad_softmax(ir_grad_ctx *c, ir_node *n) { softmax_like(c, n, IR_OP_SOFTMAX_GRAD); }
static void ir_grad_log_softmax(ir_grad_ctx *c, ir_node *n) { softmax_like(c, n, IR_OP_LOG_SOFTMAX_GRAD); }

static void ir_grad_cross_entropy(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int args[4] = {dy, in(n, 0), in(n, 1), -1};
    ir_attr *ign = ir_attrs_find(&n->attrs, "ignore_index");
    if (ign) {
        /* The rows not ignored, counted by ops of their own: the gradient
         * kernel's rows run in parallel and cannot count them. */
        int labels = in(n, 1);
        int skip = ir_emit_const(c->g, (double)ir_attr_int(&n->attrs, "ignore_index", 0), T(c, labels)->dtype);
        int kept = ir_emit2(c->g, IR_OP_NE, labels, skip, NULL);
        ir_attrs to = {0};
        ir_attrs_set_str(&to, "to", ir_dtype_name(T(c, dy)->dtype));
        int kept_f = ir_emit(c->g, IR_OP_CAST, &kept, 1, &to, NULL);
        ir_attrs_free(&to);
        args[3] = ir_emit1(c->g, IR_OP_SUM, kept_f, NULL);
    }
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_CROSS_ENTROPY_GRAD, args, ign ? 4 : 3, &n->attrs));
}

/* ---- windows, norms, dropout ---- */

static void ir_grad_maxpool(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int args[3] = {dy, in(n, 0), out(n, 0)};
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_MAXPOOL_GRAD, args, 3, &n->attrs));
}

/* A global average pool (one window, no padding, covering the whole
 * plane) is the mean over H and W: its gradient is the mean's, dy / K
 * broadcast over the plane, not a window gather that visits all K
 * window positions for each of the K inputs of a plane (issue 32 item 8:
 * 7.66 ms against 0.03 ms for the forward). dy / K as the gather
 * computes it, so the result is bit for bit the same. */
static bool global_avgpool(const ir_node *n, const ir_type *x)
{
    int64_t k[2], p[2] = {0, 0}, d[2] = {1, 1};
    if (x->rank != 4 || ir_attr_ints(&n->attrs, "size", k, 2) < 0)
        return false;
    ir_attr_ints(&n->attrs, "pad", p, 2);
    ir_attr_ints(&n->attrs, "dilation", d, 2);
    return k[0] == x->dim[2] && k[1] == x->dim[3] && !p[0] && !p[1] && d[0] == 1 && d[1] == 1;
}

static void ir_grad_avgpool(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    const ir_type *x = T(c, in(n, 0));
    if (global_avgpool(n, x)) {
        int g = divide(c, dy, konst(c, (double)(x->dim[2] * x->dim[3]), dy));
        ir_grad_put(c, in(n, 0), broadcast_to(c, g, x));
        return;
    }
    ir_attrs a;
    copy_conv_attrs(&a, &n->attrs, T(c, in(n, 0)));
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_AVGPOOL_GRAD, &dy, 1, &a));
    ir_attrs_free(&a);
}

static void norm_grad(ir_grad_ctx *c, ir_node *n, ir_op op)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int args[5] = {dy, in(n, 0), in(n, 1), out(n, 1), out(n, 2)};
    ir_type types[5];
    for (int i = 0; i < 5; i++)
        types[i] = *T(c, args[i]);
    ir_attrs a = {0};
    ir_infer inf = {.op = op, .nin = 5, .in = types, .attrs = &a};
    if (ir_infer_run(&inf))
        kl_panic("%s: %s", ir_op_name(op), inf.err);
    ir_node *g = ir_add_node(c->g, op, args, 5, &a, inf.out, NULL, n->loc);
    ir_attrs_free(&a);
    ir_grad_put(c, in(n, 0), g->out.v[0]);
    ir_grad_put(c, in(n, 1), g->out.v[1]);
    ir_grad_put(c, in(n, 2), g->out.v[2]);
}

/* Both backward kernels read (dout, q, k, v, out, lse); dq comes from
 * one, dk and dv from the other. */
static void ir_grad_attention(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int args[6] = {dy, in(n, 0), in(n, 1), in(n, 2), out(n, 0), out(n, 1)};
    ir_attrs a = {0};
    ir_attrs_set_int(&a, "causal", ir_attr_int(&n->attrs, "causal", 1));
    ir_attrs_set_float(&a, "scale", ir_attr_float(&n->attrs, "scale", 1));
    if (ir_grad_wanted(c, in(n, 0)))
        ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_ATTENTION_GRAD_Q, args, 6, &a));
    if (ir_grad_wanted(c, in(n, 1)) || ir_grad_wanted(c, in(n, 2))) {
        ir_type types[6];
        for (int i = 0; i < 6; i++)
            types[i] = *T(c, args[i]);
        ir_infer inf = {.op = IR_OP_ATTENTION_GRAD_KV, .nin = 6, .in = types, .attrs = &a};
        if (ir_infer_run(&inf))
            kl_panic("attention_grad_kv: %s", inf.err);
        ir_node *g = ir_add_node(c->g, IR_OP_ATTENTION_GRAD_KV, args, 6, &a, inf.out, NULL, n->loc);
        ir_grad_put(c, in(n, 1), g->out.v[0]);
        ir_grad_put(c, in(n, 2), g->out.v[1]);
    }
    ir_attrs_free(&a);
}

static void ir_grad_batchnorm(ir_grad_ctx *c, ir_node *n) { norm_grad(c, n, IR_OP_BATCHNORM_GRAD); }
static void ir_grad_layernorm(ir_grad_ctx *c, ir_node *n) { norm_grad(c, n, IR_OP_LAYERNORM_GRAD); }

static void ir_grad_dropout(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    ir_attrs a = {0};
    ir_attrs_set_float(&a, "p", ir_attr_float(&n->attrs, "p", 0.5));
    int args[2] = {dy, out(n, 1)};
    ir_grad_put(c, in(n, 0), emit_attrs(c, IR_OP_DROPOUT_GRAD, args, 2, &a));
    ir_attrs_free(&a);
}

/* Batch norm with running statistics (evaluation): an affine map per
 * channel, y = (x - rm) k gamma + beta with k = 1 / sqrt(rv + eps), so
 * dx = dy k gamma, dgamma = sum dy (x - rm) k, dbeta = sum dy over every
 * axis but the channel's. Built from elementwise ops and sums. */
static void ir_grad_batchnorm_infer(ir_grad_ctx *c, ir_node *n)
{
    int dy = ir_grad_get(c, out(n, 0));
    if (dy < 0)
        return;
    int x = in(n, 0), gamma = in(n, 1), beta = in(n, 2), rm = in(n, 3), rv = in(n, 4);
    const ir_type *xt = T(c, x);
    /* The per-channel vectors shaped to broadcast over x: [1, C, 1, ...]. */
    int64_t shape[IR_MAX_RANK], axes[IR_MAX_RANK];
    int na = 0;
    for (int i = 0; i < xt->rank; i++) {
        shape[i] = i == 1 ? xt->dim[1] : 1;
        if (i != 1)
            axes[na++] = i;
    }
    int eps = konst(c, ir_attr_float(&n->attrs, "eps", 1e-5), rv);
    int k = reshape(c, ir_emit1(c->g, IR_OP_RSQRT, ir_emit2(c->g, IR_OP_ADD, rv, eps, NULL), NULL), shape, xt->rank);
    int kg = mul(c, k, reshape(c, gamma, shape, xt->rank));
    if (ir_grad_wanted(c, x))
        ir_grad_put(c, x, mul(c, dy, kg));
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "axis", axes, na);
    if (ir_grad_wanted(c, gamma)) {
        int xhat = mul(c, ir_emit2(c->g, IR_OP_SUB, x, reshape(c, rm, shape, xt->rank), NULL), k);
        int p = mul(c, dy, xhat);
        ir_grad_put(c, gamma, emit_attrs(c, IR_OP_SUM, &p, 1, &a));
    }
    if (ir_grad_wanted(c, beta))
        ir_grad_put(c, beta, emit_attrs(c, IR_OP_SUM, &dy, 1, &a));
    ir_attrs_free(&a);
}

/* ---- the rules, found from the op row (its grad column) ---- */

static const ir_grad_fn rules[IR_NOPS] = {
#define OP(id, name, min_in, max_in, nout, kc, flags, prec, shape, grad, ...) [IR_OP_##id] = grad,
#include "ops.def"
#undef OP
};

ir_grad_fn ir_grad_rule(ir_op op)
{
    return rules[op];
}
