/* constants: input-independent values computed once, at start-up.
 *
 * requires: simplify (constants folded, one node per computation), before
 *           recompute and fusion
 * provides: every node whose result depends on no input, param or state
 *           (nor on the step: no random or updating op) and is not one
 *           number everywhere gets the startup phase: a causal mask from
 *           arange or tril, a position table, and what they need. The
 *           plan runs startup steps once, before the first step, and
 *           keeps their results that per-step steps read live through
 *           every step (plan/plan.c pins them); the executor runs them
 *           again only when another plan sharing its arena ran in between
 *           (runtime/exec/session.c). Values that are one number everywhere
 *           (a constant, its broadcasts and elementwise functions of
 *           such) stay where they are, folded into their readers for free,
 *           unless a startup node reads them.
 */
#include <stdlib.h>

#include "passes.h"

/* Whether node n may run at start-up, given which values are static. */
static bool node_static(const ir_graph *g, const ir_node *n, const bool *stat)
{
    if (n->dead || n->out.n == 0 || n->op == IR_OP_CONST)
        return false;
    const ir_op_info *info = &ir_ops[n->op];
    if (info->kclass == IR_KC_RANDOM || info->kclass == IR_KC_UPDATE || info->kclass == IR_KC_SOURCE ||
        info->kclass == IR_KC_COLLECTIVE)
        return false;
    for (int k = 0; k < n->in.n; k++)
        if (ir_op_mutates(n->op, k) || !stat[n->in.v[k]])
            return false;
    (void)g;
    return true;
}

int pass_constants(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    int nv = g->values.n;
    /* stat: no input, param or state upstream; uniform: moreover one
     * number at every position (a constant and pointwise functions of
     * constants, which readers fold in). Nodes are in program order. */
    bool *stat = kl_xcalloc((size_t)nv + 1, 1), *uniform = kl_xcalloc((size_t)nv + 1, 1);
    bool *hoist = kl_xcalloc((size_t)g->nodes.n + 1, 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead)
            continue;
        if (n->op == IR_OP_CONST) {
            stat[n->out.v[0]] = uniform[n->out.v[0]] = true;
            continue;
        }
        if (!node_static(g, n, stat))
            continue;
        bool uni = (ir_op_is_pointwise(n->op) || ir_op_is_view(n->op)) && !ir_op_is_positional(n->op);
        for (int k = 0; uni && k < n->in.n; k++)
            uni = uniform[n->in.v[k]];
        for (int k = 0; k < n->out.n; k++) {
            stat[n->out.v[k]] = true;
            uniform[n->out.v[k]] = uni;
        }
        hoist[i] = !uni;
    }
    /* A startup node's static operands run at start-up too (walked in
     * reverse program order, so an operand's producer is seen after its
     * readers). */
    for (int i = g->nodes.n - 1; i >= 0; i--) {
        if (!hoist[i])
            continue;
        const ir_node *n = ir_nd(g, i);
        for (int k = 0; k < n->in.n; k++) {
            const ir_value *v = ir_val(g, n->in.v[k]);
            if (v->def >= 0 && ir_nd(g, v->def)->op != IR_OP_CONST && stat[v->id])
                hoist[v->def] = true;
        }
    }
    for (int i = 0; i < g->nodes.n; i++)
        if (hoist[i])
            ir_nd(g, i)->phase = IR_PHASE_STARTUP;
    free(stat);
    free(uniform);
    free(hoist);
    ir_toposort(g);
    return 0;
}
