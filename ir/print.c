/* The IR's text form (read back by ir/parse.c) and its dot export.
 *
 *   graph NAME {
 *     source "FILE"
 *     passes lower, autodiff
 *     train {
 *       KEY = VALUE
 *     }
 *     input %image : u8[128,1,28,28] @14:3
 *     param %dense.1.w : f32[784,256] {init = kaiming} @3:3
 *     %t4 : f32[128,256] = matmul(%x, %dense.1.w) @5:10 in dense.1
 *     backward %t9 : f32[128,256] = relu_grad(%t8, %t5)
 *     loss %loss
 *     report accuracy = %t40
 *     output pred = %t38
 *     grad %dense.1.w = %t52
 *   }
 *
 * A node line is: [phase] [results =] op(operands) [{attrs}] [@line:col]
 * [in scope] [group N PATTERN]. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static const char *phase_names[] = {"forward", "backward", "update", "startup"};

const char *ir_phase_name(ir_phase p)
{
    return phase_names[p];
}

static const char *decl_word(ir_value_kind k)
{
    switch (k) {
    case IR_VAL_INPUT: return "input";
    case IR_VAL_PARAM: return "param";
    case IR_VAL_STATE: return "state";
    default: kl_panic("a temporary value in the declarations");
    }
}

static void print_loc(kl_buf *b, kl_loc loc)
{
    if (loc.line > 0)
        kl_buf_printf(b, " @%d:%d", loc.line, loc.col);
}

void ir_print_node(kl_buf *b, const ir_graph *g, const ir_node *n)
{
    kl_buf_puts(b, "  ");
    if (n->phase != IR_PHASE_FORWARD)
        kl_buf_printf(b, "%s ", phase_names[n->phase]);
    for (int i = 0; i < n->out.n; i++) {
        const ir_value *v = ir_val(g, n->out.v[i]);
        kl_buf_printf(b, "%s%%%s : ", i ? ", " : "", v->name);
        ir_type_print(b, &v->type);
    }
    if (n->out.n)
        kl_buf_puts(b, " = ");
    kl_buf_printf(b, "%s(", ir_op_name(n->op));
    for (int i = 0; i < n->in.n; i++)
        kl_buf_printf(b, "%s%%%s", i ? ", " : "", ir_val(g, n->in.v[i])->name);
    kl_buf_putc(b, ')');
    if (n->attrs.n) {
        kl_buf_putc(b, ' ');
        ir_attrs_print(b, &n->attrs);
    }
    print_loc(b, n->loc);
    if (n->scope)
        kl_buf_printf(b, " in %s", n->scope);
    if (n->group >= 0)
        kl_buf_printf(b, " group %d %s", n->group, n->pattern ? n->pattern : "single");
    kl_buf_putc(b, '\n');
}

char *ir_print(const ir_graph *g)
{
    kl_buf b = {0};
    kl_buf_printf(&b, "graph %s {\n", g->name);
    if (g->source) {
        /* Always quoted: a path is not an identifier. */
        kl_buf_puts(&b, "  source ");
        ir_print_quoted(&b, g->source);
        kl_buf_putc(&b, '\n');
    }
    if (g->passes.n) {
        kl_buf_puts(&b, "  passes ");
        for (int i = 0; i < g->passes.n; i++)
            kl_buf_printf(&b, "%s%s", i ? ", " : "", g->passes.v[i]);
        kl_buf_putc(&b, '\n');
    }
    if (g->train.n) {
        kl_buf_puts(&b, "  train {\n");
        for (int i = 0; i < g->train.n; i++) {
            kl_buf_printf(&b, "    %s = ", g->train.v[i].key);
            ir_attr_val_print(&b, &g->train.v[i].val);
            kl_buf_putc(&b, '\n');
        }
        kl_buf_puts(&b, "  }\n");
    }
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        kl_buf_printf(&b, "  %s %%%s : ", decl_word(v->kind), v->name);
        ir_type_print(&b, &v->type);
        if (v->attrs.n) {
            kl_buf_putc(&b, ' ');
            ir_attrs_print(&b, &v->attrs);
        }
        print_loc(&b, v->loc);
        kl_buf_putc(&b, '\n');
    }
    for (int i = 0; i < g->nodes.n; i++)
        if (!ir_nd(g, i)->dead)
            ir_print_node(&b, g, ir_nd(g, i));
    if (g->loss >= 0)
        kl_buf_printf(&b, "  loss %%%s\n", ir_val(g, g->loss)->name);
    for (int i = 0; i < g->reports.n; i++)
        kl_buf_printf(&b, "  report %s = %%%s%s\n", g->reports.v[i].name,
                      ir_val(g, g->reports.v[i].value)->name, g->reports.v[i].lower_better ? " better = lower" : "");
    for (int i = 0; i < g->outputs.n; i++)
        kl_buf_printf(&b, "  output %s = %%%s\n", g->outputs.v[i].name, ir_val(g, g->outputs.v[i].value)->name);
    for (int i = 0; i < g->grads.n; i++)
        kl_buf_printf(&b, "  grad %%%s = %%%s\n", ir_val(g, g->grads.v[i].param)->name,
                      ir_val(g, g->grads.v[i].grad)->name);
    kl_buf_puts(&b, "}\n");
    return kl_buf_take(&b);
}

/* ---- dot ---- */

static void dot_escape(kl_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            kl_buf_putc(b, '\\');
        if (c < 32 || c == 127) /* a control byte from a .kir string: shown, not sent */
            kl_buf_printf(b, "\\\\x%02x", c);
        else
            kl_buf_putc(b, (char)c);
    }
}

/* Nodes are boxes (ops) and ellipses (declared values); edges carry the
 * value's name and type. Fusion groups become clusters. */
char *ir_print_dot(const ir_graph *g)
{
    kl_buf b = {0};
    kl_buf_puts(&b, "digraph \"");
    dot_escape(&b, g->name);
    kl_buf_puts(&b, "\" {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n"
                    "  edge [fontname=\"monospace\", fontsize=8];\n");
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        char *t = ir_type_str(&v->type);
        kl_buf_printf(&b, "  v%d [shape=ellipse, label=\"%s\\n", v->id, decl_word(v->kind));
        dot_escape(&b, v->name);
        kl_buf_printf(&b, "\\n%s\"%s];\n", t,
                      v->kind == IR_VAL_PARAM ? ", style=filled, fillcolor=\"#dde8ff\"" : "");
        free(t);
    }
    int maxgroup = -1;
    for (int i = 0; i < g->nodes.n; i++)
        if (!ir_nd(g, i)->dead && ir_nd(g, i)->group > maxgroup)
            maxgroup = ir_nd(g, i)->group;
    for (int grp = -1; grp <= maxgroup; grp++) {
        bool open = false;
        for (int i = 0; i < g->nodes.n; i++) {
            const ir_node *n = ir_nd(g, i);
            if (n->dead || n->group != grp)
                continue;
            if (grp >= 0 && !open) {
                kl_buf_printf(&b, "  subgraph cluster_%d {\n    label=\"kernel %d\"; style=rounded;\n", grp, grp);
                open = true;
            }
            const char *fill = n->phase == IR_PHASE_BACKWARD ? "#ffe8d0"
                               : n->phase == IR_PHASE_UPDATE ? "#e0f0d8"
                               : n->phase == IR_PHASE_STARTUP ? "#e0e8f8" : "#ffffff";
            kl_buf_printf(&b, "  %s n%d [shape=box, style=filled, fillcolor=\"%s\", label=\"%s",
                          grp >= 0 ? "  " : "", n->id, fill, ir_op_name(n->op));
            if (n->scope) {
                kl_buf_puts(&b, "\\n");
                dot_escape(&b, n->scope);
            }
            kl_buf_puts(&b, "\"];\n");
        }
        if (open)
            kl_buf_puts(&b, "  }\n");
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            const ir_value *v = ir_val(g, n->in.v[k]);
            char *t = ir_type_str(&v->type);
            if (v->def >= 0)
                kl_buf_printf(&b, "  n%d -> n%d [label=\"", v->def, n->id);
            else
                kl_buf_printf(&b, "  v%d -> n%d [label=\"", v->id, n->id);
            dot_escape(&b, v->name);
            kl_buf_printf(&b, "\\n%s\"];\n", t);
            free(t);
        }
    }
    if (g->loss >= 0) {
        const ir_value *l = ir_val(g, g->loss);
        kl_buf_printf(&b, "  loss [shape=doublecircle, label=\"loss\"];\n  %c%d -> loss;\n",
                      l->def >= 0 ? 'n' : 'v', l->def >= 0 ? l->def : l->id);
    }
    kl_buf_puts(&b, "}\n");
    return kl_buf_take(&b);
}
