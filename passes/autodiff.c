/* autodiff: reverse-mode gradients of the loss with respect to every param.
 *
 * requires: a forward graph with a loss (frontend lowering)
 * provides: backward nodes (phase backward), one gradient per param that
 *           affects the loss (graph.grads), and the state %loss_scale that
 *           seeds the backward pass (1 unless fp16 loss scaling sets it).
 *
 * Nodes are visited in reverse order; each op's rule (ir/grad.c) turns the
 * summed gradient of its results into contributions to its operands.
 * Contributions are summed with explicit add nodes. Only values computed
 * from params get gradients, so inputs and integer paths cost nothing.
 * Backward nodes inherit their forward node's _precision and _stage. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/grad.h"

int pass_autodiff(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    if (g->loss < 0) {
        pass_error(g, (kl_loc){0, 0}, "model '%s' has no loss (bind one: loss = cross_entropy(logits, label))", g->name);
        return -1;
    }
    int nvals = g->values.n, nnodes = g->nodes.n;
    ir_grad_ctx c = {.g = g, .ncontrib = nvals};
    c.contrib = kl_xcalloc((size_t)nvals, sizeof *c.contrib);
    c.wanted = kl_xcalloc((size_t)nvals, sizeof *c.wanted);
    for (int i = 0; i < g->decls.n; i++)
        c.wanted[g->decls.v[i]] = ir_val(g, g->decls.v[i])->kind == IR_VAL_PARAM;
    for (int i = 0; i < nnodes; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || !ir_grad_rule(n->op))
            continue;
        bool any = false;
        for (int k = 0; k < n->in.n; k++)
            any |= c.wanted[n->in.v[k]];
        for (int k = 0; k < n->out.n; k++)
            c.wanted[n->out.v[k]] = any && ir_dtype_is_float(ir_val(g, n->out.v[k])->type.dtype);
    }
    if (!c.wanted[g->loss]) {
        pass_error(g, ir_val(g, g->loss)->loc, "the loss does not depend on any param, so there is nothing to train");
        free(c.contrib);
        free(c.wanted);
        return -1;
    }

    /* The seed: d loss / d loss = the loss scale (1 without fp16). */
    ir_type scalar = {IR_F32, 0, {0}};
    int seed = ir_declare(g, IR_VAL_STATE, "loss_scale", &scalar, (kl_loc){0, 0});
    ir_attrs_set_str(&ir_val(g, seed)->attrs, "init", "ones");
    ir_attrs_set_str(&ir_val(g, seed)->attrs, "role", "loss_scale");
    int first_backward = g->nodes.n;
    if (ir_val(g, g->loss)->type.dtype != IR_F32) {
        ir_attrs a = {0};
        ir_attrs_set_str(&a, "to", ir_dtype_name(ir_val(g, g->loss)->type.dtype));
        seed = ir_emit(g, IR_OP_CAST, &seed, 1, &a, NULL);
        ir_attrs_free(&a);
    }
    kl_vec_push(c.contrib[g->loss], seed);

    for (int i = nnodes - 1; i >= 0; i--) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_FORWARD || !ir_grad_rule(n->op))
            continue;
        bool has = false;
        for (int k = 0; k < n->out.n; k++)
            has |= c.contrib[n->out.v[k]].n > 0;
        if (!has)
            continue;
        int mark = g->nodes.n;
        ir_grad_rule(n->op)(&c, n);
        /* Backward nodes carry their forward node's place in the source,
         * and its precision (precision = fp32 on a call, keep_fp32): the
         * backward of a kept op runs in the forward's precision. */
        const char *want = ir_attr_str(&ir_nd(g, i)->attrs, "_precision", NULL);
        /* And its pipeline stage: a layer's backward runs where its
         * forward ran (passes/pipeline_assign.c). */
        bool staged = ir_attrs_find(&ir_nd(g, i)->attrs, "_stage") != NULL;
        int64_t stage = ir_attr_int(&ir_nd(g, i)->attrs, "_stage", 0);
        for (int k = mark; k < g->nodes.n; k++) {
            ir_node *b = ir_nd(g, k);
            b->loc = ir_nd(g, i)->loc;
            free(b->scope);
            b->scope = ir_nd(g, i)->scope ? kl_xstrdup(ir_nd(g, i)->scope) : NULL;
            if (want && b->op != IR_OP_CONST && !ir_attrs_find(&b->attrs, "_precision"))
                ir_attrs_set_str(&b->attrs, "_precision", want);
            if (staged && !ir_attrs_find(&b->attrs, "_stage"))
                ir_attrs_set_int(&b->attrs, "_stage", stage);
        }
    }
    for (int i = 0; i < g->decls.n; i++) {
        int p = g->decls.v[i];
        if (p >= nvals || ir_val(g, p)->kind != IR_VAL_PARAM)
            continue;
        int mark = g->nodes.n;
        int d = ir_grad_get(&c, p);
        if (d < 0)
            continue; /* the param does not affect the loss: no update */
        /* The sum of a shared param's contributions (a tied embedding)
         * is in the param's stage, where its update runs. */
        for (int k = mark; k < g->nodes.n && ir_attrs_find(&ir_val(g, p)->attrs, "_stage"); k++)
            if (!ir_attrs_find(&ir_nd(g, k)->attrs, "_stage"))
                ir_attrs_set_int(&ir_nd(g, k)->attrs, "_stage", ir_attr_int(&ir_val(g, p)->attrs, "_stage", 0));
        ir_value *dv = ir_val(g, d);
        if (dv->kind == IR_VAL_TEMP && dv->def >= first_backward && ir_grad_of(g, p) < 0 &&
            dv->name[0] == 't') {
            char *base = kl_xasprintf("%s.grad", ir_val(g, p)->name);
            ir_rename_value(g, d, ir_unique_name(g, base));
            free(base);
        }
        ir_grad_pair gp = {p, d};
        kl_vec_push(g->grads, gp);
    }
    for (int k = first_backward; k < g->nodes.n; k++)
        ir_nd(g, k)->phase = IR_PHASE_BACKWARD;
    for (int i = 0; i < nvals; i++)
        kl_vec_free(c.contrib[i]);
    free(c.contrib);
    free(c.wanted);
    return 0;
}
