/* What shard_zero.c (ZeRO stages 1-3) and shard_zero3.c (stage 3's
 * gathers) share; private to passes/. */
#ifndef KILN_PASSES_SHARD_ZERO_H
#define KILN_PASSES_SHARD_ZERO_H

#include "ir/ir.h"

/* At most this many params a bucket (a kernel has at most
 * IR_KERNEL_MAX_BUFS buffers). */
#define ZERO_MAX_MEMBERS 30

/* One zero3 bucket as shard_zero.c leaves it: its params (and their
 * 16-bit copies, -1 without), no longer written by anything, and the
 * slices that replace them: master, f32[S], and under bf16/fp16 its
 * 16-bit copy (-1 without). */
typedef struct zero3_bucket {
    int n;
    int params[ZERO_MAX_MEMBERS], lowp[ZERO_MAX_MEMBERS];
    int master, lowp_slice;
} zero3_bucket;

/* Slice v records member i's shape ("shape_I") ... */
void zero3_set_shape(ir_graph *g, int v, int i, int param);
/* ... and, for its initialisation, the params it is a slice of
 * ("params": names; "shape_I", "init_I": each one's shape and init). */
void zero3_set_init(ir_graph *g, int v, const int *params, int n);

/* The params of each bucket all-gathered from the slices before their
 * first use in forward and again in backward (prefetched one bucket
 * ahead), their readers rewired, the params and their copies removed. */
int pass_zero3_gathers(ir_graph *g, const zero3_bucket *b, int nb, int ranks);

#endif
