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
#include <string.h>

#include "cg.h"

#define K (b->k)

/* The lane width for summing cols columns: up to 16 (one 64-byte line of
 * f32 per row), a power of two dividing cols. */
int cg_lane_width(int64_t cols)
{
    int w = 16;
    while (cols % w)
        w /= 2;
    return w;
}

/* The skeleton of every column sum: per block of W columns (W up to 16,
 * dividing the width), W independent lanes each summing its column down
 * the rows in order, then storing sum / divisor into each dst. element(b,
 * r, col, arg, out) sets out[0 .. nsum - 1] to the terms at row r,
 * column col (loop variables; it may emit LETs). The C printer
 * vectorises the lanes (one W-float load per row), CUDA runs one thread
 * per column with adjacent threads on adjacent columns. */
void cg_column_lanes(cg_builder *b, int64_t rows, int64_t cols, int nsum, const int *dst, double divisor,
                     cg_lane_terms element, void *arg)
{
    enum { MAXSUM = 4 };
    kl_check(nsum >= 1 && nsum <= MAXSUM);
    int w = cg_lane_width(cols);
    int cb = kir_loop_begin(K, KL_PAR, cols / w, "cb");
    int j = kir_loop_begin(K, KL_BPAR, w, "j");
    kir_loop_lanes(K);
    int col = kir_let(K, kir_iadd(K, kir_imul(K, kir_varref(K, cb), w), kir_varref(K, j)), "col");
    int acc[MAXSUM];
    for (int i = 0; i < nsum; i++)
        acc[i] = kir_let(K, kir_const_f(K, 0), "cs");
    int r = kir_loop_begin(K, KL_SEQ, rows, "r");
    kir_expr *term[MAXSUM];
    element(b, r, col, arg, term);
    for (int i = 0; i < nsum; i++)
        kir_set(K, acc[i], kir_bin(K, KB_ADD, kir_varref(K, acc[i]), term[i]));
    kir_loop_end(K);
    for (int i = 0; i < nsum; i++) {
        kir_expr *sum = kir_varref(K, acc[i]);
        if (divisor != 1)
            sum = kir_bin(K, KB_DIV, sum, kir_const_f(K, divisor));
        kir_store(K, dst[i], kir_varref(K, col), sum);
    }
    kir_loop_end(K);
    kir_loop_end(K);
}

typedef struct stored {
    int src;
    int64_t cols;
} stored;

static void stored_element(cg_builder *b, int r, int col, void *arg, kir_expr **out)
{
    const stored *s = arg;
    out[0] = kir_load(K, s->src, kir_iadd(K, kir_imul(K, kir_varref(K, r), s->cols), kir_varref(K, col)));
}

/* The sums of v's columns into out, v read from its buffer. */
static void column_sums(cg_builder *b, int v, int out)
{
    const ir_type *t = &ir_val(b->grp->g, v)->type;
    int64_t cols = t->dim[t->rank - 1], rows = ir_type_numel(t) / cols;
    stored s = {cg_buf(b, v), cols};
    int dst = cg_buf(b, out);
    cg_column_lanes(b, rows, cols, 1, &dst, 1, stored_element, &s);
}

/* The element of x at the nest position (row r, column col of a nest
 * collapsed to [REDUCED, KEPT]): elementwise producers fused into the
 * group are computed in place of the load. */
static void nest_element(cg_builder *b, int r, int col, void *arg, kir_expr **out)
{
    b->nest->var[0] = r;
    b->nest->var[1] = col;
    cg_reset_cache(b);
    out[0] = cg_value_at(b, *(int *)arg);
}

bool cg_column_lanes_fit(const cg_nest *nest)
{
    return nest->rank == 2 && nest->cls[0] == CG_REDUCED && nest->cls[1] == CG_KEPT && cg_lane_width(nest->dim[1]) >= 4;
}

void cg_build_column_lanes(cg_builder *b, int x, int y, double divisor)
{
    const cg_nest *nest = b->nest;
    int dst = cg_buf(b, y);
    cg_column_lanes(b, nest->dim[0], nest->dim[1], 1, &dst, divisor, nest_element, &x);
}

/* The stored value column sum n of the group reads: its operand when the
 * group stores it, else the 16-bit value the operand widens (fusion.c's
 * column_sum_of_stored: fp16's and bf16's bias gradients), loaded and
 * widened; -1 when neither is stored. */
static int summed_value(const cg_group *grp, const ir_node *n)
{
    int v = n->in.v[0];
    if (!cg_computed_inside(grp, v))
        return -1;
    if (cg_value_escapes(grp, v))
        return v;
    int w = ir_widened_from(grp->g, v);
    return w >= 0 && cg_computed_inside(grp, w) && cg_value_escapes(grp, w) ? w : -1;
}

/* Node n is a widening only column sums of the group read (they read its
 * operand instead): the elementwise part leaves it out. */
static bool widening_for_sums(const cg_group *grp, const ir_node *n)
{
    int v = n->out.v[0];
    if (n->op != IR_OP_CAST || ir_widened_from(grp->g, v) < 0 || cg_value_escapes(grp, v))
        return false;
    const ir_value *val = ir_val(grp->g, v);
    for (int u = 0; u < val->uses.n; u++)
        if (!ir_is_column_sum(grp->g, ir_nd(grp->g, val->uses.v[u].node)))
            return false;
    return true;
}

bool cg_epilogue_sums(const cg_group *grp)
{
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(grp->g, grp->nodes[i]);
        if (ir_is_column_sum(grp->g, n) && summed_value(grp, n) >= 0)
            return true;
    }
    return false;
}

/* The host body's arguments: the part's values to store and the buffers
 * the column sums read, in order. */
typedef struct one_pass {
    const int *sums; /* values summed, one per column sum */
    int nsum;
    int64_t cols;
} one_pass;

/* Whether value v of the part is relu's gradient of an f16 dy the part
 * loads: at each element dy or 0, one of its f16 loads, which the C
 * printer rounds to f16 with nothing to convert (codegen/print_expr.c
 * exact16). */
static bool f16_select_of_load(const cg_group *part, int v)
{
    const ir_value *val = ir_val(part->g, v);
    if (val->type.dtype != IR_F16 || !cg_computed_inside(part, v))
        return false;
    const ir_node *n = ir_nd(part->g, val->def);
    return n->op == IR_OP_RELU_GRAD && ir_val(part->g, n->in.v[0])->type.dtype == IR_F16 &&
           !cg_computed_inside(part, n->in.v[0]);
}

/* At (row r, column col): every value of the elementwise part that
 * escapes it, stored as the body's nest stores it; then the terms, read
 * back from the buffers just written (so a low-precision buffer's
 * rounding is in the sum, as in the body). Relu's gradient of an f16 dy
 * is summed as the value just stored, rounded to f16 (the bits the
 * read-back widens, without reading the buffer back): the C printer
 * sums dy or 0 from dy's staged F16C row, where the read-back was a
 * software widening an element. Other f16 values keep the read-back: a
 * computed value (GELU's gradient) would be rounded twice, in the store
 * and in the sum. */
static void one_pass_element(cg_builder *b, int r, int col, void *arg, kir_expr **out)
{
    const one_pass *o = arg;
    const cg_group *part = b->grp;
    b->nest->var[0] = r;
    b->nest->var[1] = col;
    cg_reset_cache(b);
    for (int i = 0; i < part->n; i++) {
        const ir_node *n = ir_nd(part->g, part->nodes[i]);
        for (int k = 0; k < n->out.n; k++)
            if (cg_value_escapes(part, n->out.v[k]))
                cg_store_at(b, n->out.v[k], cg_value_at(b, n->out.v[k]));
    }
    for (int i = 0; i < o->nsum; i++) {
        if (f16_select_of_load(part, o->sums[i])) {
            out[i] = kir_un(K, KU_ROUND_F16, cg_value_at(b, o->sums[i]));
            continue;
        }
        out[i] = kir_load(K, cg_buf(b, o->sums[i]),
                          kir_iadd(K, kir_imul(K, kir_varref(K, r), o->cols), kir_varref(K, col)));
    }
}

/* The body's form: the elementwise part's nest (every element, stored
 * where it escapes the part), then each column sum reading back what the
 * nest stored, 16-column lanes down the rows. */
static void two_passes(cg_builder *b, const cg_group *part, const int *sums, const int *outs, int nsum)
{
    const cg_group *whole = b->grp;
    if (part->n) {
        b->grp = part;
        cg_build_elementwise(b);
        b->grp = whole;
        cg_reset_cache(b);
    }
    for (int i = 0; i < nsum; i++)
        column_sums(b, sums[i], outs[i]);
}

/* The columns the one-pass form shares out as one task: up to 256, a
 * multiple of the lane width. */
static int64_t column_chunk(int64_t cols)
{
    int64_t chunk = cg_lane_width(cols);
    while (chunk * 2 <= 256 && cols % (chunk * 2) == 0)
        chunk *= 2;
    return chunk;
}

/* The row-streaming skeleton of the one-pass form: per chunk of columns
 * (column_chunk), the sums start at 0 in their fp32 buffers dst[i], then
 * row by row every column of the chunk (one vector loop, contiguous in
 * memory) computes its terms and adds each to its column's sum in dst[i],
 * which stays in L1. Each column is summed in row order from 0, as by a
 * lane of cg_column_lanes: the same bits, with the rows read in order. */
static void column_rows(cg_builder *b, int64_t rows, int64_t cols, int nsum, const int *dst, cg_lane_terms element,
                        void *arg)
{
    int64_t chunk = column_chunk(cols);
    int cb = kir_loop_begin(K, KL_PAR, cols / chunk, "cb");
    int z = kir_loop_begin(K, KL_BPAR, chunk, "j");
    kir_expr *zcol = kir_iadd(K, kir_imul(K, kir_varref(K, cb), chunk), kir_varref(K, z));
    for (int i = 0; i < nsum; i++)
        kir_store(K, dst[i], zcol, kir_const_f(K, 0));
    kir_loop_end(K);
    int r = kir_loop_begin(K, KL_SEQ, rows, "r");
    int j = kir_loop_begin(K, KL_BPAR, chunk, "j");
    int col = kir_let(K, kir_iadd(K, kir_imul(K, kir_varref(K, cb), chunk), kir_varref(K, j)), "col");
    kir_expr *term[4];
    element(b, r, col, arg, term);
    for (int i = 0; i < nsum; i++)
        kir_store(K, dst[i], kir_varref(K, col),
                  kir_bin(K, KB_ADD, kir_load(K, dst[i], kir_varref(K, col)), term[i]));
    kir_loop_end(K);
    kir_loop_end(K);
    kir_loop_end(K);
}

/* The CPU's form of an epilogue with column sums (the kernel's host body,
 * kir_begin_host_body), when the part is not empty and every sum (at
 * most 4, into fp32 buffers) reads a value over the part's whole domain:
 * with no more threads than column chunks, one pass (column_rows), each
 * row computing and storing the part's values and adding them to the
 * sums, so the values are not stored and then read back from memory
 * (GELU's gradient with its bias gradient in the GPT: [2048, 512], 4 MB
 * read again); with more threads, the body's two passes, which keep them
 * all busy. The same values are stored and each column is summed in row
 * order: the same bits either way. Builds nothing where the shapes do
 * not allow it. */
static void one_pass_host_body(cg_builder *b, const cg_group *part, const int *sums, const int *outs, int nsum)
{
    const ir_graph *g = part->g;
    ir_type domain = cg_elementwise_domain(part);
    if (!part->n || nsum < 1 || nsum > 4 || domain.rank < 2)
        return;
    int dst[4];
    for (int i = 0; i < nsum; i++) {
        const ir_type *t = &ir_val(g, sums[i])->type;
        /* The sums accumulate in their buffers: fp32 ones only. */
        if (ir_val(g, outs[i])->type.dtype != IR_F32 || t->rank != domain.rank ||
            memcmp(t->dim, domain.dim, sizeof(int64_t) * (size_t)t->rank))
            return;
        dst[i] = cg_buf(b, outs[i]);
    }
    int cls[IR_MAX_RANK];
    for (int k = 0; k < domain.rank; k++)
        cls[k] = k < domain.rank - 1 ? CG_REDUCED : CG_KEPT;
    const cg_group *whole = b->grp;
    b->grp = part;
    cg_nest nest;
    cg_nest_init(b, &nest, &domain, cls);
    if (cg_column_lanes_fit(&nest)) {
        int64_t cols = domain.dim[domain.rank - 1];
        one_pass o = {sums, nsum, cols};
        kir_begin_host_body(K);
        cg_reset_cache(b);
        kir_expr *few = kir_bin(K, KB_LE, kir_arg(K, 2), kir_const_i(K, cols / column_chunk(cols)));
        kir_if_begin(K, few);
        column_rows(b, ir_type_numel(&domain) / cols, cols, nsum, dst, one_pass_element, &o);
        kir_if_end(K);
        b->grp = whole;
        cg_reset_cache(b);
        kir_if_begin(K, kir_un(K, KU_NOT, few));
        two_passes(b, part, sums, outs, nsum);
        kir_if_end(K);
    }
    b->grp = whole;
    cg_reset_cache(b);
}

void cg_build_epilogue_sums(cg_builder *b)
{
    const cg_group *grp = b->grp;
    const ir_graph *g = grp->g;
    /* The elementwise part, as a group of its own: a value a column sum
     * reads escapes it, so the nest stores it. */
    int *elem = kl_xmalloc(sizeof(int) * (size_t)(3 * grp->n + 1)), ne = 0, nsum = 0;
    int *sums = elem + grp->n, *outs = sums + grp->n;
    for (int i = 0; i < grp->n; i++) {
        const ir_node *n = ir_nd(g, grp->nodes[i]);
        if (ir_is_column_sum(g, n)) {
            sums[nsum] = summed_value(grp, n);
            kl_check(sums[nsum] >= 0);
            outs[nsum++] = n->out.v[0];
        } else if (!widening_for_sums(grp, n)) {
            elem[ne++] = grp->nodes[i];
        }
    }
    cg_group part = {g, elem, ne};
    two_passes(b, &part, sums, outs, nsum);
    one_pass_host_body(b, &part, sums, outs, nsum);
    free(elem);
}
