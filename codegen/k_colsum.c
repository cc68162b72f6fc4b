/* A GEMM's epilogue with the bias gradients of its result: the elementwise
 * part of the group (GELU's or ReLU's gradient after the GEMM that makes
 * dy) as one nest over the result, then each column sum (sum_to over
 * every dim but the last: a bias gradient) of a value that nest stored.
 *
 * The column sums walk the value row by row, W adjacent columns at a time
 * (W up to 16: one 64-byte line of f32 per row), so each line is read
 * once; the unfused sum_to walks one column at a time down the rows, a
 * stride of a whole row per element (11-17 ms for GPT's [2048, 512] MLP
 * bias gradient, README "Transformer fusions"). Each column is summed in
 * row order by one lane: deterministic on every thread count. The nests are separate loops of one kernel: the
 * sums start after every element is stored (an OpenMP barrier; a launch
 * of its own on the GPU). */
#include <stdlib.h>

#include "cg.h"

#define K (b->k)

/* The sums of v's columns into out, v read from its buffer: per block of
 * W columns (W up to 16, dividing the width), W independent lanes each
 * summing its column down the rows in order. The C printer vectorises
 * the lanes (one W-float load per row), CUDA runs one thread per column
 * with adjacent threads on adjacent columns. */
static void column_sums(cg_builder *b, int v, int out)
{
    const ir_type *t = &ir_val(b->grp->g, v)->type;
    int64_t cols = t->dim[t->rank - 1], rows = ir_type_numel(t) / cols;
    int w = 16;
    while (cols % w)
        w /= 2;
    int src = cg_buf(b, v), dst = cg_buf(b, out);
    int cb = kir_loop_begin(K, KL_PAR, cols / w, "cb");
    int j = kir_loop_begin(K, KL_BPAR, w, "j");
    kir_loop_lanes(K);
    int col = kir_let(K, kir_iadd(K, kir_imul(K, kir_varref(K, cb), w), kir_varref(K, j)), "col");
    int acc = kir_let(K, kir_const_f(K, 0), "cs");
    int r = kir_loop_begin(K, KL_SEQ, rows, "r");
    kir_expr *at = kir_iadd(K, kir_imul(K, kir_varref(K, r), cols), kir_varref(K, col));
    kir_set(K, acc, kir_bin(K, KB_ADD, kir_varref(K, acc), kir_load(K, src, at)));
    kir_loop_end(K);
    kir_store(K, dst, kir_varref(K, col), kir_varref(K, acc));
    kir_loop_end(K);
    kir_loop_end(K);
}

bool cg_epilogue_sums(const cg_group *grp)
{
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(grp->g, grp->nodes[i]);
        if (ir_is_column_sum(grp->g, n) && cg_computed_inside(grp, n->in.v[0]) && cg_value_escapes(grp, n->in.v[0]))
            return true;
    }
    return false;
}

void cg_build_epilogue_sums(cg_builder *b)
{
    const cg_group *grp = b->grp;
    const ir_graph *g = grp->g;
    /* The elementwise part, as a group of its own: a value a column sum
     * reads escapes it, so the nest stores it. */
    int *elem = kl_xmalloc(sizeof(int) * (size_t)(grp->n + 1)), ne = 0;
    for (int i = 0; i < grp->n; i++)
        if (!ir_is_column_sum(g, ir_nd(g, grp->nodes[i])))
            elem[ne++] = grp->nodes[i];
    cg_group part = {g, elem, ne};
    if (ne) {
        b->grp = &part;
        cg_build_elementwise(b);
        b->grp = grp;
        cg_reset_cache(b);
    }
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        if (ir_is_column_sum(g, n))
            column_sums(b, n->in.v[0], n->out.v[0]);
    }
    free(elem);
}
