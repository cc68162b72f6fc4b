/* schedule: the execution order.
 *
 * requires: fusion
 * provides: nodes in execution order: operands before readers, in-place
 *           writers of persistent values (optimizer updates) after every
 *           other reader of those values, the nodes of a group together.
 */
#include <stdlib.h>

#include "passes.h"

int pass_schedule(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    int *unit = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    for (int i = 0; i < g->nodes.n; i++)
        unit[i] = ir_nd(g, i)->group;
    ir_toposort_units(g, unit);
    free(unit);
    return 0;
}
