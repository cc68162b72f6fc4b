/* Reference functions of the data movement ops and their gradients. */
#include "ref_ops.h"

/* ---- data movement ---- */

/* Row-major data unchanged. */
static void same_data(ref_eval *r, const ir_node *n)
{
    memcpy(OUT(r, n, 0), IN(r, n, 0), sizeof(double) * (size_t)numel(TOUT(r, n, 0)));
}

void ref_RESHAPE(ref_eval *r, const ir_node *n) { same_data(r, n); }
void ref_FLATTEN(ref_eval *r, const ir_node *n) { same_data(r, n); }

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

void ref_TRANSPOSE(ref_eval *r, const ir_node *n)
{
    int rank = TIN(r, n, 0)->rank;
    int64_t perm[IR_MAX_RANK];
    for (int d = 0; d < rank; d++)
        perm[d] = d;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    permute(r, n, perm);
}

void ref_PERMUTE(ref_eval *r, const ir_node *n)
{
    int64_t perm[IR_MAX_RANK];
    ir_attr_ints(&n->attrs, "perm", perm, IR_MAX_RANK);
    permute(r, n, perm);
}

void ref_BROADCAST(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0), *ty = TOUT(r, n, 0);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(ty); i < m; i++) {
        unravel(ty, i, idx);
        y[i] = x[bcast_at(tx, ty, idx)];
    }
}

void ref_CONCAT(ref_eval *r, const ir_node *n)
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
void ref_SLICE(ref_eval *r, const ir_node *n)
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
void ref_EMBEDDING(ref_eval *r, const ir_node *n)
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

/* embedding_grad(dy, ids): row ids[i] of the table gets dy[i] summed */
void ref_EMBEDDING_GRAD(ref_eval *r, const ir_node *n)
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
void ref_SLICE_GRAD(ref_eval *r, const ir_node *n)
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
