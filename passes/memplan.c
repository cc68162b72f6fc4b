/* memplan: memory planning, on the plan built from the graph.
 *
 * requires: schedule
 * provides: nothing in the graph. The plan (cg_build_plan) computes every
 *           arena buffer's live range over its steps in schedule order,
 *           writes results over operands that die where the op table allows
 *           it (IR_F_INPLACE), and places the buffers in one arena by the
 *           heap simulator (codegen/memplan.c). This pass builds that plan
 *           and runs the plan checker on it (memplan_check, over the
 *           train block's micro-batches), so a broken plan is caught here as
 *           an internal error; `kiln ir --after memplan` prints its report
 *           and `--format timeline` which buffers share memory.
 */
#include <stdlib.h>

#include "passes.h"
#include "../codegen/memplan.h"
#include "../frontend/train_config.h"

int pass_memplan(ir_graph *g)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int micro_batches = (int)cfg.accumulate;
    kl_train_config_free(&cfg);
    kl_plan *p = cg_build_plan(g);
    kl_buf why = {0};
    if (memplan_check(p, micro_batches, &why))
        kl_panic("the memory plan of %s fails the plan checker:\n%s", g->name, why.s);
    kl_buf_free(&why);
    kl_plan_free(p);
    return 0;
}
