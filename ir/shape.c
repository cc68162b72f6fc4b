/* Shape and dtype rules of the op table. A rule may rewrite its attributes
 * into a canonical form (negative axes made positive, defaults that depend
 * on other attributes filled in), so that later stages read one form. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shape.h"

static const char *tstr(const ir_type *t, char *buf, size_t n);

int ir_infer_error(ir_infer *inf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(inf->err, sizeof inf->err, fmt, ap);
    va_end(ap);
    return -1;
}

int ir_infer_run(ir_infer *inf)
{
    const ir_op_info *info = &ir_ops[inf->op];
    inf->err[0] = 0;
    if (inf->nin < info->min_in || (info->max_in >= 0 && inf->nin > info->max_in)) {
        if (info->min_in == info->max_in)
            return ir_infer_error(inf, "%s takes %d operand%s, got %d", info->name, info->min_in,
                                  info->min_in == 1 ? "" : "s", inf->nin);
        if (info->max_in < 0)
            return ir_infer_error(inf, "%s takes at least %d operand%s, got %d", info->name,
                                  info->min_in, info->min_in == 1 ? "" : "s", inf->nin);
        return ir_infer_error(inf, "%s takes %d to %d operands, got %d", info->name, info->min_in,
                              info->max_in, inf->nin);
    }
    if (ir_attrs_normalize(inf->op, inf->attrs, inf->err, sizeof inf->err))
        return -1;
    memset(inf->out, 0, sizeof inf->out);
    if (info->shape(inf))
        return -1;
    /* Attributes can ask for any size (broadcast, const): no result may
     * leave the range IR dumps are held to, so sizes never overflow later
     * and every graph prints as a dump that reads back. */
    for (int i = 0; i < info->nout && i < (int)KL_ARRAY_LEN(inf->out); i++) {
        if (!ir_type_in_range(&inf->out[i])) {
            char t[96];
            return ir_infer_error(inf, "%s: the result %s is out of range (sizes 1 to 2^40, at most 2^50 elements)",
                                  info->name, tstr(&inf->out[i], t, sizeof t));
        }
    }
    /* A rule may have added attributes; put them back in the spec's order. */
    return ir_attrs_normalize(inf->op, inf->attrs, inf->err, sizeof inf->err);
}

int ir_norm_axis(int64_t axis, int rank)
{
    if (axis < 0)
        axis += rank;
    return axis >= 0 && axis < rank ? (int)axis : -1;
}

int ir_broadcast_shapes(const ir_type *a, const ir_type *b, ir_type *out)
{
    int rank = a->rank > b->rank ? a->rank : b->rank;
    ir_type r = {a->dtype, rank, {0}};
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
        int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return -1;
        r.dim[i] = da == 1 ? db : da;
    }
    *out = r;
    return 0;
}

static const char *tstr(const ir_type *t, char *buf, size_t n)
{
    char *s = ir_type_str(t);
    snprintf(buf, n, "%s", s);
    free(s);
    return buf;
}

static int need_float(ir_infer *inf, int i)
{
    if (ir_dtype_is_float(inf->in[i].dtype))
        return 0;
    return ir_infer_error(inf, "%s needs a floating-point operand, got %s (cast it with f32(...))",
                          ir_op_name(inf->op), ir_dtype_name(inf->in[i].dtype));
}

static int need_rank(ir_infer *inf, int i, int lo, int hi, const char *what)
{
    int r = inf->in[i].rank;
    if (r >= lo && r <= hi)
        return 0;
    char b[96];
    if (lo == hi)
        return ir_infer_error(inf, "%s needs %s of rank %d, got %s", ir_op_name(inf->op), what, lo,
                              tstr(&inf->in[i], b, sizeof b));
    return ir_infer_error(inf, "%s needs %s of rank %d to %d, got %s", ir_op_name(inf->op), what,
                          lo, hi, tstr(&inf->in[i], b, sizeof b));
}

static int same_dtype(ir_infer *inf, int i, int j)
{
    if (inf->in[i].dtype == inf->in[j].dtype)
        return 0;
    return ir_infer_error(inf, "%s: dtype mismatch, %s and %s (cast one with f32(...) or similar)",
                          ir_op_name(inf->op), ir_dtype_name(inf->in[i].dtype),
                          ir_dtype_name(inf->in[j].dtype));
}

static int need_int(ir_infer *inf, int i, const char *what)
{
    ir_dtype d = inf->in[i].dtype;
    if (d == IR_I32 || d == IR_I64 || d == IR_U8)
        return 0;
    return ir_infer_error(inf, "%s needs integer %s, got %s", ir_op_name(inf->op), what,
                          ir_dtype_name(d));
}

int ir_shape_const(ir_infer *inf)
{
    ir_type *o = &inf->out[0];
    o->dtype = ir_dtype_from_name(ir_attr_str(inf->attrs, "dtype", "f32"));
    int n = ir_attr_ints(inf->attrs, "shape", o->dim, IR_MAX_RANK);
    if (n < 0 && ir_attrs_find(inf->attrs, "shape"))
        return ir_infer_error(inf, "const: shape must be a list of at most %d sizes", IR_MAX_RANK);
    o->rank = n < 0 ? 0 : n;
    for (int i = 0; i < o->rank; i++)
        if (o->dim[i] <= 0)
            return ir_infer_error(inf, "const: dimensions must be positive");
    return 0;
}

int ir_shape_arange(ir_infer *inf)
{
    ir_type *o = &inf->out[0];
    int64_t n = ir_attr_int(inf->attrs, "n", 0);
    if (n < 1 || n > (1 << 24))
        return ir_infer_error(inf, "arange: n must be between 1 and 16777216 (each index exact in f32), got %lld",
                              (long long)n);
    *o = (ir_type){ir_dtype_from_name(ir_attr_str(inf->attrs, "dtype", "i64")), 1, {n}};
    return 0;
}

/* tril/triu: any dtype, rank 2 or more (the last two axes are the matrix) */
int ir_shape_tri(ir_infer *inf)
{
    if (need_rank(inf, 0, 2, IR_MAX_RANK, "an operand"))
        return -1;
    inf->out[0] = inf->in[0];
    return 0;
}

int ir_shape_unary(ir_infer *inf)
{
    if (inf->op != IR_OP_NEG && need_float(inf, 0))
        return -1;
    inf->out[0] = inf->in[0];
    return 0;
}

/* gelu: unary, and its form is one GELU's users know by name: "none"
 * (x Phi(x), with the erf) or "tanh" (GPT-2's approximation), as
 * PyTorch's gelu(approximate=) spells them. */
int ir_shape_gelu(ir_infer *inf)
{
    const char *a = ir_attr_str(inf->attrs, "approximate", "none");
    if (strcmp(a, "none") && strcmp(a, "tanh"))
        return ir_infer_error(inf, "gelu: approximate must be \"none\" or \"tanh\", not \"%s\"", a);
    return ir_shape_unary(inf);
}

bool ir_gelu_is_tanh(const ir_attrs *a)
{
    return !strcmp(ir_attr_str(a, "approximate", "none"), "tanh");
}

int ir_shape_binary(ir_infer *inf)
{
    if (same_dtype(inf, 0, 1))
        return -1;
    if (inf->op == IR_OP_POW && need_float(inf, 0))
        return -1;
    if (ir_broadcast_shapes(&inf->in[0], &inf->in[1], &inf->out[0])) {
        char a[96], b[96];
        return ir_infer_error(inf, "%s: shapes %s and %s do not broadcast", ir_op_name(inf->op),
                              tstr(&inf->in[0], a, sizeof a), tstr(&inf->in[1], b, sizeof b));
    }
    return 0;
}

/* where(cond, a, b): a and b share a dtype, the result's; cond may be of
 * any dtype (nonzero is true, as in NumPy: a comparison gives 1 or 0 in
 * its operands' dtype, so labels compared give an integer mask). The
 * result has the shape of all three broadcast together. */
int ir_shape_where(ir_infer *inf)
{
    if (same_dtype(inf, 1, 2))
        return -1;
    ir_type ca;
    if (ir_broadcast_shapes(&inf->in[1], &inf->in[0], &ca) || ir_broadcast_shapes(&ca, &inf->in[2], &inf->out[0])) {
        char c[96], a[96], b[96];
        return ir_infer_error(inf, "where: shapes %s, %s and %s do not broadcast", tstr(&inf->in[0], c, sizeof c),
                              tstr(&inf->in[1], a, sizeof a), tstr(&inf->in[2], b, sizeof b));
    }
    return 0;
}

int ir_shape_cast(ir_infer *inf)
{
    inf->out[0] = inf->in[0];
    inf->out[0].dtype = ir_dtype_from_name(ir_attr_str(inf->attrs, "to", "f32"));
    return 0;
}

int ir_shape_matmul(ir_infer *inf)
{
    const ir_type *a = &inf->in[0], *b = &inf->in[1];
    if (need_rank(inf, 0, 2, IR_MAX_RANK, "a left operand") ||
        need_rank(inf, 1, 2, IR_MAX_RANK, "a right operand") || same_dtype(inf, 0, 1) ||
        need_float(inf, 0))
        return -1;
    bool ta = ir_attr_int(inf->attrs, "transpose_a", 0), tb = ir_attr_int(inf->attrs, "transpose_b", 0);
    int64_t m = a->dim[a->rank - (ta ? 1 : 2)], ka = a->dim[a->rank - (ta ? 2 : 1)];
    int64_t kb = b->dim[b->rank - (tb ? 1 : 2)], n = b->dim[b->rank - (tb ? 2 : 1)];
    char sa[96], sb[96];
    if (ka != kb)
        return ir_infer_error(inf, "matmul: inner dimensions differ, %s @ %s (%lld vs %lld)",
                              tstr(a, sa, sizeof sa), tstr(b, sb, sizeof sb), (long long)ka,
                              (long long)kb);
    ir_type ba = *a, bb = *b;
    ba.rank -= 2;
    bb.rank -= 2;
    ir_type batch;
    if (ir_broadcast_shapes(&ba, &bb, &batch))
        return ir_infer_error(inf, "matmul: batch dimensions of %s and %s do not broadcast",
                              tstr(a, sa, sizeof sa), tstr(b, sb, sizeof sb));
    ir_type *o = &inf->out[0];
    *o = batch;
    o->dim[o->rank++] = m;
    o->dim[o->rank++] = n;
    /* Mixed precision: low-precision operands, an fp32 result. */
    const char *out = ir_attr_str(inf->attrs, "out", NULL);
    if (out)
        o->dtype = ir_dtype_from_name(out);
    return 0;
}

int ir_shape_conv2d(ir_infer *inf)
{
    const ir_type *x = &inf->in[0], *w = &inf->in[1];
    if (need_rank(inf, 0, 4, 4, "an input [N, C, H, W]") ||
        need_rank(inf, 1, 4, 4, "a kernel [O, C/groups, KH, KW]") || same_dtype(inf, 0, 1) ||
        need_float(inf, 0))
        return -1;
    int64_t s[2], p[2], d[2], g = ir_attr_int(inf->attrs, "groups", 1);
    ir_attr_ints(inf->attrs, "stride", s, 2);
    ir_attr_ints(inf->attrs, "pad", p, 2);
    ir_attr_ints(inf->attrs, "dilation", d, 2);
    if (g < 1 || s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || p[0] < 0 || p[1] < 0)
        return ir_infer_error(inf, "conv2d: stride, dilation and groups must be positive and pad not negative");
    if (p[0] > ((int64_t)1 << 40) || p[1] > ((int64_t)1 << 40))
        return ir_infer_error(inf, "conv2d: pad must be at most 2^40");
    if (x->dim[1] % g || w->dim[0] % g)
        return ir_infer_error(inf, "conv2d: groups = %lld must divide the input channels (%lld) and the output channels (%lld)",
                              (long long)g, (long long)x->dim[1], (long long)w->dim[0]);
    if (w->dim[1] != x->dim[1] / g) {
        if (g == 1)
            return ir_infer_error(inf, "conv2d: the input has %lld channels but the kernel expects %lld",
                                  (long long)x->dim[1], (long long)w->dim[1]);
        return ir_infer_error(inf, "conv2d: the input has %lld channels per group but the kernel expects %lld",
                              (long long)(x->dim[1] / g), (long long)w->dim[1]);
    }
    if (inf->nin == 3) {
        const ir_type *bias = &inf->in[2];
        if (bias->rank != 1 || bias->dim[0] != w->dim[0] || same_dtype(inf, 0, 2))
            return ir_infer_error(inf, "conv2d: the bias must be %s[%lld]", ir_dtype_name(x->dtype),
                                  (long long)w->dim[0]);
    }
    ir_type *o = &inf->out[0];
    *o = *x;
    o->dim[1] = w->dim[0];
    for (int i = 0; i < 2; i++) {
        /* The dilated kernel spans d * (k - 1) + 1; compared by division,
         * as a huge dilation would overflow the product. */
        int64_t k = w->dim[2 + i], in = x->dim[2 + i] + 2 * p[i];
        if (k > 1 && d[i] > (in - 1) / (k - 1))
            return ir_infer_error(inf, "conv2d: the kernel (%lldx%lld) is larger than the padded input (%lldx%lld)",
                                  (long long)w->dim[2], (long long)w->dim[3],
                                  (long long)(x->dim[2] + 2 * p[0]), (long long)(x->dim[3] + 2 * p[1]));
        o->dim[2 + i] = (in - (d[i] * (k - 1) + 1)) / s[i] + 1;
    }
    return 0;
}

/* Target shape of reshape with at most one -1. */
int ir_shape_reshape(ir_infer *inf)
{
    int64_t shape[IR_MAX_RANK];
    int n = ir_attr_ints(inf->attrs, "shape", shape, IR_MAX_RANK);
    if (n < 0)
        return ir_infer_error(inf, "reshape: shape must be a list of at most %d integers", IR_MAX_RANK);
    int64_t total = ir_type_numel(&inf->in[0]), known = 1;
    int hole = -1;
    bool fits = true; /* the product of the known sizes is at most total */
    for (int i = 0; i < n; i++) {
        if (shape[i] == -1 && hole < 0)
            hole = i;
        else if (shape[i] <= 0)
            return ir_infer_error(inf, "reshape: dimensions must be positive (one may be -1)");
        else if (known > total / shape[i])
            fits = false; /* and the product could overflow */
        else
            known *= shape[i];
    }
    kl_buf want = {0};
    for (int i = 0; i < n; i++)
        kl_buf_printf(&want, "%s%lld", i ? ", " : "", (long long)shape[i]);
    char b[96];
    int rc = 0;
    if (fits && hole >= 0 && total % known == 0)
        shape[hole] = total / known;
    else if (hole >= 0)
        rc = ir_infer_error(inf, "reshape: cannot reshape %s (%lld elements) to [%s]: the other sizes do not divide %lld",
                            tstr(&inf->in[0], b, sizeof b), (long long)total, want.s, (long long)total);
    else if (!fits || known != total)
        rc = ir_infer_error(inf, "reshape: cannot reshape %s (%lld elements) to [%s]",
                            tstr(&inf->in[0], b, sizeof b), (long long)total, want.s ? want.s : "");
    kl_buf_free(&want);
    if (rc)
        return rc;
    ir_type *o = &inf->out[0];
    o->dtype = inf->in[0].dtype;
    o->rank = n;
    memcpy(o->dim, shape, sizeof(int64_t) * (size_t)n);
    ir_attrs_set_ints(inf->attrs, "shape", shape, n);
    return 0;
}

int ir_shape_flatten(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    int axis = ir_norm_axis(ir_attr_int(inf->attrs, "axis", 1), x->rank + 1);
    if (axis < 0)
        return ir_infer_error(inf, "flatten: axis out of range for rank %d", x->rank);
    int64_t a = 1, b = 1;
    for (int i = 0; i < x->rank; i++)
        *(i < axis ? &a : &b) *= x->dim[i];
    ir_attrs_set_int(inf->attrs, "axis", axis);
    inf->out[0] = (ir_type){x->dtype, 2, {a, b}};
    return 0;
}

int ir_shape_transpose(ir_infer *inf)
{
    if (need_rank(inf, 0, 2, IR_MAX_RANK, "an operand"))
        return -1;
    ir_type *o = &inf->out[0];
    *o = inf->in[0];
    int64_t t = o->dim[o->rank - 1];
    o->dim[o->rank - 1] = o->dim[o->rank - 2];
    o->dim[o->rank - 2] = t;
    return 0;
}

int ir_shape_permute(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    int64_t perm[IR_MAX_RANK];
    int n = ir_attr_ints(inf->attrs, "perm", perm, IR_MAX_RANK);
    bool seen[IR_MAX_RANK] = {0};
    if (n != x->rank)
        return ir_infer_error(inf, "permute: perm has %d entries for an operand of rank %d", n < 0 ? 0 : n, x->rank);
    ir_type *o = &inf->out[0];
    *o = *x;
    for (int i = 0; i < n; i++) {
        int a = ir_norm_axis(perm[i], x->rank);
        if (a < 0 || seen[a])
            return ir_infer_error(inf, "permute: perm must be a permutation of 0..%d", x->rank - 1);
        seen[a] = true;
        perm[i] = a;
        o->dim[i] = x->dim[a];
    }
    ir_attrs_set_ints(inf->attrs, "perm", perm, n);
    return 0;
}

int ir_shape_broadcast(ir_infer *inf)
{
    ir_type target = {inf->in[0].dtype, 0, {0}}, r;
    target.rank = ir_attr_ints(inf->attrs, "shape", target.dim, IR_MAX_RANK);
    char a[96], b[96];
    if (target.rank < 0)
        return ir_infer_error(inf, "broadcast: shape must be a list of integers");
    if (ir_broadcast_shapes(&inf->in[0], &target, &r) || !ir_type_eq(&r, &target))
        return ir_infer_error(inf, "broadcast: %s does not broadcast to %s", tstr(&inf->in[0], a, sizeof a),
                              tstr(&target, b, sizeof b));
    inf->out[0] = target;
    return 0;
}

int ir_shape_concat(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    int axis = ir_norm_axis(ir_attr_int(inf->attrs, "axis", 0), x->rank);
    if (axis < 0)
        return ir_infer_error(inf, "concat: axis out of range for rank %d", x->rank);
    ir_type o = *x;
    for (int i = 1; i < inf->nin; i++) {
        const ir_type *y = &inf->in[i];
        bool ok = y->rank == x->rank && y->dtype == x->dtype;
        for (int d = 0; ok && d < x->rank; d++)
            ok = d == axis || y->dim[d] == x->dim[d];
        char a[96], b[96];
        if (!ok)
            return ir_infer_error(inf, "concat: operand %d is %s, which does not match %s outside axis %d",
                                  i + 1, tstr(y, a, sizeof a), tstr(x, b, sizeof b), axis);
        o.dim[axis] += y->dim[axis];
    }
    ir_attrs_set_int(inf->attrs, "axis", axis);
    inf->out[0] = o;
    return 0;
}

int ir_shape_slice(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    int axis = ir_norm_axis(ir_attr_int(inf->attrs, "axis", 0), x->rank);
    if (axis < 0)
        return ir_infer_error(inf, "slice: axis out of range for rank %d", x->rank);
    int64_t d = x->dim[axis], start = ir_attr_int(inf->attrs, "start", 0);
    int64_t end = ir_attr_int(inf->attrs, "end", d), step = ir_attr_int(inf->attrs, "step", 1);
    if (step < 1)
        return ir_infer_error(inf, "slice: step must be positive");
    if (start < 0)
        start += d;
    if (end < 0)
        end += d;
    start = start < 0 ? 0 : start > d ? d : start;
    end = end < 0 ? 0 : end > d ? d : end;
    if (end <= start)
        return ir_infer_error(inf, "slice: the range [%lld, %lld) of axis %d (size %lld) is empty",
                              (long long)ir_attr_int(inf->attrs, "start", 0),
                              (long long)ir_attr_int(inf->attrs, "end", d), axis, (long long)d);
    ir_attrs_set_int(inf->attrs, "axis", axis);
    ir_attrs_set_int(inf->attrs, "start", start);
    ir_attrs_set_int(inf->attrs, "end", end);
    inf->out[0] = *x;
    inf->out[0].dim[axis] = (end - start - 1) / step + 1; /* no overflow for a huge step */
    return 0;
}

int ir_shape_embedding(ir_infer *inf)
{
    const ir_type *ids = &inf->in[0], *table = &inf->in[1];
    if (need_int(inf, 0, "indices") || need_rank(inf, 1, 2, 2, "a table [V, D]") || need_float(inf, 1))
        return -1;
    if (ids->rank + 1 > IR_MAX_RANK)
        return ir_infer_error(inf, "embedding: indices of rank %d are too many", ids->rank);
    ir_type *o = &inf->out[0];
    *o = *ids;
    o->dtype = table->dtype;
    o->dim[o->rank++] = table->dim[1];
    return 0;
}

int ir_shape_reduce(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    int64_t axes[IR_MAX_RANK];
    int n = ir_attr_ints(inf->attrs, "axis", axes, IR_MAX_RANK);
    bool keep = ir_attr_int(inf->attrs, "keepdim", 0), red[IR_MAX_RANK] = {0};
    if (inf->op != IR_OP_MAX && need_float(inf, 0))
        return -1;
    /* -1 also when the list is too long, and then axes is not filled in. */
    if (n < 0 && ir_attrs_find(inf->attrs, "axis"))
        return ir_infer_error(inf, "%s: axis must be a list of at most %d axes", ir_op_name(inf->op), IR_MAX_RANK);
    if (n < 0) {
        n = x->rank;
        for (int i = 0; i < n; i++)
            red[i] = true;
    }
    for (int i = 0; i < n && ir_attrs_find(inf->attrs, "axis"); i++) {
        int a = ir_norm_axis(axes[i], x->rank);
        if (a < 0)
            return ir_infer_error(inf, "%s: axis %lld out of range for rank %d", ir_op_name(inf->op),
                                  (long long)axes[i], x->rank);
        if (red[a])
            return ir_infer_error(inf, "%s: axis %d given twice", ir_op_name(inf->op), a);
        red[a] = true;
    }
    ir_type *o = &inf->out[0];
    o->dtype = x->dtype;
    o->rank = 0;
    n = 0;
    for (int i = 0; i < x->rank; i++) {
        if (red[i])
            axes[n++] = i;
        if (!red[i] || keep)
            o->dim[o->rank++] = red[i] ? 1 : x->dim[i];
    }
    ir_attrs_set_ints(inf->attrs, "axis", axes, n);
    return 0;
}

int ir_shape_softmax(ir_infer *inf)
{
    if (need_float(inf, 0) || need_rank(inf, 0, 1, IR_MAX_RANK, "an operand"))
        return -1;
    int axis = ir_norm_axis(ir_attr_int(inf->attrs, "axis", -1), inf->in[0].rank);
    if (axis < 0)
        return ir_infer_error(inf, "%s: axis out of range for rank %d", ir_op_name(inf->op), inf->in[0].rank);
    ir_attrs_set_int(inf->attrs, "axis", axis);
    inf->out[0] = inf->in[0];
    return 0;
}

/* logits [N, C] and labels [N] (integers). */
static int check_logits_labels(ir_infer *inf)
{
    const ir_type *l = &inf->in[0], *y = &inf->in[1];
    if (need_rank(inf, 0, 2, 2, "logits [N, C]") || need_float(inf, 0) ||
        need_rank(inf, 1, 1, 1, "labels [N]") || need_int(inf, 1, "labels"))
        return -1;
    if (l->dim[0] != y->dim[0])
        return ir_infer_error(inf, "%s: %lld rows of logits but %lld labels", ir_op_name(inf->op),
                              (long long)l->dim[0], (long long)y->dim[0]);
    return 0;
}

int ir_shape_cross_entropy(ir_infer *inf)
{
    if (check_logits_labels(inf))
        return -1;
    inf->out[0] = (ir_type){inf->in[0].dtype, 0, {0}};
    return 0;
}

int ir_shape_accuracy(ir_infer *inf)
{
    if (check_logits_labels(inf))
        return -1;
    inf->out[0] = (ir_type){IR_F32, 0, {0}};
    return 0;
}

int ir_shape_pool(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    if (need_rank(inf, 0, 4, 4, "an input [N, C, H, W]") || need_float(inf, 0))
        return -1;
    int64_t k[2], s[2], p[2];
    ir_attr_ints(inf->attrs, "size", k, 2);
    if (ir_attr_ints(inf->attrs, "stride", s, 2) < 0) {
        s[0] = k[0], s[1] = k[1];
        ir_attrs_set_ints(inf->attrs, "stride", s, 2);
    }
    ir_attr_ints(inf->attrs, "pad", p, 2);
    const char *name = ir_op_name(inf->op);
    if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || p[0] < 0 || p[1] < 0)
        return ir_infer_error(inf, "%s: size and stride must be positive and pad not negative", name);
    if (p[0] > k[0] / 2 || p[1] > k[1] / 2)
        return ir_infer_error(inf, "%s: pad must be at most half the window size", name);
    ir_type *o = &inf->out[0];
    *o = *x;
    for (int i = 0; i < 2; i++) {
        /* k - 2p: no overflow, as pad is at most half the window. */
        int64_t slack = k[i] - 2 * p[i];
        if (slack > x->dim[2 + i])
            return ir_infer_error(inf, "%s: the window (%lldx%lld) is larger than the input (%lldx%lld)",
                                  name, (long long)k[0], (long long)k[1], (long long)x->dim[2],
                                  (long long)x->dim[3]);
        o->dim[2 + i] = (x->dim[2 + i] - slack) / s[i] + 1;
    }
    return 0;
}

/* x [N, C] or [N, C, H, W]; every other operand [C]. */
static int check_norm_operands(ir_infer *inf, int64_t c, const char *what)
{
    for (int i = 1; i < inf->nin; i++) {
        const ir_type *t = &inf->in[i];
        char b[96];
        if (t->rank != 1 || t->dim[0] != c || !ir_dtype_is_float(t->dtype))
            return ir_infer_error(inf, "%s: operand %d must be a float vector [%lld] (%s), got %s",
                                  ir_op_name(inf->op), i + 1, (long long)c, what, tstr(t, b, sizeof b));
    }
    return 0;
}

/* The input and per-channel operands shared by the batch-norm family. */
static int check_batchnorm_input(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    if (need_float(inf, 0))
        return -1;
    char b[96];
    if (x->rank != 2 && x->rank != 4)
        return ir_infer_error(inf, "%s needs an input [N, C] or [N, C, H, W], got %s", ir_op_name(inf->op),
                              tstr(x, b, sizeof b));
    return check_norm_operands(inf, x->dim[1], "one value per channel");
}

int ir_shape_batchnorm(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    if (check_batchnorm_input(inf))
        return -1;
    double eps = ir_attr_float(inf->attrs, "eps", 1e-5), m = ir_attr_float(inf->attrs, "momentum", 0.1);
    if (!(eps > 0) || !(m >= 0 && m <= 1))
        return ir_infer_error(inf, "%s: eps must be positive and momentum in [0, 1]", ir_op_name(inf->op));
    inf->out[0] = *x;
    inf->out[1] = (ir_type){IR_F32, 1, {x->dim[1]}};
    inf->out[2] = inf->out[1];
    return 0;
}

int ir_shape_batchnorm_infer(ir_infer *inf)
{
    return ir_shape_batchnorm(inf);
}

int ir_shape_batchnorm_apply(ir_infer *inf)
{
    if (check_batchnorm_input(inf))
        return -1;
    inf->out[0] = inf->in[0];
    return 0;
}

int ir_shape_layernorm(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    if (need_float(inf, 0) || need_rank(inf, 0, 1, IR_MAX_RANK, "an operand"))
        return -1;
    if (check_norm_operands(inf, x->dim[x->rank - 1], "one value per feature"))
        return -1;
    if (!(ir_attr_float(inf->attrs, "eps", 1e-5) > 0))
        return ir_infer_error(inf, "layernorm: eps must be positive");
    inf->out[0] = *x;
    inf->out[1] = *x;
    inf->out[1].dtype = IR_F32;
    inf->out[1].rank--;
    inf->out[2] = inf->out[1];
    return 0;
}

int ir_shape_dropout(ir_infer *inf)
{
    if (need_float(inf, 0))
        return -1;
    double p = ir_attr_float(inf->attrs, "p", 0.5);
    if (!(p >= 0 && p < 1))
        return ir_infer_error(inf, "dropout: p must be in [0, 1), got %g", p);
    inf->out[0] = inf->in[0];
    inf->out[1] = inf->in[0];
    inf->out[1].dtype = IR_U8;
    return 0;
}

/* q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] with the same leading
 * dims and dtype. */
static int check_attention(ir_infer *inf, int q)
{
    const ir_type *tq = &inf->in[q], *tk = &inf->in[q + 1], *tv = &inf->in[q + 2];
    static const char *what[3] = {"q [..., T, d]", "k [..., T, d]", "v [..., T, d]"};
    for (int i = 0; i < 3; i++)
        if (need_float(inf, q + i) || need_rank(inf, q + i, 2, IR_MAX_RANK, what[i]) || same_dtype(inf, q, q + i))
            return -1;
    char b1[96], b2[96], b3[96];
    int r = tq->rank;
    bool lead = tk->rank == r && tv->rank == r;
    for (int i = 0; lead && i < r - 2; i++)
        lead = tk->dim[i] == tq->dim[i] && tv->dim[i] == tq->dim[i];
    if (!lead)
        return ir_infer_error(inf, "%s: q, k and v must have the same leading dims ([..., T, d]), got q %s, k %s, v %s",
                              ir_op_name(inf->op), tstr(tq, b1, sizeof b1), tstr(tk, b2, sizeof b2), tstr(tv, b3, sizeof b3));
    if (tk->dim[r - 1] != tq->dim[r - 1])
        return ir_infer_error(inf, "%s: q and k must have the same last dim d, got q %s and k %s", ir_op_name(inf->op),
                              tstr(tq, b1, sizeof b1), tstr(tk, b2, sizeof b2));
    if (tv->dim[r - 2] != tk->dim[r - 2])
        return ir_infer_error(inf, "%s: k and v must have as many keys (dim -2), got k %s and v %s", ir_op_name(inf->op),
                              tstr(tk, b2, sizeof b2), tstr(tv, b3, sizeof b3));
    return 0;
}

int ir_shape_attention(ir_infer *inf)
{
    if (check_attention(inf, 0))
        return -1;
    const ir_type *q = &inf->in[0], *v = &inf->in[2];
    double dropout = ir_attr_float(inf->attrs, "dropout", 0);
    if (dropout != 0)
        return ir_infer_error(inf, "attention: dropout = %g is not supported (only 0); apply dropout(...) to "
                              "attention's result instead", dropout);
    int64_t causal = ir_attr_int(inf->attrs, "causal", 1);
    if (causal != 0 && causal != 1)
        return ir_infer_error(inf, "attention: causal must be true or false, got %lld", (long long)causal);
    if (!ir_attrs_find(inf->attrs, "scale"))
        ir_attrs_set_float(inf->attrs, "scale", 1 / sqrt((double)q->dim[q->rank - 1]));
    double scale = ir_attr_float(inf->attrs, "scale", 1);
    if (!isfinite(scale))
        return ir_infer_error(inf, "attention: scale must be finite, got %g", scale);
    /* The output rows accumulate: f32 for f32 and bf16 operands (f64
     * for f64), like lse. */
    inf->out[0] = *q;
    inf->out[0].dim[q->rank - 1] = v->dim[v->rank - 1];
    inf->out[0].dtype = q->dtype == IR_F64 ? IR_F64 : IR_F32;
    inf->out[1] = *q;
    inf->out[1].rank--;
    inf->out[1].dtype = inf->out[0].dtype;
    return 0;
}

/* ---- backward and update ops ---- */

/* dy and a forward value of the same shape -> dx like dy. */
int ir_shape_grad_elem(ir_infer *inf)
{
    const ir_type *dy = &inf->in[0], *z = &inf->in[1];
    char a[96], b[96];
    if (dy->rank != z->rank || memcmp(dy->dim, z->dim, sizeof(int64_t) * (size_t)dy->rank))
        return ir_infer_error(inf, "%s: %s and %s differ in shape", ir_op_name(inf->op),
                              tstr(dy, a, sizeof a), tstr(z, b, sizeof b));
    if (need_float(inf, 0))
        return -1;
    if (inf->op == IR_OP_SOFTMAX_GRAD || inf->op == IR_OP_LOG_SOFTMAX_GRAD) {
        int axis = ir_norm_axis(ir_attr_int(inf->attrs, "axis", -1), dy->rank);
        if (axis < 0)
            return ir_infer_error(inf, "%s: axis out of range", ir_op_name(inf->op));
        ir_attrs_set_int(inf->attrs, "axis", axis);
    }
    inf->out[0] = *dy;
    return 0;
}

/* Sums x down to a shape it broadcasts from. */
int ir_shape_sum_to(ir_infer *inf)
{
    ir_type target = {inf->in[0].dtype, 0, {0}}, r;
    target.rank = ir_attr_ints(inf->attrs, "shape", target.dim, IR_MAX_RANK);
    char a[96], b[96];
    if (target.rank < 0 || ir_broadcast_shapes(&target, &inf->in[0], &r) || !ir_type_eq(&r, &inf->in[0]))
        return ir_infer_error(inf, "sum_to: %s does not broadcast to %s", tstr(&target, a, sizeof a),
                              tstr(&inf->in[0], b, sizeof b));
    inf->out[0] = target;
    return 0;
}

/* dloss [], logits [N, C], labels [N] -> dlogits. */
int ir_shape_cross_entropy_grad(ir_infer *inf)
{
    if (inf->in[0].rank != 0)
        return ir_infer_error(inf, "cross_entropy_grad: the loss gradient must be a scalar");
    ir_infer sub = *inf;
    sub.in = inf->in + 1;
    sub.nin = 2;
    if (check_logits_labels(&sub)) {
        memcpy(inf->err, sub.err, sizeof inf->err);
        return -1;
    }
    bool ignores = ir_attrs_find(inf->attrs, "ignore_index") != NULL;
    if (ignores != (inf->nin == 4))
        return ir_infer_error(inf, "cross_entropy_grad: the count of rows operand comes with ignore_index, and only with it");
    if (inf->nin == 4 && (inf->in[3].rank != 0 || !ir_dtype_is_float(inf->in[3].dtype)))
        return ir_infer_error(inf, "cross_entropy_grad: the count of rows must be a float scalar");
    inf->out[0] = inf->in[1];
    return 0;
}

/* conv2d_grad_input(dy, w) -> dx of the given shape;
 * conv2d_grad_weight(dy, x) -> dw of the given shape. The forward conv of
 * the result with the other operand must give dy's shape. */
int ir_shape_conv2d_grad(ir_infer *inf)
{
    ir_type res = {inf->in[0].dtype, 0, {0}};
    res.rank = ir_attr_ints(inf->attrs, "shape", res.dim, IR_MAX_RANK);
    if (res.rank != 4)
        return ir_infer_error(inf, "%s: shape must have 4 dimensions", ir_op_name(inf->op));
    bool input = inf->op == IR_OP_CONV2D_GRAD_INPUT;
    ir_type fwd_in[2] = {input ? res : inf->in[1], input ? inf->in[1] : res};
    ir_attrs a;
    ir_attrs_copy(&a, inf->attrs);
    ir_attrs_remove(&a, "shape");
    ir_attrs_remove(&a, "out");
    ir_infer fwd = {.op = IR_OP_CONV2D, .nin = 2, .in = fwd_in, .attrs = &a};
    int rc = ir_infer_run(&fwd);
    ir_attrs_free(&a);
    char x[96], y[96];
    if (rc || !ir_type_eq(&fwd.out[0], &inf->in[0]))
        return ir_infer_error(inf, "%s: %s is not the gradient of a conv2d giving %s", ir_op_name(inf->op),
                              tstr(&res, x, sizeof x), tstr(&inf->in[0], y, sizeof y));
    inf->out[0] = res;
    const char *out = ir_attr_str(inf->attrs, "out", NULL);
    if (out)
        inf->out[0].dtype = ir_dtype_from_name(out);
    return 0;
}

int ir_shape_maxpool_grad(ir_infer *inf)
{
    ir_attrs a;
    ir_attrs_copy(&a, inf->attrs);
    ir_infer fwd = {.op = IR_OP_MAXPOOL, .nin = 1, .in = &inf->in[1], .attrs = &a};
    int rc = ir_infer_run(&fwd);
    ir_attrs_free(&a);
    if (rc || !ir_type_eq(&fwd.out[0], &inf->in[0]) || !ir_type_eq(&inf->in[0], &inf->in[2]))
        return ir_infer_error(inf, "maxpool_grad: operands do not match a maxpool");
    inf->out[0] = inf->in[1];
    return 0;
}

int ir_shape_avgpool_grad(ir_infer *inf)
{
    ir_type res = {inf->in[0].dtype, 0, {0}};
    res.rank = ir_attr_ints(inf->attrs, "shape", res.dim, IR_MAX_RANK);
    ir_attrs a;
    ir_attrs_copy(&a, inf->attrs);
    ir_attrs_remove(&a, "shape");
    ir_infer fwd = {.op = IR_OP_AVGPOOL, .nin = 1, .in = &res, .attrs = &a};
    int rc = res.rank == 4 ? ir_infer_run(&fwd) : -1;
    ir_attrs_free(&a);
    if (rc || !ir_type_eq(&fwd.out[0], &inf->in[0]))
        return ir_infer_error(inf, "avgpool_grad: shape does not match the pooled gradient");
    inf->out[0] = res;
    return 0;
}

/* (dy, x, gamma, mean, invstd) -> dx, dgamma, dbeta. */
int ir_shape_norm_grad(ir_infer *inf)
{
    const ir_type *dy = &inf->in[0], *x = &inf->in[1];
    bool bn = inf->op == IR_OP_BATCHNORM_GRAD;
    if (!ir_type_eq(dy, x) || need_float(inf, 0))
        return ir_infer_error(inf, "%s: dy and x differ", ir_op_name(inf->op));
    if (bn && x->rank != 2 && x->rank != 4)
        return ir_infer_error(inf, "batchnorm_grad: x must have rank 2 or 4");
    int64_t c = bn ? x->dim[1] : x->dim[x->rank - 1];
    int64_t stats = bn ? c : ir_type_numel(x) / c;
    if (inf->in[2].rank != 1 || inf->in[2].dim[0] != c || ir_type_numel(&inf->in[3]) != stats ||
        ir_type_numel(&inf->in[4]) != stats)
        return ir_infer_error(inf, "%s: gamma or statistics do not match x", ir_op_name(inf->op));
    inf->out[0] = *dy;
    inf->out[1] = inf->in[2];
    inf->out[2] = inf->in[2];
    return 0;
}

int ir_shape_embedding_grad(ir_infer *inf)
{
    const ir_type *dy = &inf->in[0], *ids = &inf->in[1];
    int64_t rows = ir_attr_int(inf->attrs, "rows", 0);
    if (need_int(inf, 1, "indices") || dy->rank != ids->rank + 1 || rows < 1)
        return ir_infer_error(inf, "embedding_grad: operands do not match an embedding");
    inf->out[0] = (ir_type){dy->dtype, 2, {rows, dy->dim[dy->rank - 1]}};
    return 0;
}

int ir_shape_slice_grad(ir_infer *inf)
{
    const ir_type *dy = &inf->in[0];
    int axis = ir_norm_axis(ir_attr_int(inf->attrs, "axis", 0), dy->rank);
    int64_t start = ir_attr_int(inf->attrs, "start", 0), step = ir_attr_int(inf->attrs, "step", 1);
    int64_t size = ir_attr_int(inf->attrs, "size", 0);
    if (axis < 0 || step < 1 || start < 0 || start + (dy->dim[axis] - 1) * step >= size)
        return ir_infer_error(inf, "slice_grad: the slice does not fit in size %lld", (long long)size);
    inf->out[0] = *dy;
    inf->out[0].dim[axis] = size;
    return 0;
}

/* (w, g, hyper f32[4], scale f32[], state..., [copy]): every state has
 * w's shape; state is fp32 (f64 for f64 weights), the low-precision copy
 * is bf16 or f16. */
int ir_shape_update(ir_infer *inf)
{
    const ir_type *w = &inf->in[0];
    if (!ir_dtype_is_float(w->dtype))
        return ir_infer_error(inf, "%s: the weight must be float", ir_op_name(inf->op));
    for (int i = 1; i < inf->nin; i++) {
        if (i == 2 || i == 3)
            continue;
        const ir_type *t = &inf->in[i];
        if (t->rank != w->rank || memcmp(t->dim, w->dim, sizeof(int64_t) * (size_t)w->rank) || !ir_dtype_is_float(t->dtype))
            return ir_infer_error(inf, "%s: operand %d's shape differs from the weight's", ir_op_name(inf->op), i + 1);
    }
    if (inf->in[2].rank != 1 || inf->in[2].dim[0] != 4 || inf->in[2].dtype != IR_F32 ||
        inf->in[3].rank != 0 || inf->in[3].dtype != IR_F32)
        return ir_infer_error(inf, "%s: hyper must be f32[4] and scale f32[]", ir_op_name(inf->op));
    return 0;
}

/* (acc, g): the accumulator is fp32 (f64 for f64) and has g's shape. */
int ir_shape_grad_accumulate(ir_infer *inf)
{
    const ir_type *a = &inf->in[0], *g = &inf->in[1];
    if (a->rank != g->rank || memcmp(a->dim, g->dim, sizeof(int64_t) * (size_t)a->rank) ||
        (a->dtype != IR_F32 && a->dtype != IR_F64) || !ir_dtype_is_float(g->dtype))
        return ir_infer_error(inf, "grad_accumulate: the accumulator must be an fp32 tensor of the gradient's shape");
    if (ir_attr_int(inf->attrs, "steps", 0) < 1)
        return ir_infer_error(inf, "grad_accumulate: steps must be positive");
    return 0;
}

/* Collectives (ops.def): f32, f64, bf16 or f16 data; ranks >= 1;
 * reduce_scatter's result is one rank's share of the padded, flattened
 * operand, all_gather's every rank's operand flattened. */
int ir_shape_collective(ir_infer *inf)
{
    const ir_type *x = &inf->in[0];
    const char *name = ir_op_name(inf->op);
    if (x->dtype != IR_F32 && x->dtype != IR_F64 && x->dtype != IR_BF16 && x->dtype != IR_F16)
        return ir_infer_error(inf, "%s: collectives carry f32, f64, bf16 or f16 data, not %s", name,
                              ir_dtype_name(x->dtype));
    int64_t ranks = ir_attr_int(inf->attrs, "ranks", 0);
    if (ranks < 1 || ranks > 1 << 20)
        return ir_infer_error(inf, "%s: ranks must be between 1 and %d", name, 1 << 20);
    ir_type *o = &inf->out[0];
    *o = *x;
    int64_t n = ir_type_numel(x);
    switch (inf->op) {
    case IR_OP_ALL_REDUCE: {
        const char *r = ir_attr_str(inf->attrs, "reduce", "sum");
        if (strcmp(r, "sum") && strcmp(r, "max"))
            return ir_infer_error(inf, "all_reduce: reduce must be sum or max, not %s", r);
        return 0;
    }
    case IR_OP_RANK_BROADCAST: {
        int64_t root = ir_attr_int(inf->attrs, "root", 0);
        if (root < 0 || root >= ranks)
            return ir_infer_error(inf, "rank_broadcast: root %lld is not a rank of %lld", (long long)root, (long long)ranks);
        return 0;
    }
    case IR_OP_REDUCE_SCATTER:
        o->rank = 1;
        o->dim[0] = (n + ranks - 1) / ranks;
        return 0;
    case IR_OP_ALL_GATHER:
        o->rank = 1;
        o->dim[0] = n * ranks;
        return 0;
    default:
        kl_panic("ir_shape_collective: %s is not a collective", name);
    }
}

/* (s, x1..xk): s is f32[ceil(sum numel(x_i) / ranks)], the x_i float
 * (shard_copy, shard_gather in ops.def). */
int ir_shape_shard(ir_infer *inf)
{
    const char *name = ir_op_name(inf->op);
    int64_t ranks = ir_attr_int(inf->attrs, "ranks", 0);
    if (ranks < 1 || ranks > 1 << 20)
        return ir_infer_error(inf, "%s: ranks must be between 1 and %d", name, 1 << 20);
    /* copies (shard_gather): x1..xk then c1..ck, each c_i as many
     * elements as x_i. */
    bool copies = ir_attr_int(inf->attrs, "copies", 0) != 0;
    int k = copies ? (inf->nin - 1) / 2 : inf->nin - 1;
    if (copies && (inf->nin - 1) % 2)
        return ir_infer_error(inf, "%s: copies = 1 needs as many copies as values", name);
    int64_t n = 0;
    for (int i = 1; i < inf->nin; i++) {
        if (!ir_dtype_is_float(inf->in[i].dtype) || inf->in[i].dtype == IR_F64)
            return ir_infer_error(inf, "%s: operand %d must be f32, bf16 or f16", name, i + 1);
        if (i > k && ir_type_numel(&inf->in[i]) != ir_type_numel(&inf->in[i - k]))
            return ir_infer_error(inf, "%s: copy %d does not have the elements of value %d", name, i - k, i - k);
        if (i <= k)
            n += ir_type_numel(&inf->in[i]);
    }
    const ir_type *s = &inf->in[0];
    if (s->dtype != IR_F32 || s->rank != 1 || s->dim[0] != (n + ranks - 1) / ranks)
        return ir_infer_error(inf, "%s: the shard must be f32[%lld] (%lld elements over %lld ranks)", name,
                              (long long)((n + ranks - 1) / ranks), (long long)n, (long long)ranks);
    return 0;
}

/* (dout, q, k, v, out, lse) -> dq (attention_grad_q) or dk, dv
 * (attention_grad_kv), each the shape of its forward operand; dout has
 * q's dtype or attention's result dtype (f32; f64 for f64), out, lse and
 * the gradients the result dtype. */
int ir_shape_attention_grad(ir_infer *inf)
{
    if (check_attention(inf, 1))
        return -1;
    const ir_type *q = &inf->in[1];
    ir_dtype acc = q->dtype == IR_F64 ? IR_F64 : IR_F32;
    ir_type dout = *q, o, lse = *q;
    dout.dim[q->rank - 1] = inf->in[3].dim[q->rank - 1];
    o = dout;
    o.dtype = acc;
    lse.rank--;
    lse.dtype = acc;
    if ((!ir_type_eq(&inf->in[0], &dout) && !ir_type_eq(&inf->in[0], &o)) || !ir_type_eq(&inf->in[4], &o) ||
        !ir_type_eq(&inf->in[5], &lse))
        return ir_infer_error(inf, "%s: dout, out or lse do not match q, k, v", ir_op_name(inf->op));
    if (inf->op == IR_OP_ATTENTION_GRAD_Q) {
        inf->out[0] = *q;
    } else {
        inf->out[0] = inf->in[2];
        inf->out[1] = inf->in[3];
    }
    for (int i = 0; i < (inf->op == IR_OP_ATTENTION_GRAD_Q ? 1 : 2); i++)
        inf->out[i].dtype = acc;
    return 0;
}
