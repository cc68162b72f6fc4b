/* What the window kernels (k_pool.c: pooling; k_conv.c: convolution's
 * movements) share: shorthands for building kernel IR through a
 * cg_builder b, and index helpers over [N*C, H, W] planes. Private to
 * codegen/. */
#ifndef KILN_K_WINDOW_H
#define KILN_K_WINDOW_H

#include "cg.h"

#define K (b->k)
#define BIN(op, x, y) kir_bin(K, op, x, y)
#define VAR(v) kir_varref(K, v)
#define I(x) kir_const_i(K, x)

/* lo <= e < hi */
static inline kir_expr *in_range(cg_builder *b, kir_expr *e, int64_t hi)
{
    return BIN(KB_AND, BIN(KB_GE, e, I(0)), BIN(KB_LT, e, I(hi)));
}

static inline kir_expr *clamp(cg_builder *b, kir_expr *e, int64_t hi)
{
    return BIN(KB_MAX, I(0), BIN(KB_MIN, e, I(hi - 1)));
}

static inline void close_n(cg_builder *b, int n)
{
    for (int i = 0; i < n; i++)
        kir_loop_end(K);
}

static inline kir_expr *plane_index(cg_builder *b, const ir_type *t, kir_expr *nc, kir_expr *h, kir_expr *w)
{
    return kir_iadd(K, kir_imul(K, kir_iadd(K, kir_imul(K, nc, t->dim[2]), h), t->dim[3]), w);
}

#endif
