/* accumulate: gradient accumulation over micro-batches.
 *
 * requires: optimizer, precision
 * provides: with accumulate = N > 1, an fp32 accumulator (state
 *           NAME.grad_acc) per trained param, which every micro-batch adds
 *           its gradient to (grad_accumulate, backward phase; the first
 *           micro-batch of a step overwrites it), and the update phase
 *           reading the accumulators. The runtime runs the forward and
 *           backward phases N times, then the update phase once, with the
 *           gradient multiplier 1 / N (times 1 / loss scale) in
 *           optimizer.hyper, so the step sees the mean gradient over the
 *           effective batch. Batch norm keeps statistics per micro-batch;
 *           an fp16 overflow anywhere in the step shows in the summed
 *           gradients, so one check per step covers every micro-batch.
 *           With accumulate = 1 nothing changes.
 */
#include <stdlib.h>

#include "passes.h"
#include "ir/train_config.h"

int pass_accumulate(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int64_t steps = cfg.accumulate;
    kl_train_config_free(&cfg);
    if (steps <= 1)
        return 0;
    int npairs = g->grads.n;
    for (int i = 0; i < npairs; i++) {
        int p = g->grads.v[i].param, d = g->grads.v[i].grad;
        ir_type t = ir_val(g, d)->type;
        t.dtype = t.dtype == IR_F64 ? IR_F64 : IR_F32;
        char *name = kl_xasprintf("%s.grad_acc", ir_val(g, p)->name);
        int acc = ir_declare(g, IR_VAL_STATE, name, &t, (kl_loc){0, 0});
        free(name);
        ir_attrs_set_str(&ir_val(g, acc)->attrs, "init", "zeros");
        ir_attrs_set_str(&ir_val(g, acc)->attrs, "role", "grad_acc");
        /* The update phase reads the accumulator instead of the gradient. */
        const ir_value *dv = ir_val(g, d);
        for (int u = dv->uses.n - 1; u >= 0; u--) {
            ir_use use = dv->uses.v[u];
            if (ir_nd(g, use.node)->phase == IR_PHASE_UPDATE)
                ir_set_operand(g, ir_nd(g, use.node), use.operand, acc);
        }
        ir_attrs a = {0};
        ir_attrs_set_int(&a, "steps", steps);
        int args[2] = {acc, d};
        ir_emit(g, IR_OP_GRAD_ACCUMULATE, args, 2, &a, NULL);
        ir_attrs_free(&a);
        ir_node *n = ir_nd(g, g->nodes.n - 1);
        n->phase = IR_PHASE_BACKWARD;
        n->loc = ir_val(g, p)->loc;
    }
    ir_toposort(g);
    return 0;
}
