/* Internal to codegen: building kernels for groups of IR nodes.
 *
 * A group is the set of nodes the fusion pass put in one kernel. The
 * builders here turn a group into kernel IR: elementwise chains become one
 * loop nest whose body composes every op's expression (cg_value_at), and
 * reductions, norms and windows use templates whose per-element reads and
 * writes go through the same expression composition, so elementwise
 * producers and consumers fuse into them. */
#ifndef KILN_CG_H
#define KILN_CG_H

#include "attn_native.h"
#include "kir.h"

typedef struct cg_group {
    const ir_graph *g;
    int *nodes; /* in execution order, which is ascending ids (cg_in_group searches them) */
    int n;
} cg_group;

/* The loop context of an elementwise nest: the domain's (collapsed) dims,
 * the loop variables, and per value the strides it is read with. */
typedef struct cg_nest {
    int rank;
    int64_t dim[IR_MAX_RANK];
    int var[IR_MAX_RANK];
    /* The domain before collapsing, for mapping values onto it. */
    ir_type domain;
    int map[IR_MAX_RANK]; /* original dim -> collapsed dim */
    int cls[IR_MAX_RANK]; /* collapsed dim -> class */
} cg_nest;

typedef struct cg_builder {
    const cg_group *grp;
    kir_kernel *k;
    cg_nest *nest;
    /* Values computed in this nest: value id -> local var, or -1; and the
     * ids set since the last cg_reset_cache, which clears only those. */
    int *cached;
    int ncached;
    int *cached_ids;
    int ncached_ids;
} cg_builder;

bool cg_in_group(const cg_group *grp, int node);
/* True when v is computed inside the group by an elementwise node. */
bool cg_computed_inside(const cg_group *grp, int v);
/* Values the group reads from outside and values used after it. */
bool cg_value_escapes(const cg_group *grp, int v);

/* Sets up a nest over domain: collapses neighbouring dims that every value
 * touched by the group reads in the same pattern and that have the same
 * class (cls may be NULL: one class; reductions pass kept/reduced). */
void cg_nest_init(cg_builder *b, cg_nest *nest, const ir_type *domain, const int *cls);
/* The class of collapsed dim j (as given to cg_nest_init). */
int cg_nest_class(const cg_nest *nest, int j);
/* Opens the nest's loops (kind for all of them); close with kir_loop_end. */
void cg_nest_open(cg_builder *b, kir_loop_kind kind);
void cg_nest_close(cg_builder *b);
/* The index along original dim k of the domain at the nest's current
 * position (a loop variable, or derived from a collapsed one). */
kir_expr *cg_dim_index(cg_builder *b, int k);
/* The flat index of an element of v (which broadcasts to the domain) at
 * the nest's current position. */
kir_expr *cg_index(cg_builder *b, const ir_type *t);
/* The expression of value v at the nest's current position: loads for
 * values from outside the group, composed ops for values inside. */
kir_expr *cg_value_at(cg_builder *b, int v);
/* A scalar operand: a folded constant, or a load of element 0. */
kir_expr *cg_scalar(cg_builder *b, int v);
/* The kernel buffer of value v. */
int cg_buf(cg_builder *b, int v);
kir_type cg_compute_type(const ir_graph *g, const int *values, int n);
/* Applies an elementwise op to operand expressions: the body its op row
 * names (result: which of the node's results). */
kir_expr *cg_elem_apply(cg_builder *b, const ir_node *n, int result, kir_expr **args);
/* True when the op's row names an elementwise body (every pointwise op,
 * and const). */
bool cg_has_body(ir_op op);
/* A store of expression e into value v's buffer at the nest position. */
void cg_store_at(cg_builder *b, int v, kir_expr *e);

/* Dim classes of nests over reductions: kept dims (the result's) and
 * reduced ones. */
enum { CG_KEPT = 0, CG_REDUCED = 1 };
/* Opens one loop per collapsed dim of class cls, of the given kind; the
 * first loop gets the accumulators ops[0..nacc) (RED loops). Returns the
 * number of loops opened, for cg_close_loops. */
int cg_open_class(cg_builder *b, int cls, kir_loop_kind kind, const kir_acc_op *ops, int nacc, int *accs);
void cg_close_loops(cg_builder *b, int n);
/* Forgets the values computed at the previous position (a new loop). */
void cg_reset_cache(cg_builder *b);
/* The flat index over the KEPT dims (the layout of a reduction's result
 * or of per-channel statistics). */
kir_expr *cg_kept_index(cg_builder *b);
/* The product of the collapsed dims of class cls. */
int64_t cg_class_size(const cg_nest *nest, int cls);

/* The anchor's result v has value e at the nest's current position:
 * stores v if it escapes, then every elementwise node of the group that
 * reads v (directly or through others: the epilogue) whose result
 * escapes. */
void cg_emit_epilogue(cg_builder *b, int v, kir_expr *e);

/* Kernel builders by kernel class; each fills b->k. */
void cg_build_elementwise(cg_builder *b);
/* The domain an elementwise group's nest covers: its largest result shape
 * (every result broadcasts to it). */
ir_type cg_elementwise_domain(const cg_group *grp);
void cg_build_update(cg_builder *b, const ir_node *n);
void cg_build_move(cg_builder *b, const ir_node *n);
void cg_build_reduce(cg_builder *b, const ir_node *n);
void cg_build_norm(cg_builder *b, const ir_node *n);
void cg_build_pool(cg_builder *b, const ir_node *n);
/* A GEMM epilogue group holding bias gradients (codegen/k_colsum.c):
 * the elementwise nodes as one nest, then the column sums
 * (ir_is_column_sum) of values it computes and stores. cg_epilogue_sums:
 * the group is one (a reduction's prologue is never stored). */
bool cg_epilogue_sums(const cg_group *grp);
void cg_build_epilogue_sums(cg_builder *b);
/* A sum over leading axes (the nest collapsed to [REDUCED, KEPT], at least
 * 4 columns in lanes): cg_column_lanes_fit says whether the nest is one;
 * cg_build_column_lanes stores y = the column sums of x (over divisor: a
 * mean), x read row by row W columns at a time, each column summed in row
 * order by one lane (codegen/k_colsum.c). The reduction builder uses it
 * as the kernel's host body (kir_begin_host_body): the CPU's form. */
bool cg_column_lanes_fit(const cg_nest *nest);
/* The lanes for cols columns: up to 16, a power of two dividing cols. */
int cg_lane_width(int64_t cols);
/* The column-lanes skeleton itself: nsum (up to 4) sums over rows of
 * [rows, cols] terms, stored (over divisor) into the buffers dst[i] at
 * the column; element sets the nsum terms at row r, column col (loop
 * variables). */
typedef void (*cg_lane_terms)(cg_builder *b, int r, int col, void *arg, kir_expr **out);
void cg_column_lanes(cg_builder *b, int64_t rows, int64_t cols, int nsum, const int *dst, double divisor,
                     cg_lane_terms element, void *arg);
void cg_build_column_lanes(cg_builder *b, int x, int y, double divisor);
/* attention and its two backward ops (codegen/k_attn.c) */
void cg_build_attention(cg_builder *b, const ir_node *n);
/* The group's attention kernel k as a native function's description
 * (codegen/attn_native.h): true when the group is one attention op with
 * f32 operands and results; else out->kind is CG_ATTN_NONE. */
bool cg_attention_native(const cg_group *grp, const kir_kernel *k, cg_attn_native *out);
/* The geometry of a convolution: input [n, c, h, w], output [n, o, oh, ow],
 * kernel [o, c / groups, kh, kw]. */
typedef struct cg_conv {
    ir_dtype dtype;     /* of the GEMM operands (x, col, dy) */
    ir_dtype out_dtype; /* of the result */
    int64_t n, c, h, w, o, oh, ow, kh, kw, groups;
    int64_t s[2], p[2], d[2];
} cg_conv;
/* Convolution's data movement: im2col gathers x [N, C, H, W] into the
 * scratch col [C*KH*KW, N, OH*OW]; col2im sums such a col back into x's
 * shape. col is a scratch buffer's (negative) id. */
void cg_build_im2col(cg_builder *b, const cg_conv *cv, int x, int col);
void cg_build_col2im(cg_builder *b, const cg_conv *cv, int col, int x);
/* Direct convolution for few taps (C/groups * KH * KW <= 27, one group):
 * pad copies x into a zero-bordered scratch; the forward kernel and the
 * weight gradient read it without bounds checks. */
void cg_build_pad(cg_builder *b, const cg_conv *cv, int x, int xpad);
/* xpad's dtype: f32 for 16-bit operands, so the pad widens each input once
 * and the direct kernels, which read every input once per output channel,
 * load floats (widening is exact: the same results bit for bit). */
static inline ir_dtype cg_conv_pad_dtype(const cg_conv *cv)
{
    return ir_dtype_size(cv->dtype) == 2 ? IR_F32 : cv->dtype;
}
void cg_build_conv_direct(cg_builder *b, const cg_conv *cv, int xpad, int w, int y);
void cg_build_conv_direct_wgrad(cg_builder *b, const cg_conv *cv, int xpad, int dy, int dw);
/* out[j, i, k] = in[i, j, k] for in [a, b, inner] (values or scratch ids). */
void cg_build_swap_outer(cg_builder *b, int from, int to, ir_dtype dt, int64_t a, int64_t bb, int64_t inner);

#endif
