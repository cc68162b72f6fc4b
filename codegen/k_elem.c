/* Elementwise nests, the elementwise body of every pointwise op (its row
 * in ir/ops.def names it), and the kernels built from them: fused
 * elementwise chains, optimizer updates and data movement (transpose,
 * permute, concat, slice, embedding). See cg.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"

bool cg_in_group(const cg_group *grp, int node)
{
    int lo = 0, hi = grp->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (grp->nodes[mid] < node)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < grp->n && grp->nodes[lo] == node;
}

bool cg_computed_inside(const cg_group *grp, int v)
{
    const ir_value *val = ir_val(grp->g, v);
    if (val->def < 0)
        return false;
    ir_op op = ir_nd(grp->g, val->def)->op;
    /* Constants are folded into every kernel that reads them. */
    return op == IR_OP_CONST || (cg_in_group(grp, val->def) && ir_op_is_pointwise(op));
}

kir_expr *cg_scalar(cg_builder *b, int v)
{
    kl_check(ir_val(b->grp->g, v)->type.rank == 0);
    return cg_value_at(b, v);
}

bool cg_value_escapes(const cg_group *grp, int v)
{
    const ir_graph *g = grp->g;
    const ir_value *val = ir_val(g, v);
    for (int u = 0; u < val->uses.n; u++)
        if (!cg_in_group(grp, val->uses.v[u].node))
            return true;
    return ir_is_output(g, v);
}

kir_type cg_compute_type(const ir_graph *g, const int *values, int n)
{
    for (int i = 0; i < n; i++)
        if (ir_val(g, values[i])->type.dtype == IR_F64)
            return KT_F64;
    return KT_F32;
}

int cg_buf(cg_builder *b, int v)
{
    const ir_value *val = ir_val(b->grp->g, v);
    return kir_buf_add(b->k, v, val->type.dtype, ir_type_numel(&val->type));
}

/* Whether dim k (of the domain's rank) of t is broadcast: missing or 1
 * where the domain is larger. */
static bool bcast(const ir_type *t, const ir_type *domain, int k)
{
    int off = domain->rank - t->rank;
    return k < off || (t->dim[k - off] == 1 && domain->dim[k] != 1);
}

/* Stride (in elements) of domain dim k in t's row-major layout. */
static int64_t stride_of(const ir_type *t, const ir_type *domain, int k)
{
    if (bcast(t, domain, k))
        return 0;
    int off = domain->rank - t->rank;
    int64_t s = 1;
    for (int j = k - off + 1; j < t->rank; j++)
        s *= t->dim[j];
    return s;
}

/* Collects the values whose layout the nest must serve: what the group
 * reads from outside and what it stores. */
static int touched_values(const cg_group *grp, int *out, int max)
{
    int n = 0;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *nd = ir_nd(grp->g, grp->nodes[i]);
        for (int k = 0; k < nd->in.n && n < max; k++)
            if (!cg_computed_inside(grp, nd->in.v[k]))
                out[n++] = nd->in.v[k];
        for (int k = 0; k < nd->out.n && n < max; k++)
            out[n++] = nd->out.v[k];
    }
    return n;
}

int cg_nest_class(const cg_nest *nest, int j)
{
    return nest->cls[j];
}

void cg_nest_init(cg_builder *b, cg_nest *nest, const ir_type *domain, const int *cls)
{
    memset(nest, 0, sizeof *nest);
    nest->domain = *domain;
    int vals[128];
    int nv = touched_values(b->grp, vals, 128);
    /* Drop unit dims, then merge neighbours that every value reads the
     * same way (both broadcast or both not). */
    int r = 0;
    int first = -1;
    for (int k = 0; k < domain->rank; k++) {
        if (domain->dim[k] == 1) {
            nest->map[k] = r > 0 ? r - 1 : 0;
            continue;
        }
        bool merge = first >= 0 && (!cls || cls[k] == cls[first]);
        for (int i = 0; merge && i < nv; i++) {
            /* Only values read at the nest's positions count: those that
             * broadcast to the domain (a norm's per-channel vectors are
             * read by channel index instead). */
            const ir_type *t = &ir_val(b->grp->g, vals[i])->type;
            ir_type r;
            if (t->rank > domain->rank || ir_broadcast_shapes(t, domain, &r) ||
                r.rank != domain->rank || memcmp(r.dim, domain->dim, sizeof(int64_t) * (size_t)r.rank))
                continue;
            if (bcast(t, domain, k) != bcast(t, domain, first))
                merge = false;
        }
        if (merge) {
            nest->dim[r - 1] *= domain->dim[k];
        } else {
            nest->cls[r] = cls ? cls[k] : 0;
            nest->dim[r++] = domain->dim[k];
        }
        nest->map[k] = r - 1;
        first = k;
    }
    nest->rank = r;
    b->nest = nest;
}

void cg_nest_open(cg_builder *b, kir_loop_kind kind)
{
    cg_nest *nest = b->nest;
    for (int j = 0; j < nest->rank; j++)
        nest->var[j] = kir_loop_begin(b->k, kind, nest->dim[j], "i");
    cg_reset_cache(b);
}

void cg_nest_close(cg_builder *b)
{
    cg_close_loops(b, b->nest->rank);
    cg_reset_cache(b);
}

int cg_open_class(cg_builder *b, int cls, kir_loop_kind kind, const kir_acc_op *ops, int nacc, int *accs)
{
    cg_nest *nest = b->nest;
    int opened = 0;
    for (int j = 0; j < nest->rank; j++) {
        if (nest->cls[j] != cls)
            continue;
        nest->var[j] = kir_loop_begin(b->k, kind, nest->dim[j], cls == CG_KEPT ? "i" : "r");
        if (opened == 0)
            for (int a = 0; a < nacc; a++)
                accs[a] = kir_loop_acc(b->k, ops[a], "acc");
        opened++;
    }
    return opened;
}

void cg_close_loops(cg_builder *b, int n)
{
    for (int i = 0; i < n; i++)
        kir_loop_end(b->k);
}

void cg_reset_cache(cg_builder *b)
{
    for (int i = 0; i < b->ncached_ids; i++)
        b->cached[b->cached_ids[i]] = -1;
    b->ncached_ids = 0;
}

static void cache_value(cg_builder *b, int v, int var)
{
    if (v >= b->ncached)
        return;
    if (b->cached[v] < 0)
        b->cached_ids[b->ncached_ids++] = v;
    b->cached[v] = var;
}

kir_expr *cg_kept_index(cg_builder *b)
{
    cg_nest *nest = b->nest;
    kir_expr *idx = NULL;
    int64_t stride = 1;
    for (int j = nest->rank - 1; j >= 0; j--) {
        if (nest->cls[j] != CG_KEPT)
            continue;
        idx = kir_iadd(b->k, idx, kir_imul(b->k, kir_varref(b->k, nest->var[j]), stride));
        stride *= nest->dim[j];
    }
    return idx ? idx : kir_const_i(b->k, 0);
}

int64_t cg_class_size(const cg_nest *nest, int cls)
{
    int64_t n = 1;
    for (int j = 0; j < nest->rank; j++)
        if (nest->cls[j] == cls)
            n *= nest->dim[j];
    return n;
}

kir_expr *cg_dim_index(cg_builder *b, int k)
{
    cg_nest *nest = b->nest;
    const ir_type *d = &nest->domain;
    if (d->dim[k] == 1)
        return kir_const_i(b->k, 0);
    int j = nest->map[k];
    /* The original dims after k in the same collapsed group. */
    int64_t inner = 1;
    bool alone = true;
    for (int m = 0; m < d->rank; m++) {
        if (m == k || d->dim[m] == 1 || nest->map[m] != j)
            continue;
        alone = false;
        if (m > k)
            inner *= d->dim[m];
    }
    kir_expr *v = kir_varref(b->k, nest->var[j]);
    if (alone)
        return v;
    if (inner > 1)
        v = kir_bin(b->k, KB_IDIV, v, kir_const_i(b->k, inner));
    return kir_bin(b->k, KB_IMOD, v, kir_const_i(b->k, d->dim[k]));
}

kir_expr *cg_index(cg_builder *b, const ir_type *t)
{
    if (t->rank == 0 || ir_type_numel(t) == 1)
        return kir_const_i(b->k, 0); /* a scalar reads element 0 anywhere */
    cg_nest *nest = b->nest;
    const ir_type *d = &nest->domain;
    kir_expr *idx = NULL;
    /* For each collapsed dim, the stride of its innermost original dim. */
    for (int j = 0; j < nest->rank; j++) {
        if (nest->dim[j] == 1)
            continue; /* only unit dims: index 0 */
        int inner = -1;
        for (int k = 0; k < d->rank; k++)
            if (d->dim[k] != 1 && nest->map[k] == j)
                inner = k;
        kl_check(inner >= 0);
        int64_t s = stride_of(t, d, inner);
        if (s)
            idx = kir_iadd(b->k, idx, kir_imul(b->k, kir_varref(b->k, nest->var[j]), s));
    }
    return idx ? idx : kir_const_i(b->k, 0);
}

static int count_uses_inside(const cg_group *grp, int v)
{
    const ir_value *val = ir_val(grp->g, v);
    int n = 0;
    for (int u = 0; u < val->uses.n; u++)
        n += cg_in_group(grp, val->uses.v[u].node);
    return n;
}

kir_expr *cg_value_at(cg_builder *b, int v)
{
    if (v < b->ncached && b->cached[v] >= 0)
        return kir_varref(b->k, b->cached[v]);
    const cg_group *grp = b->grp;
    const ir_value *val = ir_val(grp->g, v);
    if (!cg_computed_inside(grp, v))
        return kir_load(b->k, cg_buf(b, v), cg_index(b, &val->type));
    const ir_node *n = ir_nd(grp->g, val->def);
    kir_expr *args[8];
    kl_check(n->in.n <= 8);
    for (int i = 0; i < n->in.n; i++)
        args[i] = cg_value_at(b, n->in.v[i]);
    kir_expr *e = cg_elem_apply(b, n, val->def_out, args);
    /* (A constant first: one may have thousands of uses.) */
    if (e->kind != KE_CONST && count_uses_inside(grp, v) + cg_value_escapes(grp, v) > 1) {
        int var = kir_let(b->k, e, "t");
        cache_value(b, v, var);
        return kir_varref(b->k, var);
    }
    return e;
}

void cg_store_at(cg_builder *b, int v, kir_expr *e)
{
    kir_store(b->k, cg_buf(b, v), cg_index(b, &ir_val(b->grp->g, v)->type), e);
}

static double node_f(const ir_node *n, const char *key, double d)
{
    return ir_attr_float(&n->attrs, key, d);
}

/* ---- elementwise bodies: one per pointwise op, found from the op row ---- */

/* What a body builder sees: the kernel, the node, which of its results
 * it computes (dropout has two) and its operands' expressions at the
 * nest's current position. */
typedef struct elem_args {
    cg_builder *b;
    kir_kernel *k;
    const ir_node *n;
    int result;
    kir_expr **a;
} elem_args;

typedef kir_expr *(*elem_body)(const elem_args *e);

static kir_expr *zero(const elem_args *e) { return kir_const_f(e->k, 0); }
static kir_expr *one(const elem_args *e) { return kir_const_f(e->k, 1); }
static kir_expr *bin(const elem_args *e, kir_binop op) { return kir_bin(e->k, op, e->a[0], e->a[1]); }
static kir_expr *un(const elem_args *e, kir_unop op) { return kir_un(e->k, op, e->a[0]); }

static kir_expr *elem_const(const elem_args *e) { return kir_const_f(e->k, node_f(e->n, "value", 0)); }
static kir_expr *elem_add(const elem_args *e) { return bin(e, KB_ADD); }
static kir_expr *elem_sub(const elem_args *e) { return bin(e, KB_SUB); }
static kir_expr *elem_mul(const elem_args *e) { return bin(e, KB_MUL); }
static kir_expr *elem_div(const elem_args *e) { return bin(e, KB_DIV); }
static kir_expr *elem_pow(const elem_args *e) { return bin(e, KB_POW); }
static kir_expr *elem_maximum(const elem_args *e) { return bin(e, KB_MAX); }
static kir_expr *elem_minimum(const elem_args *e) { return bin(e, KB_MIN); }
static kir_expr *elem_ge(const elem_args *e) { return kir_select(e->k, bin(e, KB_GE), one(e), zero(e)); }
static kir_expr *elem_eq(const elem_args *e) { return kir_select(e->k, bin(e, KB_EQ), one(e), zero(e)); }
static kir_expr *elem_gt(const elem_args *e) { return kir_select(e->k, bin(e, KB_GT), one(e), zero(e)); }
static kir_expr *elem_ne(const elem_args *e) { return kir_select(e->k, bin(e, KB_NE), one(e), zero(e)); }
/* cond != 0: a NaN condition is true, as in NumPy */
static kir_expr *elem_where(const elem_args *e)
{
    return kir_select(e->k, kir_bin(e->k, KB_NE, e->a[0], zero(e)), e->a[1], e->a[2]);
}
static kir_expr *elem_isfinite(const elem_args *e) { return un(e, KU_ISFINITE); }
static kir_expr *elem_neg(const elem_args *e) { return un(e, KU_NEG); }
static kir_expr *elem_relu(const elem_args *e) { return un(e, KU_RELU); }
static kir_expr *elem_tanh(const elem_args *e) { return un(e, KU_TANH); }
static kir_expr *elem_sigmoid(const elem_args *e) { return un(e, KU_SIGMOID); }
static kir_expr *elem_exp(const elem_args *e) { return un(e, KU_EXP); }
static kir_expr *elem_log(const elem_args *e) { return un(e, KU_LOG); }
static kir_expr *elem_sqrt(const elem_args *e) { return un(e, KU_SQRT); }
static kir_expr *elem_rsqrt(const elem_args *e) { return un(e, KU_RSQRT); }
static kir_expr *elem_broadcast(const elem_args *e) { return e->a[0]; }

/* The index of the result's element along its axis `axis` (counted from
 * the end: 1 is the last) at the nest's position; 0 where the result has
 * size 1 there (it broadcasts across the domain). */
static kir_expr *result_axis_index(const elem_args *e, int from_end)
{
    const ir_type *t = &ir_val(e->b->grp->g, e->n->out.v[e->result])->type;
    const ir_type *d = &e->b->nest->domain;
    if (t->dim[t->rank - from_end] == 1)
        return kir_const_i(e->k, 0);
    return cg_dim_index(e->b, d->rank - from_end);
}

static kir_expr *elem_arange(const elem_args *e)
{
    kir_expr *i = result_axis_index(e, 1);
    ir_dtype dt = ir_val(e->b->grp->g, e->n->out.v[0])->type.dtype;
    if (!ir_dtype_is_float(dt))
        return i;
    return kir_cast(e->k, dt == IR_F64 ? KT_F64 : e->k->compute, i);
}

/* col - row <= k keeps the lower triangle (tril), col - row >= k the upper */
static kir_expr *tri(const elem_args *e, kir_binop keep_op)
{
    kir_kernel *k = e->k;
    kir_expr *row = result_axis_index(e, 2), *col = result_axis_index(e, 1);
    kir_expr *diff = kir_bin(k, KB_SUB, col, row);
    kir_expr *keep = kir_bin(k, keep_op, diff, kir_const_i(k, ir_attr_int(&e->n->attrs, "k", 0)));
    kir_expr *z = e->a[0]->type == KT_I64 ? kir_const_i(k, 0) : zero(e);
    return kir_select(k, keep, e->a[0], z);
}
static kir_expr *elem_tril(const elem_args *e) { return tri(e, KB_LE); }
static kir_expr *elem_triu(const elem_args *e) { return tri(e, KB_GE); }

/* log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): exp cannot overflow */
static kir_expr *elem_softplus(const elem_args *e)
{
    kir_kernel *k = e->k;
    kir_expr *tail = kir_un(k, KU_EXP, kir_un(k, KU_NEG, un(e, KU_ABS)));
    return kir_bin(k, KB_ADD, un(e, KU_RELU), kir_un(k, KU_LOG, kir_bin(k, KB_ADD, one(e), tail)));
}

/* Phi(x) = (1 + erf(x / sqrt 2)) / 2, the standard normal CDF. */
static kir_expr *normal_cdf(kir_kernel *k, kir_expr *x)
{
    kir_expr *erf = kir_un(k, KU_ERF, kir_bin(k, KB_MUL, x, kir_const_f(k, M_SQRT1_2)));
    return kir_bin(k, KB_MUL, kir_const_f(k, 0.5), kir_bin(k, KB_ADD, kir_const_f(k, 1), erf));
}

/* GPT-2's tanh form: t = tanh(sqrt(2 / pi) (x + 0.044715 x^3)), and
 * gelu(x) ~ x (1 + t) / 2 (what cuBLASLt's GELU epilogues compute). */
#define GELU_TANH_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_TANH_A 0.044715
static kir_expr *gelu_tanh_t(kir_kernel *k, kir_expr *x)
{
    kir_expr *x3 = kir_bin(k, KB_MUL, kir_const_f(k, GELU_TANH_A), kir_bin(k, KB_MUL, x, kir_bin(k, KB_MUL, x, x)));
    return kir_un(k, KU_TANH, kir_bin(k, KB_MUL, kir_const_f(k, GELU_TANH_C), kir_bin(k, KB_ADD, x, x3)));
}

/* x * Phi(x), or its tanh form */
static kir_expr *elem_gelu(const elem_args *e)
{
    kir_kernel *k = e->k;
    if (!ir_gelu_is_tanh(&e->n->attrs))
        return kir_bin(k, KB_MUL, e->a[0], normal_cdf(k, e->a[0]));
    kir_expr *half = kir_bin(k, KB_MUL, kir_const_f(k, 0.5), kir_bin(k, KB_ADD, kir_const_f(k, 1), gelu_tanh_t(k, e->a[0])));
    return kir_bin(k, KB_MUL, e->a[0], half);
}

static kir_expr *elem_cast(const elem_args *e)
{
    /* The value rounds to the target dtype even when it stays in a
     * register of the fused kernel. */
    kir_kernel *k = e->k;
    ir_dtype to = ir_dtype_from_name(ir_attr_str(&e->n->attrs, "to", "f32"));
    ir_dtype from = ir_val(e->b->grp->g, e->n->in.v[0])->type.dtype;
    if (!ir_dtype_is_float(to))
        return kir_cast(k, KT_I64, e->a[0]);
    /* Widened, a 16-bit value is its rounded value even when the fused
     * kernel computed it wider (not loaded): what a kernel that stored
     * it and one that read it back would see, so that where the fusion
     * pass draws a kernel's edge does not change the result (tensor
     * parallelism's collectives draw other edges than one rank's plan). */
    if ((to == IR_F64 || to == IR_F32) && (from == IR_BF16 || from == IR_F16) && e->a[0]->kind != KE_LOAD)
        return kir_cast(k, to == IR_F64 ? KT_F64 : k->compute,
                        kir_un(k, from == IR_BF16 ? KU_ROUND_BF16 : KU_ROUND_F16, e->a[0]));
    kir_expr *x = kir_cast(k, to == IR_F64 ? KT_F64 : k->compute, e->a[0]);
    if (to == IR_BF16 && from != IR_BF16)
        return kir_un(k, KU_ROUND_BF16, x);
    if (to == IR_F16 && from != IR_F16)
        return kir_un(k, KU_ROUND_F16, x);
    if (to == IR_F32 && from == IR_F64 && k->compute == KT_F64)
        return kir_un(k, KU_ROUND_F32, x);
    return x;
}

/* Backward ops: a[0] is dy, a[1] what the gradient reads (x or y). */
static kir_expr *elem_relu_grad(const elem_args *e)
{
    return kir_select(e->k, kir_bin(e->k, KB_GT, e->a[1], zero(e)), e->a[0], zero(e));
}

static kir_expr *elem_tanh_grad(const elem_args *e)
{
    kir_kernel *k = e->k;
    return kir_bin(k, KB_MUL, e->a[0], kir_bin(k, KB_SUB, one(e), kir_bin(k, KB_MUL, e->a[1], e->a[1])));
}

static kir_expr *elem_sigmoid_grad(const elem_args *e)
{
    kir_kernel *k = e->k;
    return kir_bin(k, KB_MUL, e->a[0], kir_bin(k, KB_MUL, e->a[1], kir_bin(k, KB_SUB, one(e), e->a[1])));
}

/* A value used several times in one body, bound once: the printer
 * prints expression trees, so a shared subtree would be printed (and
 * computed, if the compiler does not merge them) once per use. */
static kir_expr *shared(kir_kernel *k, kir_expr *e, const char *hint)
{
    if (e->kind == KE_CONST || e->kind == KE_VAR)
        return e;
    return kir_varref(k, kir_let(k, e, hint));
}

/* d/dx x Phi(x) = Phi(x) + x phi(x); of the tanh form,
 * (1 + t) / 2 + x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715 x^2) / 2,
 * in one pass: x, x^2 and the one tanh bound once. */
static kir_expr *elem_gelu_grad(const elem_args *e)
{
    kir_kernel *k = e->k;
    kir_expr *x = e->a[1];
    if (ir_gelu_is_tanh(&e->n->attrs)) {
        x = shared(k, x, "gx");
        kir_expr *x2 = shared(k, kir_bin(k, KB_MUL, x, x), "gx2");
        kir_expr *u = kir_bin(k, KB_MUL, kir_const_f(k, GELU_TANH_C),
                              kir_bin(k, KB_ADD, x, kir_bin(k, KB_MUL, kir_const_f(k, GELU_TANH_A), kir_bin(k, KB_MUL, x, x2))));
        kir_expr *t = shared(k, kir_un(k, KU_TANH, u), "gt");
        kir_expr *du = kir_bin(k, KB_MUL, kir_const_f(k, GELU_TANH_C),
                               kir_bin(k, KB_ADD, kir_const_f(k, 1), kir_bin(k, KB_MUL, kir_const_f(k, 3 * GELU_TANH_A), x2)));
        kir_expr *sech2 = kir_bin(k, KB_SUB, kir_const_f(k, 1), kir_bin(k, KB_MUL, t, t));
        kir_expr *d = kir_bin(k, KB_ADD, kir_bin(k, KB_ADD, kir_const_f(k, 1), t),
                              kir_bin(k, KB_MUL, x, kir_bin(k, KB_MUL, sech2, du)));
        return kir_bin(k, KB_MUL, e->a[0], kir_bin(k, KB_MUL, kir_const_f(k, 0.5), d));
    }
    kir_expr *pdf = kir_un(k, KU_NPDF, x);
    return kir_bin(k, KB_MUL, e->a[0], kir_bin(k, KB_ADD, normal_cdf(k, x), kir_bin(k, KB_MUL, x, pdf)));
}

/* Result 0: x / (1 - p) where kept, else 0; result 1: the mask. */
static kir_expr *elem_dropout(const elem_args *e)
{
    kir_kernel *k = e->k;
    double p = node_f(e->n, "p", 0.5);
    int64_t salt = ir_attr_int(&e->n->attrs, "seed", 0) * 1000003 + e->n->id;
    kir_expr *flat = cg_index(e->b, &e->b->nest->domain);
    kir_expr *keep = kir_bin(k, KB_GE, kir_rand(k, salt, flat), kir_const_f(k, p));
    if (e->result == 1)
        return kir_select(k, keep, one(e), zero(e));
    return kir_select(k, keep, kir_bin(k, KB_MUL, e->a[0], kir_const_f(k, 1.0 / (1.0 - p))), zero(e));
}

static kir_expr *elem_dropout_grad(const elem_args *e)
{
    kir_kernel *k = e->k;
    double p = node_f(e->n, "p", 0.5);
    return kir_bin(k, KB_MUL, kir_bin(k, KB_MUL, e->a[0], e->a[1]), kir_const_f(k, 1.0 / (1.0 - p)));
}

static const elem_body bodies[IR_NOPS] = {
#define OP(id, name, min_in, max_in, nout, kc, flags, prec, shape, grad, writes, body, spec) [IR_OP_##id] = body,
#include "ir/ops.def"
#undef OP
};

bool cg_has_body(ir_op op)
{
    return bodies[op] != NULL;
}

kir_expr *cg_elem_apply(cg_builder *b, const ir_node *n, int result, kir_expr **a)
{
    if (!bodies[n->op])
        kl_panic("%s is not elementwise (no body in its op row)", ir_op_name(n->op));
    elem_args e = {b, b->k, n, result, a};
    return bodies[n->op](&e);
}

void cg_emit_epilogue(cg_builder *b, int v, kir_expr *e)
{
    const cg_group *grp = b->grp;
    const ir_graph *g = grp->g;
    int var = kir_let(b->k, e, "y");
    cache_value(b, v, var);
    if (cg_value_escapes(grp, v))
        cg_store_at(b, v, kir_varref(b->k, var));
    /* Values downstream of v in this group, in order. */
    bool *down = kl_xcalloc((size_t)g->values.n + 1, 1);
    down[v] = true;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        bool reads = false;
        for (int k = 0; k < n->in.n; k++)
            reads |= down[n->in.v[k]];
        if (!reads || !cg_computed_inside(grp, n->out.v[0]))
            continue;
        for (int k = 0; k < n->out.n; k++) {
            down[n->out.v[k]] = true;
            if (cg_value_escapes(grp, n->out.v[k]))
                cg_store_at(b, n->out.v[k], cg_value_at(b, n->out.v[k]));
        }
    }
    free(down);
}

/* ---- fused elementwise chains ---- */

ir_type cg_elementwise_domain(const cg_group *grp)
{
    const ir_graph *g = grp->g;
    /* The largest result shape (every result broadcasts to it). */
    ir_type domain = {0};
    int64_t best = -1;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        for (int k = 0; k < n->out.n; k++) {
            const ir_type *t = &ir_val(g, n->out.v[k])->type;
            if (ir_type_numel(t) > best)
                best = ir_type_numel(t), domain = *t;
        }
    }
    return domain;
}

void cg_build_elementwise(cg_builder *b)
{
    const cg_group *grp = b->grp;
    const ir_graph *g = grp->g;
    ir_type domain = cg_elementwise_domain(grp);
    cg_nest nest;
    cg_nest_init(b, &nest, &domain, NULL);
    b->k->work = ir_type_numel(&domain);
    cg_nest_open(b, KL_PAR);
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        for (int k = 0; k < n->out.n; k++) {
            int v = n->out.v[k];
            if (cg_value_escapes(grp, v))
                cg_store_at(b, v, cg_value_at(b, v));
        }
    }
    cg_nest_close(b);
}

/* ---- optimizer updates ---- */

/* The rounding of a store into a low-precision copy is the buffer's. */
static void store_copy(cg_builder *b, const ir_node *n, int copy_operand, kir_expr *idx, kir_expr *w)
{
    if (copy_operand < n->in.n)
        kir_store(b->k, cg_buf(b, n->in.v[copy_operand]), idx, w);
}

void cg_build_update(cg_builder *b, const ir_node *n)
{
    kir_kernel *k = b->k;
    const ir_graph *g = b->grp->g;
    if (n->op == IR_OP_GRAD_ACCUMULATE) {
        /* acc = g on the first micro-batch of a step, acc + g after. */
        int acc = n->in.v[0], grad = n->in.v[1];
        int64_t steps = ir_attr_int(&n->attrs, "steps", 1), numel = ir_type_numel(&ir_val(g, acc)->type);
        int ba = cg_buf(b, acc), bg = cg_buf(b, grad);
        int first = kir_let(k, kir_bin(k, KB_EQ, kir_bin(k, KB_IMOD, kir_arg(k, 0), kir_const_i(k, steps)), kir_const_i(k, 0)), "first");
        b->k->work = numel;
        int i = kir_loop_begin(k, KL_PAR, numel, "i");
        kir_expr *gv = kir_load(k, bg, kir_varref(k, i));
        kir_store(k, ba, kir_varref(k, i), kir_select(k, kir_varref(k, first), gv,
                                                      kir_bin(k, KB_ADD, kir_load(k, ba, kir_varref(k, i)), gv)));
        kir_loop_end(k);
        return;
    }
    int w = n->in.v[0], grad = n->in.v[1], hyper = n->in.v[2], scale = n->in.v[3];
    int64_t numel = ir_type_numel(&ir_val(g, w)->type);
    int bw = cg_buf(b, w), bg = cg_buf(b, grad), bh = cg_buf(b, hyper);
    /* Per step: lr, bias corrections, gradient multiplier (hyper), and the
     * device-computed scale (clipping; 0: skip the step). */
    int lr = kir_let(k, kir_load(k, bh, kir_const_i(k, 0)), "lr");
    int gm = kir_let(k, kir_bin(k, KB_MUL, kir_load(k, bh, kir_const_i(k, 3)), cg_scalar(b, scale)), "gm");
    double wd = node_f(n, "weight_decay", 0);
    b->k->work = numel;
    /* Skip the step when the scale is 0 or not finite (fp16 overflow). */
    kir_if_begin(k, kir_bin(k, KB_AND, kir_bin(k, KB_NE, kir_varref(k, gm), kir_const_f(k, 0)),
                            kir_bin(k, KB_EQ, kir_un(k, KU_ISFINITE, kir_varref(k, gm)), kir_const_f(k, 1))));
    int i = kir_loop_begin(k, KL_PAR, numel, "i");
    kir_expr *idx = kir_varref(k, i);
    int wv = kir_let(k, kir_load(k, bw, idx), "w");
    kir_expr *gexpr = kir_bin(k, KB_MUL, kir_load(k, bg, idx), kir_varref(k, gm));
    kir_expr *W = kir_varref(k, wv);
    if (n->op == IR_OP_SGD_UPDATE) {
        double mom = node_f(n, "momentum", 0);
        if (wd)
            gexpr = kir_bin(k, KB_ADD, gexpr, kir_bin(k, KB_MUL, kir_const_f(k, wd), W));
        int gv = kir_let(k, gexpr, "g");
        kir_expr *step = kir_varref(k, gv);
        int copy = 4;
        if (mom > 0) {
            int bm = cg_buf(b, n->in.v[4]);
            int mv = kir_let(k, kir_bin(k, KB_ADD, kir_bin(k, KB_MUL, kir_const_f(k, mom), kir_load(k, bm, idx)), step), "m");
            kir_store(k, bm, idx, kir_varref(k, mv));
            step = ir_attr_int(&n->attrs, "nesterov", 0)
                       ? kir_bin(k, KB_ADD, kir_varref(k, gv), kir_bin(k, KB_MUL, kir_const_f(k, mom), kir_varref(k, mv)))
                       : kir_varref(k, mv);
            copy = 5;
        }
        int nw = kir_let(k, kir_bin(k, KB_SUB, W, kir_bin(k, KB_MUL, kir_varref(k, lr), step)), "nw");
        kir_store(k, bw, idx, kir_varref(k, nw));
        store_copy(b, n, copy, idx, kir_varref(k, nw));
    } else {
        double b1 = node_f(n, "beta1", 0.9), b2 = node_f(n, "beta2", 0.999), eps = node_f(n, "eps", 1e-8);
        bool decoupled = ir_attr_int(&n->attrs, "decoupled", 1);
        if (wd && !decoupled)
            gexpr = kir_bin(k, KB_ADD, gexpr, kir_bin(k, KB_MUL, kir_const_f(k, wd), W));
        int gv = kir_let(k, gexpr, "g");
        kir_expr *G = kir_varref(k, gv);
        int bm = cg_buf(b, n->in.v[4]), bv = cg_buf(b, n->in.v[5]);
        int mv = kir_let(k, kir_bin(k, KB_ADD, kir_bin(k, KB_MUL, kir_const_f(k, b1), kir_load(k, bm, idx)),
                                    kir_bin(k, KB_MUL, kir_const_f(k, 1 - b1), G)), "m");
        int vv = kir_let(k, kir_bin(k, KB_ADD, kir_bin(k, KB_MUL, kir_const_f(k, b2), kir_load(k, bv, idx)),
                                    kir_bin(k, KB_MUL, kir_const_f(k, 1 - b2), kir_bin(k, KB_MUL, G, G))), "v");
        kir_store(k, bm, idx, kir_varref(k, mv));
        kir_store(k, bv, idx, kir_varref(k, vv));
        kir_expr *mhat = kir_bin(k, KB_DIV, kir_varref(k, mv), kir_load(k, bh, kir_const_i(k, 1)));
        kir_expr *vhat = kir_bin(k, KB_DIV, kir_varref(k, vv), kir_load(k, bh, kir_const_i(k, 2)));
        kir_expr *upd = kir_bin(k, KB_DIV, mhat, kir_bin(k, KB_ADD, kir_un(k, KU_SQRT, vhat), kir_const_f(k, eps)));
        if (wd && decoupled)
            upd = kir_bin(k, KB_ADD, upd, kir_bin(k, KB_MUL, kir_const_f(k, wd), W));
        int nw = kir_let(k, kir_bin(k, KB_SUB, W, kir_bin(k, KB_MUL, kir_varref(k, lr), upd)), "nw");
        kir_store(k, bw, idx, kir_varref(k, nw));
        store_copy(b, n, 6, idx, kir_varref(k, nw));
    }
    kir_loop_end(k);
    kir_if_end(k);
}

/* ---- data movement ---- */

/* Row-major strides of t. */
static void strides(const ir_type *t, int64_t *s)
{
    int64_t acc = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        s[i] = acc;
        acc *= t->dim[i];
    }
}

/* Opens PAR loops over every dim of t (no collapsing); vars out. */
static void open_full(kir_kernel *k, const ir_type *t, int *vars)
{
    for (int i = 0; i < t->rank; i++)
        vars[i] = kir_loop_begin(k, KL_PAR, t->dim[i], "i");
}

static void close_n(kir_kernel *k, int n)
{
    for (int i = 0; i < n; i++)
        kir_loop_end(k);
}

/* sum_j vars[j] * s[j] */
static kir_expr *linear(kir_kernel *k, const int *vars, const int64_t *s, int rank)
{
    kir_expr *e = NULL;
    for (int j = 0; j < rank; j++)
        e = kir_iadd(k, e, kir_imul(k, kir_varref(k, vars[j]), s[j]));
    return e ? e : kir_const_i(k, 0);
}

static kir_expr *load_as(kir_kernel *k, int buf, kir_expr *idx)
{
    return kir_load(k, buf, idx);
}

void cg_build_move(cg_builder *b, const ir_node *n)
{
    kir_kernel *k = b->k;
    const ir_graph *g = b->grp->g;
    int x = n->in.v[0], y = n->out.v[0];
    const ir_type *xt = &ir_val(g, x)->type, *yt = &ir_val(g, y)->type;
    int64_t xs[IR_MAX_RANK], ys[IR_MAX_RANK];
    strides(xt, xs);
    strides(yt, ys);
    int vars[IR_MAX_RANK];
    int bx = cg_buf(b, x), by = cg_buf(b, y);
    k->work = ir_type_numel(yt);
    switch (n->op) {
    case IR_OP_TRANSPOSE:
    case IR_OP_PERMUTE: {
        int64_t perm[IR_MAX_RANK], s[IR_MAX_RANK];
        if (n->op == IR_OP_PERMUTE) {
            ir_attr_ints(&n->attrs, "perm", perm, IR_MAX_RANK);
        } else {
            for (int i = 0; i < xt->rank; i++)
                perm[i] = i;
            perm[xt->rank - 1] = xt->rank - 2;
            perm[xt->rank - 2] = xt->rank - 1;
        }
        for (int i = 0; i < yt->rank; i++)
            s[i] = xs[perm[i]];
        open_full(k, yt, vars);
        kir_store(k, by, linear(k, vars, ys, yt->rank), load_as(k, bx, linear(k, vars, s, yt->rank)));
        close_n(k, yt->rank);
        return;
    }
    case IR_OP_SLICE: {
        int axis = (int)ir_attr_int(&n->attrs, "axis", 0);
        int64_t start = ir_attr_int(&n->attrs, "start", 0), step = ir_attr_int(&n->attrs, "step", 1);
        open_full(k, yt, vars);
        kir_expr *src = kir_const_i(k, start * xs[axis]);
        for (int j = 0; j < yt->rank; j++)
            src = kir_iadd(k, src, kir_imul(k, kir_varref(k, vars[j]), j == axis ? xs[j] * step : xs[j]));
        kir_store(k, by, linear(k, vars, ys, yt->rank), load_as(k, bx, src));
        close_n(k, yt->rank);
        return;
    }
    case IR_OP_SLICE_GRAD: {
        /* dx = dy where the slice took elements, 0 elsewhere: one pass. */
        int axis = (int)ir_attr_int(&n->attrs, "axis", 0);
        int64_t start = ir_attr_int(&n->attrs, "start", 0), step = ir_attr_int(&n->attrs, "step", 1);
        int64_t count = xt->dim[axis];
        open_full(k, yt, vars);
        kir_expr *pos = kir_bin(k, KB_SUB, kir_varref(k, vars[axis]), kir_const_i(k, start));
        kir_expr *inside = kir_bin(k, KB_AND, kir_bin(k, KB_GE, pos, kir_const_i(k, 0)),
                                   kir_bin(k, KB_AND, kir_bin(k, KB_LT, pos, kir_const_i(k, count * step)),
                                           kir_bin(k, KB_EQ, kir_bin(k, KB_IMOD, pos, kir_const_i(k, step)), kir_const_i(k, 0))));
        /* The source index with the axis clamped into range. */
        kir_expr *q = kir_bin(k, KB_IDIV, pos, kir_const_i(k, step));
        q = kir_bin(k, KB_MAX, kir_const_i(k, 0), kir_bin(k, KB_MIN, q, kir_const_i(k, count - 1)));
        kir_expr *src = NULL;
        for (int j = 0; j < yt->rank; j++)
            src = kir_iadd(k, src, j == axis ? kir_imul(k, q, xs[j]) : kir_imul(k, kir_varref(k, vars[j]), xs[j]));
        kir_store(k, by, linear(k, vars, ys, yt->rank),
                  kir_select(k, inside, load_as(k, bx, src), kir_const_f(k, 0)));
        close_n(k, yt->rank);
        return;
    }
    case IR_OP_CONCAT: {
        int axis = (int)ir_attr_int(&n->attrs, "axis", 0);
        int64_t off = 0;
        for (int i = 0; i < n->in.n; i++) {
            const ir_type *it = &ir_val(g, n->in.v[i])->type;
            int64_t is[IR_MAX_RANK];
            strides(it, is);
            int bi = cg_buf(b, n->in.v[i]);
            open_full(k, it, vars);
            kir_expr *dst = kir_const_i(k, off * ys[axis]);
            dst = kir_iadd(k, dst, linear(k, vars, ys, it->rank));
            kir_store(k, by, dst, load_as(k, bi, linear(k, vars, is, it->rank)));
            close_n(k, it->rank);
            off += it->dim[axis];
        }
        return;
    }
    case IR_OP_EMBEDDING: {
        /* out[i, d] = table[ids[i], d], the row clamped into the table. */
        int table = n->in.v[1];
        const ir_type *tt = &ir_val(g, table)->type;
        int bt = cg_buf(b, table);
        int64_t rows = ir_type_numel(xt), dim = tt->dim[1];
        int i = kir_loop_begin(k, KL_PAR, rows, "i");
        kir_expr *row = kir_load(k, bx, kir_varref(k, i));
        row = kir_bin(k, KB_MAX, kir_const_i(k, 0), kir_bin(k, KB_MIN, row, kir_const_i(k, tt->dim[0] - 1)));
        int r = kir_let(k, row, "row");
        int d = kir_loop_begin(k, KL_PAR, dim, "d");
        kir_store(k, by, kir_iadd(k, kir_imul(k, kir_varref(k, i), dim), kir_varref(k, d)),
                  load_as(k, bt, kir_iadd(k, kir_imul(k, kir_varref(k, r), dim), kir_varref(k, d))));
        close_n(k, 2);
        return;
    }
    case IR_OP_EMBEDDING_GRAD: {
        /* Zero the table gradient, then add each row's gradient serially
         * (deterministic; the GPU uses atomics). */
        int ids = n->in.v[1];
        int bids = cg_buf(b, ids);
        int64_t rows = ir_type_numel(&ir_val(g, ids)->type), dim = yt->dim[1], vocab = yt->dim[0];
        int z = kir_loop_begin(k, KL_PAR, vocab * dim, "i");
        kir_store(k, by, kir_varref(k, z), kir_const_f(k, 0));
        kir_loop_end(k);
        int i = kir_loop_begin(k, KL_SEQ, rows, "i");
        kir_expr *row = kir_load(k, bids, kir_varref(k, i));
        row = kir_bin(k, KB_MAX, kir_const_i(k, 0), kir_bin(k, KB_MIN, row, kir_const_i(k, vocab - 1)));
        int r = kir_let(k, row, "row");
        int d = kir_loop_begin(k, KL_SEQ, dim, "d");
        kir_addto(k, by, kir_iadd(k, kir_imul(k, kir_varref(k, r), dim), kir_varref(k, d)),
                  load_as(k, bx, kir_iadd(k, kir_imul(k, kir_varref(k, i), dim), kir_varref(k, d))));
        close_n(k, 2);
        return;
    }
    default:
        kl_panic("no movement kernel for %s", ir_op_name(n->op));
    }
}
