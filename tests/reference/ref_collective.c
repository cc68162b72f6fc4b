/* The collectives (ops.def) in the reference, which is one process: as
 * if every one of the op's ranks held the same operand (so all_reduce sum
 * is ranks x x, max is x; reduce_scatter is rank 0's share of ranks x x,
 * zero-padded; all_gather is ranks copies of x; rank_broadcast is x). */
#include "ref_ops.h"

static int64_t ranks_of(const ir_node *n) { return attr_i(n, "ranks", 1); }

void ref_ALL_REDUCE(ref_eval *r, const ir_node *n)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    double k = strcmp(ir_attr_str(&n->attrs, "reduce", "sum"), "max") ? (double)ranks_of(n) : 1.0;
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = ref_round(TOUT(r, n, 0)->dtype, k * x[i]);
}

void ref_REDUCE_SCATTER(ref_eval *r, const ir_node *n)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t have = numel(TIN(r, n, 0));
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = i < have ? ref_round(TOUT(r, n, 0)->dtype, (double)ranks_of(n) * x[i]) : 0;
}

void ref_ALL_GATHER(ref_eval *r, const ir_node *n)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t have = numel(TIN(r, n, 0));
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = x[i % have];
}

void ref_RANK_BROADCAST(ref_eval *r, const ir_node *n)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = x[i];
}
