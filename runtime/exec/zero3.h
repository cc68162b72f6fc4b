/* ZeRO stage 3 on the runtime's side: the slices that replace the params
 * (passes/shard_zero3.c). A slice names the params it holds a share of
 * ("params": comma-separated names; "shape_I", "init_I": member I's shape
 * and initialiser); rank r holds elements [r S, (r+1) S) of the members
 * flattened one after the other (zeros past their end). */
#ifndef KILN_ZERO3_H
#define KILN_ZERO3_H

#include "ir/ir.h"

/* Member i's type: f32, shape_I (when it has count elements, or count
 * is -1); else f32[count]. */
ir_type kl_zero3_member_type(const ir_value *slice, int i, int64_t count);
/* The slice's initial values: each member initialised as one rank
 * initialises the param (same seed, name and fans), then this rank's
 * share, in the slice's dtype. */
void kl_zero3_init(const ir_value *v, uint64_t seed, int rank, void *host);

#endif
