/* In-place results: which kernel buffers a result may be written over
 * (the kernel-level check of loads and stores, then the pairs of a fusion
 * group's kernel), and how a kernel uses each buffer. The plan builder
 * (plan.c) asks while it lowers; see memplan.h. */
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "memplan.h"

/* ---- in-place results: the kernel-level check ---- */

static bool expr_eq(const kir_expr *a, const kir_expr *b)
{
    if (a == b)
        return true;
    if (!a || !b)
        return false;
    if (a->kind != b->kind || a->type != b->type || a->op != b->op || a->var != b->var || a->buf != b->buf ||
        a->i != b->i || memcmp(&a->f, &b->f, sizeof a->f))
        return false;
    return expr_eq(a->a, b->a) && expr_eq(a->b, b->b) && expr_eq(a->c, b->c);
}

typedef struct access_scan {
    int in, out;
    const kir_expr *index;    /* the index every access uses */
    const kir_stmt *body_of;  /* the loop whose body holds every access */
    int last_load, first_store; /* positions in that body */
    int64_t iterations;       /* of the loops around (and including) it */
    bool bad;
    const kir_stmt *stack[32]; /* the LOOP and IF statements around */
    int depth;
} access_scan;

static void note_access(access_scan *s, const kir_expr *index, int pos, bool store)
{
    const kir_stmt *parent = s->depth ? s->stack[s->depth - 1] : NULL;
    if (!parent || parent->kind != KS_LOOP) {
        s->bad = true;
        return;
    }
    if (!s->body_of) {
        s->body_of = parent;
        s->index = index;
        s->iterations = 1;
        for (int d = 0; d < s->depth; d++) {
            if (s->stack[d]->kind != KS_LOOP) {
                s->bad = true;
                return;
            }
            s->iterations *= s->stack[d]->extent;
        }
    } else if (s->body_of != parent || !expr_eq(s->index, index)) {
        s->bad = true;
        return;
    }
    if (!store)
        s->last_load = pos;
    else if (s->first_store < 0)
        s->first_store = pos;
}

static void scan_expr(access_scan *s, const kir_expr *e, int pos)
{
    if (!e || s->bad)
        return;
    if (e->kind == KE_LOAD && e->buf == s->out) {
        s->bad = true;
        return;
    }
    if (e->kind == KE_LOAD && e->buf == s->in)
        note_access(s, e->a, pos, false);
    scan_expr(s, e->a, pos);
    scan_expr(s, e->b, pos);
    scan_expr(s, e->c, pos);
}

static void scan_stmts(access_scan *s, const kir_stmt *st)
{
    for (int pos = 0; st && !s->bad; st = st->next, pos++) {
        switch (st->kind) {
        case KS_LOOP:
        case KS_IF:
            if (st->kind == KS_IF)
                scan_expr(s, st->a, pos);
            if (s->depth == (int)KL_ARRAY_LEN(s->stack)) {
                s->bad = true;
                return;
            }
            s->stack[s->depth++] = st;
            scan_stmts(s, st->body);
            s->depth--;
            break;
        case KS_STORE:
        case KS_ADDTO:
            scan_expr(s, st->a, pos);
            scan_expr(s, st->b, pos);
            if (st->buf == s->in || (st->buf == s->out && st->kind == KS_ADDTO))
                s->bad = true;
            else if (st->buf == s->out)
                note_access(s, st->a, pos, true);
            break;
        default:
            scan_expr(s, st->a, pos);
            break;
        }
    }
}

/* True when a statement assigns (KS_SET) a variable the index reads: the
 * same expression would then name other elements at other places. */
static bool index_reassigned(const kir_stmt *st, const kir_expr *index)
{
    for (; st; st = st->next)
        if ((st->kind == KS_SET && kir_expr_uses_var(index, st->var)) ||
            ((st->kind == KS_LOOP || st->kind == KS_IF) && index_reassigned(st->body, index)))
            return true;
    return false;
}

/* The one top-level statement of the kernel that touches in or stores
 * out, when out is read only by top-level statements after it (a later
 * nest of the kernel: the column sums of codegen/k_colsum.c read back the
 * result their elementwise nest stored). NULL when there is none such. */
static int touches(const kir_stmt *st, int buf);
static bool loads_anywhere(const kir_stmt *st, int buf);

/* A store to buf in st's subtree. */
static bool stores_in(const kir_stmt *st, int buf)
{
    if ((st->kind == KS_STORE || st->kind == KS_ADDTO) && st->buf == buf)
        return true;
    for (const kir_stmt *c = (st->kind == KS_LOOP || st->kind == KS_IF) ? st->body : NULL; c; c = c->next)
        if (stores_in(c, buf))
            return true;
    return false;
}

static const kir_stmt *only_nest_of(const kir_kernel *k, int in, int out)
{
    const kir_stmt *nest = NULL;
    for (const kir_stmt *st = k->body; st; st = st->next) {
        kir_stmt one = *st;
        one.next = NULL;
        bool mine = touches(st, in) > 0 || stores_in(st, out);
        if (mine && nest)
            return NULL;
        if (mine)
            nest = st;
        else if (!nest && loads_anywhere(&one, out))
            return NULL;
    }
    return nest;
}

bool plan_kernel_inplace_ok(const kir_kernel *k, int in, int out)
{
    const kir_buf *bi = &k->bufs[in], *bo = &k->bufs[out];
    if (in == out || !bi->read || bi->written || !bo->written || bi->numel != bo->numel || bi->dtype != bo->dtype)
        return false;
    const kir_stmt *nest = k->body;
    kir_stmt one;
    if (bo->read) {
        /* Read back only after the nest that writes it, which alone reads in. */
        const kir_stmt *only = only_nest_of(k, in, out);
        if (!only)
            return false;
        one = *only;
        one.next = NULL;
        nest = &one;
    }
    access_scan s = {.in = in, .out = out, .last_load = -1, .first_store = -1};
    scan_stmts(&s, nest);
    /* One nest visiting as many points as out has elements, each storing
     * once at an index: a correct kernel writes every element, so the
     * index is a bijection and each element of in is read by the one
     * iteration that then overwrites it. */
    return !s.bad && s.body_of && s.first_store >= 0 && s.last_load <= s.first_store && s.iterations == bo->numel &&
           !index_reassigned(k->body, s.index);
}

/* ---- how a kernel uses a buffer ---- */

static bool expr_loads(const kir_expr *e, int buf)
{
    if (!e)
        return false;
    if (e->kind == KE_LOAD && e->buf == buf)
        return true;
    return expr_loads(e->a, buf) || expr_loads(e->b, buf) || expr_loads(e->c, buf);
}

static bool stmt_touches_itself(const kir_stmt *st, int buf)
{
    return expr_loads(st->a, buf) || expr_loads(st->b, buf) ||
           ((st->kind == KS_STORE || st->kind == KS_ADDTO) && st->buf == buf);
}

/* Statements touching buf in st's subtree (st alone, not its successors). */
static int touches(const kir_stmt *st, int buf)
{
    int n = stmt_touches_itself(st, buf);
    for (const kir_stmt *c = (st->kind == KS_LOOP || st->kind == KS_IF) ? st->body : NULL; c; c = c->next)
        n += touches(c, buf);
    return n;
}

static bool loads_anywhere(const kir_stmt *st, int buf)
{
    for (; st; st = st->next)
        if (expr_loads(st->a, buf) || expr_loads(st->b, buf) || ((st->kind == KS_LOOP || st->kind == KS_IF) && loads_anywhere(st->body, buf)))
            return true;
    return false;
}

unsigned plan_kernel_arg_use(const kir_kernel *k, int buf)
{
    const kir_buf *b = &k->bufs[buf];
    unsigned use = (b->read ? KL_ARG_READ : 0) | (b->written ? KL_ARG_WRITE : 0);
    if (!b->read || !b->written)
        return use;
    if (b->written_first)
        return use | KL_ARG_WRITE_FIRST;
    /* A kernel that only adds into buf (no loads) after storing to it
     * first (zeroing what it then sums into, outside any condition). */
    if (!loads_anywhere(k->body, buf)) {
        const kir_stmt *st = k->body;
        for (;;) {
            while (st && !touches(st, buf))
                st = st->next;
            if (!st || st->kind != KS_LOOP)
                break;
            st = st->body;
        }
        if (st && st->kind == KS_STORE && st->buf == buf)
            return use | KL_ARG_WRITE_FIRST;
    }
    /* Or the first top-level statement touching buf is a nest of loops (no
     * condition) holding one store to it, as many iterations as it has
     * elements, and nothing else touching it. */
    const kir_stmt *top = k->body;
    while (top && !touches(top, buf))
        top = top->next;
    if (!top || touches(top, buf) != 1)
        return use;
    int64_t iters = 1;
    const kir_stmt *st = top;
    while (st->kind == KS_LOOP) {
        iters *= st->extent;
        const kir_stmt *c = st->body;
        while (c && !touches(c, buf))
            c = c->next;
        if (!c)
            return use;
        st = c;
    }
    if (st->kind == KS_STORE && st->buf == buf && iters == b->numel && !expr_loads(st->a, buf) && !expr_loads(st->b, buf))
        use |= KL_ARG_WRITE_FIRST;
    return use;
}

/* ---- in-place results: which pairs ---- */

static bool pinned_value(const kl_plan *p, int v)
{
    int b = v >= 0 && v < p->nvalues ? p->value_buf[v] : -1;
    return b >= 0 && p->buffers.v[b].pinned;
}

/* True when nothing outside the group's fusion group reads v (a view of v
 * is a reader: its node belongs to no group). The group's kernel is its
 * last step, so v is dead after it. */
static bool dies_in_group(const cg_group *grp, int v)
{
    const ir_graph *g = grp->g;
    int gid = ir_nd(g, grp->nodes[0])->group;
    const ir_value *val = ir_val(g, v);
    for (int u = 0; u < val->uses.n; u++) {
        int node = val->uses.v[u].node;
        if (!cg_in_group(grp, node) && (gid < 0 || ir_nd(g, node)->group != gid))
            return false;
    }
    return true;
}

int plan_inplace_pairs(const kl_plan *p, const cg_group *grp, const kir_kernel *k, int pairs[][2], int max)
{
    const ir_graph *g = grp->g;
    bool taken[IR_KERNEL_MAX_BUFS] = {0};
    kl_check(k->nbufs <= IR_KERNEL_MAX_BUFS);
    int n = 0;
    for (int o = 0; o < k->nbufs && n < max; o++) {
        int ov = k->bufs[o].value;
        /* (a result read back is checked by plan_kernel_inplace_ok) */
        if (ov < 0 || !k->bufs[o].written || pinned_value(p, ov))
            continue;
        /* Back along operand 0 of in-place ops computed in this kernel. */
        int v = ov, hops = 0;
        while (v >= 0) {
            const ir_value *val = ir_val(g, v);
            if (val->def < 0 || !cg_in_group(grp, val->def))
                break;
            const ir_node *d = ir_nd(g, val->def);
            v = (ir_ops[d->op].flags & IR_F_INPLACE) && d->out.n == 1 && d->in.n > 0 ? d->in.v[0] : -1;
            hops++;
        }
        if (v < 0 || hops == 0)
            continue;
        const ir_value *src = ir_val(g, v);
        int sb = p->value_buf[v];
        if (src->kind != IR_VAL_TEMP || src->def < 0 || sb < 0 || pinned_value(p, v))
            continue;
        const kl_buffer *buf = &p->buffers.v[sb];
        if (buf->region != KL_REGION_ARENA && !(buf->region == KL_REGION_VIEW && buf->inplace))
            continue;
        if (!dies_in_group(grp, v))
            continue;
        int i;
        for (i = 0; i < k->nbufs && k->bufs[i].value != v; i++)
            ;
        if (i == k->nbufs || taken[i] || !plan_kernel_inplace_ok(k, i, o))
            continue;
        taken[i] = true;
        pairs[n][0] = i;
        pairs[n][1] = o;
        n++;
    }
    return n;
}
