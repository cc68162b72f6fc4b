/* Gradient rules of the op table (ir/grad.c), used by the autodiff pass.
 *
 * A rule sees one forward node whose results have gradients and emits the
 * backward nodes that give its operands' gradients. Backward ops follow one
 * convention: operands are [gradients of results, forward operands, forward
 * results], and each rule passes only those it reads, so autodiff keeps
 * alive only what backward needs. */
#ifndef KILN_GRAD_H
#define KILN_GRAD_H

#include "ir.h"

typedef KL_VEC(int) ir_int_vec;

typedef struct ir_grad_ctx ir_grad_ctx;
/* Emits the backward nodes of one forward node whose results have
 * gradients (see ir/grad.c). */
typedef void (*ir_grad_fn)(ir_grad_ctx *c, ir_node *n);

struct ir_grad_ctx {
    ir_graph *g;
    /* Per forward value (ids below ncontrib): the gradient contributions
     * collected so far, and whether the value needs a gradient at all. */
    ir_int_vec *contrib;
    bool *wanted;
    int ncontrib;
};

/* The summed gradient of value v (an add node per extra contribution), or
 * -1 when nothing flows into v. */
int ir_grad_get(ir_grad_ctx *c, int v);
/* Adds a contribution g to the gradient of value v, unless v needs none. */
void ir_grad_put(ir_grad_ctx *c, int v, int g);
/* True when v needs a gradient (a param, or computed from one). */
bool ir_grad_wanted(ir_grad_ctx *c, int v);

/* The gradient rule of an op: its row's grad column (the rules are
 * static in ir/grad.c, whose table is made from ops.def), or NULL when
 * no gradient flows through the op. */
ir_grad_fn ir_grad_rule(ir_op op);

#endif
