/* shard: data parallel across the ranks of a run (training).
 *
 * requires: accumulate (the update phase reads each step's final
 *           gradients, or their accumulators)
 * provides: with pass_ctx.ranks = N > 1, an all_reduce (sum, ranks = N,
 *           update phase) of every value the update phase reads from
 *           forward or backward: the gradients, or the accumulators that
 *           backward writes; the update's readers read the sums. The
 *           gradient multiplier in optimizer.hyper divides by N (the
 *           runtime: driver/train.c), so every rank applies the global
 *           batch's mean gradient to the same params; the gradient norm
 *           (clip) and the fp16 overflow check, computed in the update
 *           phase, see the sums, so every rank clips by the global norm and
 *           skips the same steps. With one rank nothing changes.
 *
 * The train block's shard = none and shard = dp both mean this; the ZeRO
 * stages are refused by ir/train_config.c until they are built. */
#include <stdlib.h>

#include "passes.h"

int pass_shard(ir_graph *g, const pass_ctx *cx)
{
    if (cx->ranks <= 1)
        return 0;
    int nv = g->values.n;
    bool *from_backward = kl_xcalloc((size_t)nv + 1, 1), *done = kl_xcalloc((size_t)nv + 1, 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase == IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->out.n; k++)
            from_backward[n->out.v[k]] = true;
        for (int k = 0; k < n->in.n; k++)
            if (ir_op_mutates(n->op, k))
                from_backward[n->in.v[k]] = true;
    }
    int rc = 0, nnodes = g->nodes.n;
    for (int i = 0; i < nnodes && !rc; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int v = n->in.v[k];
            if (v >= nv || !from_backward[v] || done[v])
                continue;
            done[v] = true;
            const ir_value *x = ir_val(g, v);
            ir_dtype dt = x->type.dtype;
            if (dt != IR_F32 && dt != IR_BF16 && dt != IR_F16) {
                pass_error(g, x->loc, "the update reads %s (%s) from backward, which cannot be summed across ranks", x->name,
                           ir_dtype_name(dt));
                rc = -1;
                break;
            }
            ir_attrs a = {0};
            ir_attrs_set_str(&a, "reduce", "sum");
            ir_attrs_set_int(&a, "ranks", cx->ranks);
            char *base = kl_xasprintf("%s.sum", x->name), *name = ir_unique_name(g, base);
            int s = ir_emit(g, IR_OP_ALL_REDUCE, &v, 1, &a, name);
            free(base);
            free(name);
            ir_attrs_free(&a);
            ir_node *ar = ir_nd(g, g->nodes.n - 1);
            ar->phase = IR_PHASE_UPDATE;
            ar->loc = x->loc;
            /* Every update-phase reader but the sum itself reads the sum. */
            const ir_value *xv = ir_val(g, v);
            for (int u = xv->uses.n - 1; u >= 0; u--) {
                ir_use use = xv->uses.v[u];
                ir_node *r = ir_nd(g, use.node);
                if (r != ar && r->phase == IR_PHASE_UPDATE)
                    ir_set_operand(g, r, use.operand, s);
            }
        }
    }
    free(from_backward);
    free(done);
    if (!rc)
        ir_toposort(g);
    return rc;
}
