/* schedule: the execution order.
 *
 * requires: fusion
 * provides: nodes in execution order: operands before readers, in-place
 *           writers of persistent values (optimizer updates) after every
 *           other reader of those values, the nodes of a group together.
 */
#include "passes.h"

int pass_schedule(ir_graph *g)
{
    ir_toposort(g);
    return 0;
}
