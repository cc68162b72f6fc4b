/* The verifier: runs between passes in tests and debug builds, so a pass
 * that breaks the graph is caught where it breaks. It checks SSA (one
 * definition per value, definitions before uses in node order), the use
 * lists, the declarations, and every node's types against its shape rule. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct verifier {
    const ir_graph *g;
    int errors;
} verifier;

static void bad(verifier *vf, const char *fmt, ...) KL_PRINTF(2, 3);
static void bad(verifier *vf, const char *fmt, ...)
{
    FILE *out = kl_diag_stream();
    va_list ap;
    if (vf->errors++ >= 20)
        return;
    kl_fprintf_escaped(out, "kiln: verifier: graph %s: ", vf->g->name);
    va_start(ap, fmt);
    kl_vfprintf_escaped(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
}

static void check_values(verifier *vf)
{
    const ir_graph *g = vf->g;
    for (int i = 0; i < g->values.n; i++) {
        const ir_value *v = ir_val(g, i);
        if (v->id != i)
            bad(vf, "value %s has id %d at index %d", v->name, v->id, i);
        /* The name index finds each value by its name: names are unique
         * and the index is current. */
        if (ir_find_value(g, v->name) != i)
            bad(vf, "two values are named %%%s, or the name index misses it", v->name);
        if (!ir_type_in_range(&v->type))
            bad(vf, "%%%s has a type out of range (sizes 1 to 2^40, at most 2^50 elements)", v->name);
        if (v->kind == IR_VAL_TEMP) {
            if (v->def < 0 || v->def >= g->nodes.n) {
                bad(vf, "temporary %%%s has no defining node", v->name);
                continue;
            }
            const ir_node *n = ir_nd(g, v->def);
            if (n->dead || v->def_out < 0 || v->def_out >= n->out.n || n->out.v[v->def_out] != i)
                bad(vf, "%%%s: its defining node %d does not list it", v->name, v->def);
        } else {
            int seen = 0;
            for (int d = 0; d < g->decls.n; d++)
                seen += g->decls.v[d] == i;
            if (seen != 1 || v->def >= 0)
                bad(vf, "declared value %%%s is declared %d times", v->name, seen);
        }
        for (int u = 0; u < v->uses.n; u++) {
            ir_use use = v->uses.v[u];
            if (use.node < 0 || use.node >= g->nodes.n || ir_nd(g, use.node)->dead ||
                use.operand >= ir_nd(g, use.node)->in.n ||
                ir_nd(g, use.node)->in.v[use.operand] != i)
                bad(vf, "%%%s has a stale use (node %d, operand %d)", v->name, use.node, use.operand);
        }
    }
    for (int d = 0; d < g->decls.n; d++) {
        int id = g->decls.v[d];
        if (id < 0 || id >= g->values.n || ir_val(g, id)->kind == IR_VAL_TEMP)
            bad(vf, "declaration %d is not a declared value", d);
    }
}

/* used[i] bit k: operand k (< 64) of node i is in its value's use list;
 * one pass over the use lists, where asking each list for each operand
 * took a constant's thousands of uses times its thousands of readers. */
static uint64_t *listed_uses(const ir_graph *g)
{
    uint64_t *used = kl_xcalloc((size_t)g->nodes.n + 1, sizeof *used);
    for (int v = 0; v < g->values.n; v++) {
        const ir_value *val = ir_val(g, v);
        for (int u = 0; u < val->uses.n; u++) {
            ir_use use = val->uses.v[u];
            if (use.node >= 0 && use.node < g->nodes.n && use.operand >= 0 && use.operand < 64 &&
                use.operand < ir_nd(g, use.node)->in.n && ir_nd(g, use.node)->in.v[use.operand] == v)
                used[use.node] |= 1ull << use.operand;
        }
    }
    return used;
}

static void check_nodes(verifier *vf)
{
    const ir_graph *g = vf->g;
    bool *defined = kl_xcalloc((size_t)g->values.n + 1, 1);
    uint64_t *used = listed_uses(g);
    for (int d = 0; d < g->decls.n; d++)
        if (g->decls.v[d] >= 0 && g->decls.v[d] < g->values.n)
            defined[g->decls.v[d]] = true;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        const char *op = ir_op_name(n->op);
        if (n->id != i)
            bad(vf, "node %d (%s) has id %d", i, op, n->id);
        if (n->dead)
            continue;
        ir_type in[64];
        bool ok = n->in.n <= 64;
        for (int k = 0; ok && k < n->in.n; k++) {
            int v = n->in.v[k];
            if (v < 0 || v >= g->values.n) {
                bad(vf, "node %d (%s): operand %d is out of range", i, op, k);
                ok = false;
                break;
            }
            if (!defined[v])
                bad(vf, "node %d (%s) reads %%%s before it is defined", i, op, ir_val(g, v)->name);
            if (!((used[i] >> k) & 1))
                bad(vf, "node %d (%s): %%%s misses the use of operand %d", i, op, ir_val(g, v)->name, k);
            if (ir_op_mutates(n->op, k) && !ir_is_persistent(ir_val(g, v)))
                bad(vf, "node %d (%s) writes %%%s in place, which is not persistent", i, op,
                    ir_val(g, v)->name);
            in[k] = ir_val(g, v)->type;
        }
        if (n->out.n != ir_ops[n->op].nout)
            bad(vf, "node %d (%s) has %d results, the op has %d", i, op, n->out.n, ir_ops[n->op].nout);
        for (int k = 0; k < n->out.n; k++) {
            int v = n->out.v[k];
            if (v < 0 || v >= g->values.n || ir_val(g, v)->def != i) {
                bad(vf, "node %d (%s): result %d is not defined by it", i, op, k);
                ok = false;
            } else if (defined[v]) {
                bad(vf, "%%%s is defined twice", ir_val(g, v)->name);
            } else {
                defined[v] = true;
            }
        }
        if (!ok || n->out.n != ir_ops[n->op].nout)
            continue;
        ir_attrs attrs;
        ir_attrs_copy(&attrs, &n->attrs);
        ir_infer inf = {.op = n->op, .nin = n->in.n, .in = in, .attrs = &attrs};
        if (ir_infer_run(&inf)) {
            bad(vf, "node %d (%s): %s", i, op, inf.err);
        } else {
            for (int k = 0; k < n->out.n; k++) {
                const ir_value *v = ir_val(g, n->out.v[k]);
                if (!ir_type_eq(&v->type, &inf.out[k])) {
                    char *want = ir_type_str(&inf.out[k]), *have = ir_type_str(&v->type);
                    bad(vf, "node %d (%s): %%%s is %s but the rule gives %s", i, op, v->name, have, want);
                    free(want);
                    free(have);
                }
            }
        }
        ir_attrs_free(&attrs);
    }
    free(defined);
    free(used);
}

static void check_outputs(verifier *vf)
{
    const ir_graph *g = vf->g;
    if (g->loss >= 0) {
        if (g->loss >= g->values.n)
            bad(vf, "the loss is out of range");
        else if (ir_val(g, g->loss)->type.rank != 0 || !ir_dtype_is_float(ir_val(g, g->loss)->type.dtype))
            bad(vf, "the loss %%%s is not a float scalar", ir_val(g, g->loss)->name);
    }
    for (int i = 0; i < g->reports.n; i++)
        if (g->reports.v[i].value < 0 || g->reports.v[i].value >= g->values.n)
            bad(vf, "report %s is out of range", g->reports.v[i].name);
    for (int i = 0; i < g->outputs.n; i++)
        if (g->outputs.v[i].value < 0 || g->outputs.v[i].value >= g->values.n)
            bad(vf, "output %s is out of range", g->outputs.v[i].name);
    for (int i = 0; i < g->grads.n; i++) {
        ir_grad_pair gp = g->grads.v[i];
        if (gp.param < 0 || gp.param >= g->values.n || gp.grad < 0 || gp.grad >= g->values.n) {
            bad(vf, "gradient %d is out of range", i);
            continue;
        }
        const ir_value *p = ir_val(g, gp.param), *d = ir_val(g, gp.grad);
        if (p->kind != IR_VAL_PARAM)
            bad(vf, "gradient of %%%s, which is not a param", p->name);
        if (ir_type_numel(&p->type) != ir_type_numel(&d->type))
            bad(vf, "gradient %%%s of %%%s has another shape", d->name, p->name);
    }
}

int ir_verify(const ir_graph *g)
{
    verifier vf = {g, 0};
    check_values(&vf);
    check_nodes(&vf);
    check_outputs(&vf);
    if (vf.errors > 20)
        fprintf(kl_diag_stream(), "kiln: verifier: %d more problems\n", vf.errors - 20);
    return vf.errors ? -1 : 0;
}
