/* The stage of every node of a pipelined graph, after any pass: what
 * fusion keeps apart (a kernel never spans two stages) and what the
 * training executable runs on each rank (driver/train_pipeline.c).
 *
 * requires: pipeline (forward nodes' _stage), autodiff (its nodes carry
 *           their forward node's _stage)
 * provides: pass_pipeline_assign: per node, its stage (-1: dead); the
 *           rules, in order: the node's _stage; an update or backward
 *           node that reads or writes a param, or a param's state
 *           ("<param>.<what>": its moments, accumulator, 16-bit copy),
 *           is in the param's stage (its first, _stage); a forward node a
 *           later pass made (casts, reshapes) is in the stage of its
 *           first reader; any other node is in the stage of its first
 *           operand's producer, else stage 0. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The stage of the param that value v is, or whose state it is; -1. */
static int param_stage(const ir_graph *g, int v)
{
    const ir_value *pv = ir_val(g, v);
    if (pv->kind == IR_VAL_PARAM)
        return ir_attrs_find(&pv->attrs, "_stage") ? (int)ir_attr_int(&pv->attrs, "_stage", 0) : -1;
    if (pv->kind != IR_VAL_STATE)
        return -1;
    char *name = kl_xstrdup(pv->name);
    int s = -1;
    for (char *dot = strrchr(name, '.'); dot && s < 0; dot = strrchr(name, '.')) {
        *dot = 0;
        int p = ir_find_value(g, name);
        if (p >= 0 && ir_val(g, p)->kind == IR_VAL_PARAM)
            s = param_stage(g, p);
    }
    free(name);
    return s;
}

static int clamp(int s, int P) { return s < 0 ? -1 : s >= P ? P - 1 : s; }

int pass_pipeline_assign(const ir_graph *g, int *stage)
{
    int P = pass_pipeline_count(g);
    if (P < 2)
        return 0;
    int n = g->nodes.n;
    for (int i = 0; i < n; i++) {
        const ir_node *nd = ir_nd(g, i);
        stage[i] = -1;
        if (nd->dead)
            continue;
        if (ir_attrs_find(&nd->attrs, "_stage")) {
            stage[i] = clamp((int)ir_attr_int(&nd->attrs, "_stage", 0), P);
            continue;
        }
        if (nd->phase == IR_PHASE_FORWARD || nd->phase == IR_PHASE_STARTUP)
            continue;
        for (int k = 0; k < nd->in.n && stage[i] < 0; k++)
            stage[i] = clamp(param_stage(g, nd->in.v[k]), P);
        for (int k = 0; k < nd->out.n && stage[i] < 0; k++)
            stage[i] = clamp(param_stage(g, nd->out.v[k]), P);
    }
    /* Forward nodes of later passes: their first reader's stage (readers
     * come later in the graph's order, so a reverse sweep sees them). */
    for (int i = n - 1; i >= 0; i--) {
        const ir_node *nd = ir_nd(g, i);
        if (nd->dead || stage[i] >= 0 || (nd->phase != IR_PHASE_FORWARD && nd->phase != IR_PHASE_STARTUP))
            continue;
        int best = -1;
        for (int k = 0; k < nd->out.n; k++) {
            const ir_value *v = ir_val(g, nd->out.v[k]);
            for (int u = 0; u < v->uses.n; u++) {
                int r = v->uses.v[u].node, s = r > i ? stage[r] : -1;
                if (s >= 0 && ir_nd(g, r)->phase == IR_PHASE_FORWARD && (best < 0 || s < best))
                    best = s;
            }
        }
        stage[i] = best;
    }
    for (int i = 0; i < n; i++) {
        const ir_node *nd = ir_nd(g, i);
        for (int k = 0; k < nd->in.n && stage[i] < 0 && !nd->dead; k++) {
            int d = ir_val(g, nd->in.v[k])->def;
            stage[i] = d >= 0 && d < i ? stage[d] : -1;
        }
        if (stage[i] < 0 && !nd->dead)
            stage[i] = 0;
    }
    return P;
}

void pass_pipeline_mark(ir_graph *g, int from, int stage)
{
    for (int k = from; stage >= 0 && k < g->nodes.n; k++)
        ir_attrs_set_int(&ir_nd(g, k)->attrs, "_stage", stage);
}
