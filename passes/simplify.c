/* simplify: dead code, common subexpressions, algebraic identities.
 *
 * requires: any graph
 * provides: no node whose results nobody needs (the loss, reports,
 *           gradients and in-place writes are needed); one node per
 *           distinct computation; x * 1, x / 1, x + 0, x - 0, reshapes and
 *           broadcasts to the same shape, and casts to the same dtype
 *           replaced by x.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static bool has_effect(const ir_node *n)
{
    for (int k = 0; k < n->in.n; k++)
        if (ir_op_mutates(n->op, k))
            return true;
    return false;
}

static bool is_const(const ir_graph *g, int v, double x)
{
    const ir_value *val = ir_val(g, v);
    if (val->def < 0)
        return false;
    const ir_node *n = ir_nd(g, val->def);
    return n->op == IR_OP_CONST && ir_attr_float(&n->attrs, "value", 0) == x;
}

/* The value a node computes trivially (its operand), or -1. */
static int identity_of(const ir_graph *g, const ir_node *n)
{
    const ir_type *out = &ir_val(g, n->out.v[0])->type;
    switch (n->op) {
    case IR_OP_RESHAPE:
    case IR_OP_BROADCAST:
    case IR_OP_CAST:
        return ir_type_eq(&ir_val(g, n->in.v[0])->type, out) ? n->in.v[0] : -1;
    case IR_OP_MUL:
    case IR_OP_DIV:
    case IR_OP_ADD:
    case IR_OP_SUB: {
        double unit = n->op == IR_OP_MUL || n->op == IR_OP_DIV ? 1.0 : 0.0;
        if (is_const(g, n->in.v[1], unit) && ir_type_eq(&ir_val(g, n->in.v[0])->type, out))
            return n->in.v[0];
        if ((n->op == IR_OP_MUL || n->op == IR_OP_ADD) && is_const(g, n->in.v[0], unit) &&
            ir_type_eq(&ir_val(g, n->in.v[1])->type, out))
            return n->in.v[1];
        return -1;
    }
    default:
        return -1;
    }
}

static bool same_attrs(const ir_attrs *a, const ir_attrs *b)
{
    kl_buf x = {0}, y = {0};
    ir_attrs_print(&x, a);
    ir_attrs_print(&y, b);
    bool same = (!x.s && !y.s) || (x.s && y.s && !strcmp(x.s, y.s));
    kl_buf_free(&x);
    kl_buf_free(&y);
    return same;
}

static bool same_computation(const ir_node *a, const ir_node *b)
{
    if (a->op != b->op || a->in.n != b->in.n || a->phase != b->phase)
        return false;
    for (int k = 0; k < a->in.n; k++)
        if (a->in.v[k] != b->in.v[k])
            return false;
    return same_attrs(&a->attrs, &b->attrs);
}

/* What same_computation compares first: op, phase and operands. */
static unsigned computation_hash(const ir_node *n)
{
    unsigned h = 2166136261u;
    h = (h ^ (unsigned)n->op) * 16777619u;
    h = (h ^ (unsigned)n->phase) * 16777619u;
    for (int k = 0; k < n->in.n; k++)
        h = (h ^ (unsigned)n->in.v[k]) * 16777619u;
    return h;
}

int pass_simplify(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    /* Identities and common subexpressions, in order. Earlier live nodes
     * are chained by hash (first[bucket], then next[node], in node order),
     * so each node is compared only with those of its op and operands, and
     * the first equal one wins, as a scan from the start would find. A
     * node's operands are final when it is reached: replacing a result
     * touches only its readers, which come after it. */
    int cap = 64;
    while (cap < 2 * g->nodes.n)
        cap *= 2;
    int *first = kl_xmalloc(sizeof(int) * (size_t)cap), *tail = kl_xmalloc(sizeof(int) * (size_t)cap);
    int *next = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    for (int b = 0; b < cap; b++)
        first[b] = tail[b] = -1;
    for (int i = 0; i < g->nodes.n; i++) {
        ir_node *n = ir_nd(g, i);
        next[i] = -1;
        if (n->dead)
            continue;
        unsigned bucket = computation_hash(n) & (unsigned)(cap - 1);
        if (n->out.n == 1 && !has_effect(n) && n->op != IR_OP_DROPOUT) {
            int same = identity_of(g, n);
            if (same >= 0 && !ir_is_output(g, n->out.v[0])) {
                ir_replace_uses(g, n->out.v[0], same);
            } else {
                for (int j = first[bucket]; j >= 0; j = next[j]) {
                    ir_node *m = ir_nd(g, j);
                    if (same_computation(m, n) && !ir_is_output(g, n->out.v[0])) {
                        ir_replace_uses(g, n->out.v[0], m->out.v[0]);
                        break;
                    }
                }
            }
        }
        if (tail[bucket] >= 0)
            next[tail[bucket]] = i;
        else
            first[bucket] = i;
        tail[bucket] = i;
    }
    free(first);
    free(tail);
    free(next);
    /* Dead code, consumers before producers. */
    for (int i = g->nodes.n - 1; i >= 0; i--) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || has_effect(n))
            continue;
        if (!ir_node_used(g, n))
            ir_kill_node(g, n);
    }
    ir_compact(g);
    return 0;
}
