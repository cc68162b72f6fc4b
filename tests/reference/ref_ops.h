/* What the reference's op functions share (private to tests/reference):
 * reading operands, making results, index arithmetic, and one
 * declaration per op of ir/ops.def, made from the op row, so an op added
 * to the table without its ref_<ID> function fails to link, and one
 * missing from ref_eval.c's table fails to compile.
 *
 * Every op function reads its operands with IN, makes its results with
 * OUT (zero-filled) and computes them from the op's definition with
 * plain loops over indices: no tiling, no fusion, nothing shared with
 * codegen/. */
#ifndef KILN_REF_OPS_H
#define KILN_REF_OPS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_eval.h"

#define OP(id, ...) void ref_##id(ref_eval *r, const ir_node *n);
#include "ir/ops.def"
#undef OP

typedef double (*ref_fn1)(double);
typedef double (*ref_fn2)(double, double);

static inline const ir_type *T(const ref_eval *r, int v) { return &ir_val(r->g, v)->type; }
static inline int64_t numel(const ir_type *t) { return ir_type_numel(t); }
static inline const ir_type *TIN(const ref_eval *r, const ir_node *n, int i) { return T(r, n->in.v[i]); }
static inline const ir_type *TOUT(const ref_eval *r, const ir_node *n, int k) { return T(r, n->out.v[k]); }

static inline double *IN(const ref_eval *r, const ir_node *n, int i)
{
    double *x = r->v[n->in.v[i]];
    if (!x)
        kl_panic("reference: %s reads %%%s, which has no value", ir_op_name(n->op), ir_val(r->g, n->in.v[i])->name);
    return x;
}

static inline double *OUT(ref_eval *r, const ir_node *n, int k)
{
    int v = n->out.v[k];
    free(r->v[v]);
    r->v[v] = kl_xcalloc((size_t)numel(T(r, v)) + 1, sizeof(double));
    return r->v[v];
}

static inline void unravel(const ir_type *t, int64_t flat, int64_t *idx)
{
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = flat % t->dim[d];
        flat /= t->dim[d];
    }
}

static inline int64_t ravel(const ir_type *t, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < t->rank; d++)
        f = f * t->dim[d] + idx[d];
    return f;
}

/* The flat index in `from` of the element that NumPy broadcasting puts at
 * index idx of `to` (shapes aligned at the right, size-1 dims repeat). */
static inline int64_t bcast_at(const ir_type *from, const ir_type *to, const int64_t *idx)
{
    int64_t f = 0;
    int lead = to->rank - from->rank;
    for (int d = 0; d < from->rank; d++)
        f = f * from->dim[d] + (from->dim[d] == 1 ? 0 : idx[lead + d]);
    return f;
}

static inline double attr_f(const ir_node *n, const char *key, double dflt) { return ir_attr_float(&n->attrs, key, dflt); }
static inline int64_t attr_i(const ir_node *n, const char *key, int64_t dflt) { return ir_attr_int(&n->attrs, key, dflt); }

static inline void attr_pair(const ir_node *n, const char *key, int64_t *p)
{
    if (ir_attr_ints(&n->attrs, key, p, 2) != 2)
        kl_panic("reference: %s has no %s pair", ir_op_name(n->op), key);
}

#endif
