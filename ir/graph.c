/* Building and editing the graph: declarations, nodes, use lists. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static void index_rebuild(ir_graph *g);

ir_graph *ir_graph_new(const char *name)
{
    ir_graph *g = kl_xcalloc(1, sizeof *g);
    g->name = kl_xstrdup(name);
    g->loss = -1;
    return g;
}

static void value_free(ir_value *v)
{
    free(v->name);
    kl_vec_free(v->uses);
    ir_attrs_free(&v->attrs);
    free(v);
}

static void node_free(ir_node *n)
{
    kl_vec_free(n->in);
    kl_vec_free(n->out);
    ir_attrs_free(&n->attrs);
    free(n->scope);
    free(n->pattern);
    free(n);
}

void ir_graph_free(ir_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->values.n; i++)
        value_free(g->values.v[i]);
    for (int i = 0; i < g->nodes.n; i++)
        node_free(g->nodes.v[i]);
    kl_vec_free(g->values);
    kl_vec_free(g->nodes);
    kl_vec_free(g->decls);
    for (int i = 0; i < g->reports.n; i++)
        free(g->reports.v[i].name);
    kl_vec_free(g->reports);
    for (int i = 0; i < g->outputs.n; i++)
        free(g->outputs.v[i].name);
    kl_vec_free(g->outputs);
    kl_vec_free(g->grads);
    for (int i = 0; i < g->passes.n; i++)
        free(g->passes.v[i]);
    kl_vec_free(g->passes);
    for (int i = 0; i < g->calls.n; i++)
        free(g->calls.v[i].scope);
    kl_vec_free(g->calls);
    ir_attrs_free(&g->train);
    free(g->name_slots);
    free(g->name);
    free(g->source);
    free(g);
}

ir_graph *ir_graph_clone(const ir_graph *g)
{
    ir_graph *c = ir_graph_new(g->name);
    c->source = g->source ? kl_xstrdup(g->source) : NULL;
    c->loss = g->loss;
    for (int i = 0; i < g->values.n; i++) {
        const ir_value *v = g->values.v[i];
        ir_value *w = kl_xmalloc(sizeof *w);
        *w = *v;
        w->name = kl_xstrdup(v->name);
        memset(&w->uses, 0, sizeof w->uses);
        for (int u = 0; u < v->uses.n; u++)
            kl_vec_push(w->uses, v->uses.v[u]);
        ir_attrs_copy(&w->attrs, &v->attrs);
        kl_vec_push(c->values, w);
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = g->nodes.v[i];
        ir_node *m = kl_xmalloc(sizeof *m);
        *m = *n;
        memset(&m->in, 0, sizeof m->in);
        memset(&m->out, 0, sizeof m->out);
        for (int k = 0; k < n->in.n; k++)
            kl_vec_push(m->in, n->in.v[k]);
        for (int k = 0; k < n->out.n; k++)
            kl_vec_push(m->out, n->out.v[k]);
        ir_attrs_copy(&m->attrs, &n->attrs);
        m->scope = n->scope ? kl_xstrdup(n->scope) : NULL;
        m->pattern = n->pattern ? kl_xstrdup(n->pattern) : NULL;
        kl_vec_push(c->nodes, m);
    }
    for (int i = 0; i < g->decls.n; i++)
        kl_vec_push(c->decls, g->decls.v[i]);
    for (int i = 0; i < g->reports.n; i++) {
        ir_report r = {kl_xstrdup(g->reports.v[i].name), g->reports.v[i].value, g->reports.v[i].lower_better};
        kl_vec_push(c->reports, r);
    }
    for (int i = 0; i < g->outputs.n; i++) {
        ir_report r = {kl_xstrdup(g->outputs.v[i].name), g->outputs.v[i].value, false};
        kl_vec_push(c->outputs, r);
    }
    for (int i = 0; i < g->grads.n; i++)
        kl_vec_push(c->grads, g->grads.v[i]);
    for (int i = 0; i < g->passes.n; i++)
        kl_vec_push(c->passes, kl_xstrdup(g->passes.v[i]));
    for (int i = 0; i < g->calls.n; i++) {
        ir_call k = {kl_xstrdup(g->calls.v[i].scope), g->calls.v[i].loc};
        kl_vec_push(c->calls, k);
    }
    ir_attrs_copy(&c->train, &g->train);
    index_rebuild(c);
    return c;
}

int ir_grad_of(const ir_graph *g, int p)
{
    for (int i = 0; i < g->grads.n; i++)
        if (g->grads.v[i].param == p)
            return g->grads.v[i].grad;
    return -1;
}

/* ---- the name index: lowering and the passes look names up for every
 * value they make, so a linear search made them quadratic ---- */

static unsigned name_hash(const char *s)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void index_put(ir_graph *g, int v)
{
    unsigned mask = (unsigned)g->name_cap - 1;
    unsigned i = name_hash(g->values.v[v]->name) & mask;
    while (g->name_slots[i] >= 0)
        i = (i + 1) & mask;
    g->name_slots[i] = v;
    g->name_used++;
}

/* Rebuilds the index from the values, at least twice as large as needed. */
static void index_rebuild(ir_graph *g)
{
    int cap = 64;
    while (cap < 2 * (g->values.n + 1))
        cap *= 2;
    free(g->name_slots);
    g->name_slots = kl_xmalloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++)
        g->name_slots[i] = -1;
    g->name_cap = cap;
    g->name_used = 0;
    for (int v = 0; v < g->values.n; v++) {
        index_put(g, v);
        g->values.v[v]->suffix_hint = 0; /* names may have been freed */
    }
}

static void index_add(ir_graph *g, int v)
{
    if (2 * (g->name_used + 1) > g->name_cap)
        index_rebuild(g);
    else
        index_put(g, v);
}

/* The slot holding name, or -1. */
static int index_slot(const ir_graph *g, const char *name)
{
    if (!g->name_cap)
        return -1;
    unsigned mask = (unsigned)g->name_cap - 1;
    for (unsigned i = name_hash(name) & mask;; i = (i + 1) & mask) {
        int v = g->name_slots[i];
        if (v == -1)
            return -1;
        if (v >= 0 && !strcmp(g->values.v[v]->name, name))
            return (int)i;
    }
}

int ir_find_value(const ir_graph *g, const char *name)
{
    int s = index_slot(g, name);
    return s < 0 ? -1 : g->name_slots[s];
}

/* name is being freed: when it is "BASE.k", the value named BASE may no
 * longer count on every suffix below its hint being in use. */
static void forget_suffix(ir_graph *g, const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || !dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1) || strlen(dot + 1) > 9)
        return;
    int k = atoi(dot + 1);
    char *base = kl_xstrndup(name, (size_t)(dot - name));
    int holder = ir_find_value(g, base);
    free(base);
    if (holder >= 0 && g->values.v[holder]->suffix_hint > k)
        g->values.v[holder]->suffix_hint = k;
}

void ir_rename_value(ir_graph *g, int v, char *name)
{
    ir_value *val = g->values.v[v];
    int s = index_slot(g, val->name);
    kl_check(s >= 0 && g->name_slots[s] == v);
    g->name_slots[s] = -2; /* stays counted in name_used until a rebuild */
    forget_suffix(g, val->name);
    free(val->name);
    val->name = name;
    index_add(g, v);
}

/* The smallest k for which "base.k" is free. The value named base keeps
 * where the last search ended, so naming the same thing n times costs n
 * probes, not n^2. */
char *ir_unique_name(ir_graph *g, const char *base)
{
    int holder = ir_find_value(g, base);
    if (holder < 0)
        return kl_xstrdup(base);
    ir_value *h = g->values.v[holder];
    for (int k = h->suffix_hint > 1 ? h->suffix_hint : 1;; k++) {
        char *s = kl_xasprintf("%s.%d", base, k);
        if (ir_find_value(g, s) < 0) {
            h->suffix_hint = k; /* the caller may not take it */
            return s;
        }
        free(s);
    }
}

static int new_value(ir_graph *g, ir_value_kind kind, char *name, const ir_type *t, kl_loc loc)
{
    ir_value *v = kl_xcalloc(1, sizeof *v);
    v->id = g->values.n;
    v->name = name;
    v->kind = kind;
    v->type = *t;
    v->def = v->def_out = -1;
    v->loc = loc;
    kl_vec_push(g->values, v);
    index_add(g, v->id);
    return v->id;
}

int ir_declare(ir_graph *g, ir_value_kind kind, const char *name, const ir_type *t, kl_loc loc)
{
    kl_check(kind != IR_VAL_TEMP);
    int id = new_value(g, kind, ir_unique_name(g, name), t, loc);
    kl_vec_push(g->decls, id);
    return id;
}

ir_node *ir_add_node(ir_graph *g, ir_op op, const int *in, int nin, const ir_attrs *attrs,
                     const ir_type *out_types, const char *const *out_names, kl_loc loc)
{
    ir_node *n = kl_xcalloc(1, sizeof *n);
    n->id = g->nodes.n;
    n->op = op;
    n->loc = loc;
    n->group = -1;
    if (attrs)
        ir_attrs_copy(&n->attrs, attrs);
    kl_vec_push(g->nodes, n);
    for (int i = 0; i < nin; i++) {
        kl_check(in[i] >= 0 && in[i] < g->values.n);
        kl_vec_push(n->in, in[i]);
        ir_use u = {n->id, i};
        kl_vec_push(g->values.v[in[i]]->uses, u);
    }
    for (int i = 0; i < ir_ops[op].nout; i++) {
        const char *base = out_names && out_names[i] ? out_names[i] : "t";
        char *name;
        if (out_names && out_names[i])
            name = ir_unique_name(g, base);
        else
            name = kl_xasprintf("t%d", g->values.n);
        if (ir_find_value(g, name) >= 0) {
            free(name);
            name = ir_unique_name(g, "t");
        }
        int v = new_value(g, IR_VAL_TEMP, name, &out_types[i], loc);
        g->values.v[v]->def = n->id;
        g->values.v[v]->def_out = i;
        kl_vec_push(n->out, v);
    }
    return n;
}

int ir_emit(ir_graph *g, ir_op op, const int *in, int nin, const ir_attrs *attrs, const char *name)
{
    ir_type types[8];
    ir_attrs a = {0};
    if (attrs)
        ir_attrs_copy(&a, attrs);
    kl_check(nin <= 8);
    for (int i = 0; i < nin; i++)
        types[i] = g->values.v[in[i]]->type;
    ir_infer inf = {.op = op, .nin = nin, .in = types, .attrs = &a};
    if (ir_infer_run(&inf))
        kl_panic("a pass built an ill-typed %s: %s", ir_op_name(op), inf.err);
    const char *names[4] = {name};
    ir_node *n = ir_add_node(g, op, in, nin, &a, inf.out, names, (kl_loc){0, 0});
    ir_attrs_free(&a);
    return n->out.n ? n->out.v[0] : -1;
}

int ir_emit1(ir_graph *g, ir_op op, int a, const char *name)
{
    return ir_emit(g, op, &a, 1, NULL, name);
}

int ir_emit2(ir_graph *g, ir_op op, int a, int b, const char *name)
{
    int in[2] = {a, b};
    return ir_emit(g, op, in, 2, NULL, name);
}

int ir_emit_const(ir_graph *g, double value, ir_dtype dt)
{
    ir_attrs a = {0};
    ir_attrs_set_float(&a, "value", value);
    ir_attrs_set_str(&a, "dtype", ir_dtype_name(dt));
    int v = ir_emit(g, IR_OP_CONST, NULL, 0, &a, NULL);
    ir_attrs_free(&a);
    return v;
}

static void drop_use(ir_graph *g, int v, int node, int operand)
{
    ir_value *val = g->values.v[v];
    for (int i = 0; i < val->uses.n; i++) {
        if (val->uses.v[i].node == node && val->uses.v[i].operand == operand) {
            val->uses.v[i] = val->uses.v[--val->uses.n];
            return;
        }
    }
    kl_panic("use of %s by node %d operand %d is missing", val->name, node, operand);
}

void ir_set_operand(ir_graph *g, ir_node *n, int i, int v)
{
    drop_use(g, n->in.v[i], n->id, i);
    n->in.v[i] = v;
    ir_use u = {n->id, i};
    kl_vec_push(g->values.v[v]->uses, u);
}

void ir_append_operand(ir_graph *g, ir_node *n, int v)
{
    kl_vec_push(n->in, v);
    ir_use u = {n->id, n->in.n - 1};
    kl_vec_push(g->values.v[v]->uses, u);
}

void ir_replace_uses(ir_graph *g, int from, int to)
{
    if (from == to)
        return;
    ir_value *f = g->values.v[from];
    while (f->uses.n) {
        ir_use u = f->uses.v[f->uses.n - 1];
        ir_set_operand(g, g->nodes.v[u.node], u.operand, to);
    }
}

bool ir_is_output(const ir_graph *g, int v)
{
    if (g->loss == v)
        return true;
    for (int i = 0; i < g->reports.n; i++)
        if (g->reports.v[i].value == v)
            return true;
    for (int i = 0; i < g->outputs.n; i++)
        if (g->outputs.v[i].value == v)
            return true;
    for (int i = 0; i < g->grads.n; i++)
        if (g->grads.v[i].grad == v)
            return true;
    return false;
}

bool ir_node_used(const ir_graph *g, const ir_node *n)
{
    for (int k = 0; k < n->out.n; k++)
        if (ir_val(g, n->out.v[k])->uses.n > 0 || ir_is_output(g, n->out.v[k]))
            return true;
    return false;
}

void ir_kill_node(ir_graph *g, ir_node *n)
{
    if (n->dead)
        return;
    for (int i = 0; i < n->out.n; i++)
        kl_check(g->values.v[n->out.v[i]]->uses.n == 0);
    for (int i = 0; i < n->in.n; i++)
        drop_use(g, n->in.v[i], n->id, i);
    n->dead = true;
}

bool ir_is_persistent(const ir_value *v)
{
    return v->kind == IR_VAL_PARAM || v->kind == IR_VAL_STATE;
}

void ir_graph_mark_pass(ir_graph *g, const char *pass)
{
    kl_vec_push(g->passes, kl_xstrdup(pass));
}

/* Renumbers nodes and values after kills; values of dead nodes go, and so
 * do declarations nobody uses only if they are temporaries (declared
 * inputs, params and state always stay). */
void ir_undeclare(ir_graph *g, int v)
{
    ir_value *x = ir_val(g, v);
    kl_check(x->def < 0 && x->kind != IR_VAL_TEMP && x->uses.n == 0);
    int k = 0;
    for (int i = 0; i < g->decls.n; i++)
        if (g->decls.v[i] != v)
            g->decls.v[k++] = g->decls.v[i];
    g->decls.n = k;
    x->kind = IR_VAL_TEMP;
}

void ir_compact(ir_graph *g)
{
    int *vmap = kl_xmalloc(sizeof(int) * (size_t)(g->values.n + 1));
    int *nmap = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    int nn = 0, nv = 0;
    for (int i = 0; i < g->nodes.n; i++)
        nmap[i] = g->nodes.v[i]->dead ? -1 : nn++;
    for (int i = 0; i < g->values.n; i++) {
        ir_value *v = g->values.v[i];
        /* A temporary without a node: a declaration ir_undeclare dropped. */
        bool keep = v->def < 0 ? v->kind != IR_VAL_TEMP : nmap[v->def] >= 0;
        vmap[i] = keep ? nv++ : -1;
    }
    /* values */
    int k = 0;
    for (int i = 0; i < g->values.n; i++) {
        ir_value *v = g->values.v[i];
        if (vmap[i] < 0) {
            value_free(v);
            continue;
        }
        v->id = vmap[i];
        if (v->def >= 0)
            v->def = nmap[v->def];
        int u2 = 0;
        for (int u = 0; u < v->uses.n; u++) {
            int nd = nmap[v->uses.v[u].node];
            kl_check(nd >= 0);
            v->uses.v[u2].node = nd;
            v->uses.v[u2++].operand = v->uses.v[u].operand;
        }
        v->uses.n = u2;
        g->values.v[k++] = v;
    }
    g->values.n = k;
    index_rebuild(g);
    /* nodes */
    k = 0;
    for (int i = 0; i < g->nodes.n; i++) {
        ir_node *n = g->nodes.v[i];
        if (nmap[i] < 0) {
            node_free(n);
            continue;
        }
        n->id = nmap[i];
        for (int j = 0; j < n->in.n; j++)
            n->in.v[j] = vmap[n->in.v[j]];
        for (int j = 0; j < n->out.n; j++)
            n->out.v[j] = vmap[n->out.v[j]];
        g->nodes.v[k++] = n;
    }
    g->nodes.n = k;
    for (int i = 0; i < g->decls.n; i++)
        g->decls.v[i] = vmap[g->decls.v[i]];
    if (g->loss >= 0)
        g->loss = vmap[g->loss];
    for (int i = 0; i < g->reports.n; i++)
        g->reports.v[i].value = vmap[g->reports.v[i].value];
    for (int i = 0; i < g->outputs.n; i++)
        g->outputs.v[i].value = vmap[g->outputs.v[i].value];
    for (int i = 0; i < g->grads.n; i++) {
        g->grads.v[i].param = vmap[g->grads.v[i].param];
        g->grads.v[i].grad = vmap[g->grads.v[i].grad];
        kl_check(g->grads.v[i].grad >= 0);
    }
    free(vmap);
    free(nmap);
}

/* ---- reordering ---- */

void ir_reorder(ir_graph *g, const int *order)
{
    int n = g->nodes.n;
    int *nmap = kl_xmalloc(sizeof(int) * (size_t)(n + 1));
    ir_node **old = kl_xmalloc(sizeof(ir_node *) * (size_t)(n + 1));
    memcpy(old, g->nodes.v, sizeof(ir_node *) * (size_t)n);
    for (int k = 0; k < n; k++) {
        nmap[order[k]] = k;
        g->nodes.v[k] = old[order[k]];
        g->nodes.v[k]->id = k;
    }
    for (int i = 0; i < g->values.n; i++) {
        ir_value *v = g->values.v[i];
        if (v->def >= 0)
            v->def = nmap[v->def];
        for (int u = 0; u < v->uses.n; u++)
            v->uses.v[u].node = nmap[v->uses.v[u].node];
    }
    free(nmap);
    free(old);
}

/* A binary min-heap of ints. */
typedef struct heap {
    int *v;
    int n;
} heap;

static void heap_push(heap *h, int x)
{
    int i = h->n++;
    h->v[i] = x;
    while (i > 0 && h->v[(i - 1) / 2] > h->v[i]) {
        int t = h->v[i];
        h->v[i] = h->v[(i - 1) / 2];
        h->v[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static int heap_pop(heap *h)
{
    int top = h->v[0];
    h->v[0] = h->v[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->v[l] < h->v[m])
            m = l;
        if (r < h->n && h->v[r] < h->v[m])
            m = r;
        if (m == i)
            break;
        int t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
    return top;
}

void ir_toposort_units(ir_graph *g, const int *unit)
{
    ir_toposort_eager(g, unit, NULL);
}

void ir_toposort_eager(ir_graph *g, const int *unit, const bool *eager)
{
    int n = g->nodes.n;
    /* The program order: phases in turn (startup, forward, backward,
     * update), the current order within each. A pass may append a node
     * anywhere; its phase places it. */
    static const ir_phase phase_order[] = {IR_PHASE_STARTUP, IR_PHASE_FORWARD, IR_PHASE_BACKWARD, IR_PHASE_UPDATE};
    int *pos = kl_xmalloc(sizeof(int) * (size_t)(n + 1)), next = 0;
    for (int o = 0; o < (int)KL_ARRAY_LEN(phase_order); o++)
        for (int j = 0; j < n; j++)
            if (g->nodes.v[j]->phase == phase_order[o])
                pos[j] = next++;
    /* A unit is named by its first node in program order. */
    int units = 0;
    for (int j = 0; j < n; j++)
        if (unit && unit[j] >= units)
            units = unit[j] + 1;
    int *unit_head = kl_xmalloc(sizeof(int) * (size_t)(units + 1));
    for (int u = 0; u < units; u++)
        unit_head[u] = -1;
    for (int j = 0; j < n; j++) {
        int u = unit ? unit[j] : -1;
        if (u >= 0 && !g->nodes.v[j]->dead && (unit_head[u] < 0 || pos[j] < pos[unit_head[u]]))
            unit_head[u] = j;
    }
    int *head = kl_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int j = 0; j < n; j++)
        head[j] = unit && unit[j] >= 0 && !g->nodes.v[j]->dead ? unit_head[unit[j]] : j;
    free(unit_head);
    int *indeg = kl_xcalloc((size_t)n + 1, sizeof(int));
    KL_VEC(int) *succ = kl_xcalloc((size_t)n + 1, sizeof *succ);
    KL_VEC(int) *members = kl_xcalloc((size_t)n + 1, sizeof *members);
#define EDGE(a, b)                                   \
    do {                                             \
        int _a = head[a], _b = head[b];              \
        if (_a != _b) {                              \
            kl_vec_push(succ[_a], _b);               \
            indeg[_b]++;                             \
        }                                            \
    } while (0)
    for (int j = 0; j < n; j++) {
        ir_node *nd = g->nodes.v[j];
        if (nd->dead)
            continue;
        for (int k = 0; k < nd->in.n; k++) {
            ir_value *v = g->values.v[nd->in.v[k]];
            if (v->def >= 0)
                EDGE(v->def, j);
        }
    }
    /* Persistent values written in place keep their accesses in program
     * order: a write after earlier reads and writes, a read after the
     * write before it. */
    int *acc = kl_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int vi = 0; vi < g->values.n; vi++) {
        ir_value *v = g->values.v[vi];
        if (!ir_is_persistent(v) || v->uses.n < 2)
            continue;
        int na = 0;
        bool written = false;
        for (int u = 0; u < v->uses.n; u++) {
            int r = v->uses.v[u].node;
            if (g->nodes.v[r]->dead)
                continue;
            written |= ir_op_mutates(g->nodes.v[r]->op, v->uses.v[u].operand);
            acc[na++] = u;
        }
        if (!written)
            continue;
        /* Accesses sorted by program position (insertion sort: few). */
        for (int a = 1; a < na; a++)
            for (int b = a; b > 0 && pos[v->uses.v[acc[b]].node] < pos[v->uses.v[acc[b - 1]].node]; b--) {
                int t = acc[b];
                acc[b] = acc[b - 1];
                acc[b - 1] = t;
            }
        int last_write = -1, first_read = 0;
        for (int a = 0; a < na; a++) {
            ir_use use = v->uses.v[acc[a]];
            bool w = ir_op_mutates(g->nodes.v[use.node]->op, use.operand);
            if (w) {
                for (int r = first_read; r < a; r++)
                    EDGE(v->uses.v[acc[r]].node, use.node);
                if (last_write >= 0)
                    EDGE(last_write, use.node);
                last_write = use.node;
                first_read = a + 1;
            } else if (last_write >= 0) {
                EDGE(last_write, use.node);
            }
        }
    }
    free(acc);
#undef EDGE
    /* Members of each unit in program order. */
    int *by_pos = kl_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int j = 0; j < n; j++)
        by_pos[pos[j]] = j;
    for (int q = 0; q < n; q++) {
        int j = by_pos[q];
        if (!g->nodes.v[j]->dead)
            kl_vec_push(members[head[j]], j);
    }
    heap h = {kl_xmalloc(sizeof(int) * (size_t)(n + 1)), 0};
    int *order = kl_xmalloc(sizeof(int) * (size_t)(n + 1)), on = 0;
    /* The heap orders ready units by the program position of their head,
     * eager units (key below n) before all others (key n + position). The
     * edges above use the program positions, never the keys, so eager
     * units move only as far as their operands and in-place orders allow. */
    int *by_key = kl_xmalloc(sizeof(int) * (size_t)(2 * n + 1));
#define KEY(j) (eager && eager[j] ? pos[j] : n + pos[j])
    for (int j = 0; j < n; j++)
        by_key[KEY(j)] = j;
    for (int j = 0; j < n; j++)
        if (!g->nodes.v[j]->dead && head[j] == j && indeg[j] == 0)
            heap_push(&h, KEY(j));
    while (h.n) {
        int u = by_key[heap_pop(&h)];
        for (int k = 0; k < members[u].n; k++)
            order[on++] = members[u].v[k];
        for (int k = 0; k < succ[u].n; k++)
            if (--indeg[succ[u].v[k]] == 0)
                heap_push(&h, KEY(succ[u].v[k]));
    }
#undef KEY
    free(by_key);
    int live = 0;
    for (int j = 0; j < n; j++)
        live += !g->nodes.v[j]->dead;
    if (on != live)
        kl_panic("the graph %s has a cycle between %s (%d of %d nodes ordered)", g->name,
                 unit ? "kernel groups" : "nodes", on, live);
    for (int j = 0; j < n; j++)
        if (g->nodes.v[j]->dead)
            order[on++] = j;
    ir_reorder(g, order);
    for (int j = 0; j < n; j++) {
        kl_vec_free(succ[j]);
        kl_vec_free(members[j]);
    }
    free(succ);
    free(members);
    free(indeg);
    free(h.v);
    free(order);
    free(head);
    free(pos);
    free(by_pos);
}

void ir_toposort(ir_graph *g)
{
    ir_toposort_units(g, NULL);
}
