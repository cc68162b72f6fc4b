/* schedule: the execution order.
 *
 * requires: fusion
 * provides: nodes in execution order: operands before readers, in-place
 *           writers of persistent values (optimizer updates) after every
 *           other reader of those values, the nodes of a group together;
 *           each collective of the update phase that reads backward's
 *           results (a bucket of gradients, or of their accumulators),
 *           with the update nodes that assemble its operand (flattening
 *           reshapes, the bucket's concat), right after the last of those
 *           results is produced: the runtime posts it to its communication
 *           thread there and backward goes on (runtime/exec/session.c). It
 *           stays in the update phase, so that with accumulation it runs
 *           once per step, in the last micro-batch's backward; there the
 *           accumulators it reads (grad_accumulate, one kernel per bucket:
 *           fusion) are also written as soon as their gradients are
 *           ready, so the first bucket's collective starts before the
 *           last gradient is computed.
 */
#include <stdlib.h>

#include "passes.h"

/* Which nodes run as soon as their operands are ready: update-phase
 * collectives whose operands come from outside the update phase, through
 * update nodes that write nothing in place (the bucket's assembly). */
static bool *eager_nodes(const ir_graph *g)
{
    int n = g->nodes.n;
    bool *early = kl_xcalloc((size_t)n + 1, 1), *eager = kl_xcalloc((size_t)n + 1, 1);
    /* early: could run before the update phase (operands in order first). */
    for (int i = 0; i < n; i++) {
        const ir_node *nd = ir_nd(g, i);
        if (nd->dead || nd->phase != IR_PHASE_UPDATE)
            continue;
        bool ok = true;
        for (int k = 0; k < nd->in.n && ok; k++) {
            int def = ir_val(g, nd->in.v[k])->def;
            ok = !ir_op_mutates(nd->op, k) && (def < 0 || ir_nd(g, def)->phase != IR_PHASE_UPDATE || early[def]);
        }
        early[i] = ok;
    }
    /* eager: early collectives and the early nodes that feed them. */
    for (int i = n - 1; i >= 0; i--) {
        const ir_node *nd = ir_nd(g, i);
        if (!early[i])
            continue;
        eager[i] = ir_ops[nd->op].kclass == IR_KC_COLLECTIVE;
        for (int k = 0; k < nd->out.n && !eager[i]; k++) {
            const ir_value *v = ir_val(g, nd->out.v[k]);
            for (int u = 0; u < v->uses.n && !eager[i]; u++)
                eager[i] = eager[v->uses.v[u].node];
        }
    }
    free(early);
    /* With accumulation, what they read at the boundary is an accumulator
     * that backward writes in place (grad_accumulate): those writers run
     * eagerly too, so that each bucket's collective waits for its own
     * accumulators only (fusion keeps one kernel per bucket). */
    for (int i = 0; i < n; i++) {
        const ir_node *nd = ir_nd(g, i);
        for (int k = 0; eager[i] && k < nd->in.n; k++) {
            const ir_value *v = ir_val(g, nd->in.v[k]);
            for (int u = 0; v->def < 0 && u < v->uses.n; u++) {
                const ir_node *w = ir_nd(g, v->uses.v[u].node);
                if (!w->dead && w->phase == IR_PHASE_BACKWARD && ir_op_mutates(w->op, v->uses.v[u].operand))
                    eager[v->uses.v[u].node] = true;
            }
        }
    }
    return eager;
}

int pass_schedule(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    int *unit = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    for (int i = 0; i < g->nodes.n; i++)
        unit[i] = ir_nd(g, i)->group;
    bool *eager = eager_nodes(g);
    /* A group runs as one kernel: eager when any of its nodes is. */
    for (int i = 0; i < g->nodes.n; i++)
        for (int j = 0; eager[i] && unit[i] >= 0 && j < g->nodes.n; j++)
            if (unit[j] == unit[i])
                eager[j] = true;
    ir_toposort_eager(g, unit, eager);
    free(eager);
    free(unit);
    return 0;
}
