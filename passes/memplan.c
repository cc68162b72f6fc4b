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
 *           Before the checker (whose map of the arena grows with it) and
 *           before any runtime allocates the plan, the plan's bytes are
 *           checked against the machine's memory (kl_check_alloc): a batch
 *           or a param too large is a user's error with a hint, not an
 *           out-of-memory abort minutes later.
 */
#include <stdio.h>
#include <stdlib.h>

#include "passes.h"
#include "../codegen/memplan.h"
#include "../frontend/train_config.h"

/* The plan's params, state and arena fit in the machine's memory; the
 * hint scales the batch down in proportion to the arena. */
static int check_plan_size(const ir_graph *g, const kl_plan *p, int64_t batch)
{
    int64_t persistent = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (ir_is_persistent(v))
            persistent += ir_type_bytes(&v->type); /* each below 2^53 (ir_type_in_range) */
    }
    int64_t total = persistent + p->arena_bytes, machine = kl_machine_memory();
    if (total <= machine)
        return 0;
    char what[256], hint[160], ps[32];
    kl_format_bytes(ps, sizeof ps, persistent);
    snprintf(what, sizeof what, "%s: the plan (params and state %s + the arena of batch %lld)", g->name, ps,
             (long long)batch);
    int64_t room = machine - persistent, fit = p->arena_bytes > 0 ? (int64_t)((double)batch * (double)room / (double)p->arena_bytes) : 0;
    if (room <= 0)
        snprintf(hint, sizeof hint, "the params and optimizer state alone do not fit: make the model smaller");
    else if (fit >= 1 && fit < batch)
        snprintf(hint, sizeof hint, "try --batch %lld (or less) with --accumulate to keep the effective batch", (long long)fit);
    else
        snprintf(hint, sizeof hint, "try a smaller --batch");
    return kl_check_alloc(what, total, 0, hint);
}

int pass_memplan(ir_graph *g)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int micro_batches = (int)cfg.accumulate;
    int64_t batch = cfg.batch;
    kl_train_config_free(&cfg);
    kl_plan *p = cg_build_plan(g);
    if (check_plan_size(g, p, batch)) {
        kl_plan_free(p);
        return -1;
    }
    kl_buf why = {0};
    if (memplan_check(p, micro_batches, &why))
        kl_panic("the memory plan of %s fails the plan checker:\n%s", g->name, why.s);
    kl_buf_free(&why);
    kl_plan_free(p);
    return 0;
}
