/* eval_mode: the forward graph for evaluation.
 *
 * requires: a forward graph (frontend lowering), no autodiff yet
 * provides: batch norm with running statistics (batchnorm_infer), dropout
 *           as the identity; nothing writes persistent state.
 */
#include "passes.h"

int pass_eval_mode(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    int nnodes = g->nodes.n;
    for (int i = 0; i < nnodes; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead)
            continue;
        if (n->op == IR_OP_DROPOUT) {
            ir_replace_uses(g, n->out.v[0], n->in.v[0]);
            ir_kill_node(g, n);
        } else if (n->op == IR_OP_BATCHNORM) {
            kl_check(ir_val(g, n->out.v[1])->uses.n == 0 && ir_val(g, n->out.v[2])->uses.n == 0);
            int args[5];
            for (int k = 0; k < 5; k++)
                args[k] = n->in.v[k];
            ir_node *m = ir_add_node(g, IR_OP_BATCHNORM_INFER, args, 5, &n->attrs, &ir_val(g, n->out.v[0])->type, NULL, n->loc);
            m->scope = n->scope ? kl_xstrdup(n->scope) : NULL;
            ir_replace_uses(g, n->out.v[0], m->out.v[0]);
            ir_kill_node(g, n);
        }
    }
    ir_compact(g);
    ir_toposort(g);
    return 0;
}
