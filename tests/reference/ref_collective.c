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

void ref_TP_COPY(ref_eval *r, const ir_node *n)
{
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
        y[i] = x[i];
}

/* shard_copy: rank 0's slice of x1..xk flattened, padded with zeros;
 * shard_gather: as if every rank held this s, x1..xk get ranks copies
 * of s one after the other (with copies = 1, the copies c1..ck after
 * x1..xk get the same values again). */
void ref_SHARD_COPY(ref_eval *r, const ir_node *n)
{
    double *s = IN(r, n, 0);
    int64_t m = numel(TIN(r, n, 0)), at = 0;
    for (int64_t j = 0; j < m; j++)
        s[j] = 0;
    for (int i = 1; i < n->in.n && at < m; i++) {
        double *x = IN(r, n, i);
        for (int64_t j = 0, k = numel(TIN(r, n, i)); j < k && at < m; j++)
            s[at++] = x[j];
    }
}

void ref_SHARD_GATHER(ref_eval *r, const ir_node *n)
{
    double *s = IN(r, n, 0);
    int64_t m = numel(TIN(r, n, 0)), at = 0;
    int half = ir_attr_int(&n->attrs, "copies", 0) ? (n->in.n - 1) / 2 : n->in.n - 1;
    for (int i = 1; i < n->in.n; i++) {
        double *x = IN(r, n, i);
        if (i == half + 1)
            at = 0;
        for (int64_t j = 0, k = numel(TIN(r, n, i)); j < k; j++, at++)
            x[j] = ref_round(TIN(r, n, i)->dtype, s[at % m]);
    }
}
