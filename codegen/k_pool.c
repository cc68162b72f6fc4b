/* Window kernels: max and average pooling, forward and backward. */
#include "cg.h"

void cg_build_pool(cg_builder *b, const ir_node *n)
{
    (void)b;
    kl_panic("no kernel for %s yet", ir_op_name(n->op));
}
