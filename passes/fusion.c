/* fusion: groups ops into kernels.
 *
 * requires: simplify
 * provides: node.group, one kernel per group id; -1 for nodes that need no
 *           kernel (constants, which are folded into their readers, and
 *           reshape/flatten, which are views).
 *
 * For now every other node is its own group.
 */
#include "passes.h"

int pass_fusion(ir_graph *g)
{
    int next = 0;
    for (int i = 0; i < g->nodes.n; i++) {
        ir_node *n = ir_nd(g, i);
        bool kernel = n->op != IR_OP_CONST && n->op != IR_OP_RESHAPE && n->op != IR_OP_FLATTEN;
        n->group = kernel ? next++ : -1;
    }
    return 0;
}
