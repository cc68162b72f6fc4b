/* --predict on a model without a cross-entropy: the model's output is
 * the value its loss compares with a target. Walking back from the loss,
 * it is the one operand that depends on the params where the others
 * include a per-sample value (of as many rows) that does not (the
 * target: mse's y in mean((pred - y) ** 2), an autoencoder's own
 * input). */
#include <stdlib.h>

#include "trainer.h"

/* Whether each value depends on a param or state (the nodes are in
 * order: every operand's producer comes first). */
static bool *param_dependent(const ir_graph *g)
{
    bool *dep = kl_xcalloc((size_t)g->values.n + 1, sizeof *dep);
    for (int v = 0; v < g->values.n; v++)
        dep[v] = ir_val(g, v)->kind == IR_VAL_PARAM || ir_val(g, v)->kind == IR_VAL_STATE;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        bool any = false;
        for (int k = 0; k < n->in.n && !any; k++)
            any = dep[n->in.v[k]];
        for (int k = 0; k < n->out.n && any; k++)
            dep[n->out.v[k]] = true;
    }
    return dep;
}

/* Breadth first from the loss over param-dependent operands: the
 * output nearest the loss. */
int train_output_value(const ir_graph *g)
{
    if (g->loss < 0)
        return -1;
    bool *dep = param_dependent(g);
    bool *seen = kl_xcalloc((size_t)g->values.n + 1, sizeof *seen);
    int *queue = kl_xmalloc(sizeof *queue * ((size_t)g->values.n + 1));
    int head = 0, tail = 0, found = -1;
    queue[tail++] = g->loss;
    seen[g->loss] = true;
    while (head < tail && found < 0) {
        const ir_value *v = ir_val(g, queue[head++]);
        if (v->def < 0)
            continue;
        const ir_node *n = ir_nd(g, v->def);
        int p = -1, np = 0;
        for (int k = 0; k < n->in.n; k++)
            if (dep[n->in.v[k]]) {
                p = n->in.v[k];
                np++;
            }
        /* The target has the output's rows (a sample's each): not a
         * weight that multiplies the input (x @ w). */
        const ir_value *pv = p >= 0 ? ir_val(g, p) : NULL;
        bool target = false;
        for (int k = 0; k < n->in.n && np == 1 && pv->kind == IR_VAL_TEMP && pv->type.rank > 0; k++) {
            const ir_value *in = ir_val(g, n->in.v[k]);
            target |= !dep[in->id] && in->type.rank > 0 && in->type.dim[0] == pv->type.dim[0];
        }
        if (target) {
            found = p;
            break;
        }
        for (int k = 0; k < n->in.n; k++) {
            int u = n->in.v[k];
            if (dep[u] && !seen[u]) {
                seen[u] = true;
                queue[tail++] = u;
            }
        }
    }
    free(queue);
    free(seen);
    free(dep);
    return found;
}
