/* Shape rules, one per op-table row (ir/shape.c). Each reads inf->in and
 * inf->attrs and fills inf->out, or reports a user error. */
#ifndef KILN_SHAPE_H
#define KILN_SHAPE_H

#include "ir.h"

#define OP(id, name, min_in, max_in, nout, kc, flags, prec, shape, ...) int shape(ir_infer *inf);
#include "ops.def"
#undef OP

/* Normalizes a possibly negative axis against rank; -1 when out of range. */
int ir_norm_axis(int64_t axis, int rank);

#endif
