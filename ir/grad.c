/* Gradient rules of the op table. (Filled in with the autodiff pass.) */
#include "grad.h"

#define X(name) \
    void ir_grad_##name(ir_grad_ctx *c, ir_node *n) { (void)c; kl_panic("no gradient rule for %s yet", ir_op_name(n->op)); }
IR_GRAD_RULES(X)
#undef X
