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

/* ---- in-place results: row by row ---- */

/* What the row check knows of the kernel's variables: each loop's extent
 * (its variable runs over [0, extent)) and each LET's value. */
typedef struct var_facts {
    const kir_kernel *k;
    int64_t *extent;   /* 0 when not a loop variable */
    const kir_expr **let;
} var_facts;

static void collect_vars(const kir_stmt *st, var_facts *f)
{
    for (; st; st = st->next) {
        if (st->kind == KS_LOOP)
            f->extent[st->var] = st->extent;
        else if (st->kind == KS_LET)
            f->let[st->var] = st->a;
        if (st->kind == KS_LOOP || st->kind == KS_IF)
            collect_vars(st->body, f);
    }
}

/* Bounds of integer expression e into [*lo, *hi] (INT64_MIN / INT64_MAX
 * when unbounded): constants, loop variables, LETs never reassigned, and
 * the MAX / MIN that clamp a loaded label into a row. */
static void int_range(const kir_expr *e, const var_facts *f, int depth, int64_t *lo, int64_t *hi)
{
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    if (!e || e->type != KT_I64 || depth > 16)
        return;
    if (e->kind == KE_CONST) {
        *lo = *hi = e->i;
    } else if (e->kind == KE_VAR && f->extent[e->var] > 0) {
        *lo = 0;
        *hi = f->extent[e->var] - 1;
    } else if (e->kind == KE_VAR && f->let[e->var] && f->k->var_acc[e->var] == -1) {
        int_range(f->let[e->var], f, depth + 1, lo, hi);
    } else if (e->kind == KE_BIN && (e->op == KB_MAX || e->op == KB_MIN)) {
        int64_t alo, ahi, blo, bhi;
        int_range(e->a, f, depth + 1, &alo, &ahi);
        int_range(e->b, f, depth + 1, &blo, &bhi);
        bool max = e->op == KB_MAX;
        *lo = max ? (alo > blo ? alo : blo) : (alo < blo ? alo : blo);
        *hi = max ? (ahi > bhi ? ahi : bhi) : (ahi < bhi ? ahi : bhi);
    }
}

static int var_uses(const kir_expr *e, int var)
{
    if (!e)
        return 0;
    return (e->kind == KE_VAR && e->var == var) + var_uses(e->a, var) + var_uses(e->b, var) + var_uses(e->c, var);
}

/* True when a, an index of a load, is row index x with its one use of
 * column variable col replaced by an expression within [0, columns). */
static bool same_row(const kir_expr *a, const kir_expr *x, int col, int64_t columns, const var_facts *f)
{
    if (!a || !x)
        return a == x;
    if (x->kind == KE_VAR && x->var == col) {
        int64_t lo, hi;
        int_range(a, f, 0, &lo, &hi);
        return lo >= 0 && hi < columns;
    }
    if (a->kind != x->kind || a->type != x->type || a->op != x->op || a->var != x->var || a->buf != x->buf ||
        a->i != x->i || memcmp(&a->f, &x->f, sizeof a->f))
        return false;
    return same_row(a->a, x->a, col, columns, f) && same_row(a->b, x->b, col, columns, f) &&
           same_row(a->c, x->c, col, columns, f);
}

/* Whether every load of buf in e (statement list st when list) is in the
 * row of x. */
static bool loads_in_row(const kir_expr *e, int buf, const kir_expr *x, int col, int64_t columns, const var_facts *f)
{
    if (!e)
        return true;
    if (e->kind == KE_LOAD && e->buf == buf && !same_row(e->a, x, col, columns, f))
        return false;
    return loads_in_row(e->a, buf, x, col, columns, f) && loads_in_row(e->b, buf, x, col, columns, f) &&
           loads_in_row(e->c, buf, x, col, columns, f);
}

static bool stmts_load_in_row(const kir_stmt *st, int buf, const kir_expr *x, int col, int64_t columns,
                              const var_facts *f)
{
    for (; st; st = st->next) {
        if (!loads_in_row(st->a, buf, x, col, columns, f) || !loads_in_row(st->b, buf, x, col, columns, f))
            return false;
        if ((st->kind == KS_LOOP || st->kind == KS_IF) && !stmts_load_in_row(st->body, buf, x, col, columns, f))
            return false;
    }
    return true;
}

/* Whether every load of buf in e is at index x. */
static bool loads_at(const kir_expr *e, int buf, const kir_expr *x)
{
    if (!e)
        return true;
    if (e->kind == KE_LOAD && e->buf == buf && !expr_eq(e->a, x))
        return false;
    return loads_at(e->a, buf, x) && loads_at(e->b, buf, x) && loads_at(e->c, buf, x);
}

/* A kernel that reads each row of in whole before it writes the same row
 * of out (the softmax cross-entropy gradient over its logits: the row's
 * maximum and sum of exponentials, then the gradient row): one top-level
 * loop over rows (variable r) touches in and out; in its body, one loop
 * over columns (variable c), its columns times the rows as many as out
 * has elements, stores out once, directly in its body, at index x(r, c),
 * and loads in there only at x, before the store; the statements before
 * it load in only at x(r, e), e within [0, columns), and the last of them
 * that loads in is, or is followed by, a reduction loop; nothing after it
 * touches either. A correct kernel writes every element, so x is a
 * bijection and x(r, e) is written by the same row's iteration (r, e),
 * after every load of row r. On the GPU the row's threads all pass that
 * reduction (a block-level combine) before any of them stores. */
static bool row_inplace_ok(const kir_kernel *k, int in, int out)
{
    if (k->host_body || k->bufs[out].read)
        return false;
    const kir_stmt *rows = NULL;
    for (const kir_stmt *st = k->body; st; st = st->next) {
        if (!touches(st, in) && !stores_in(st, out))
            continue;
        if (rows || st->kind != KS_LOOP)
            return false;
        rows = st;
    }
    if (!rows)
        return false;
    const kir_stmt *cols = NULL, *store = NULL;
    int stores = 0, last_load = -1, last_red = -1, pos = 0, cols_pos = -1;
    for (const kir_stmt *st = rows->body; st; st = st->next, pos++) {
        bool loads = touches(st, in) > 0;
        if (cols && (loads || stores_in(st, out)))
            return false;
        if (!stores_in(st, out)) {
            if (loads)
                last_load = pos;
            if (st->kind == KS_LOOP && st->loop == KL_RED)
                last_red = pos;
            continue;
        }
        if (st->kind != KS_LOOP)
            return false;
        cols = st;
        cols_pos = pos;
    }
    if (!cols || (last_load >= 0 && last_red < last_load) || rows->extent * cols->extent != k->bufs[out].numel)
        return false;
    /* The column loop: one store to out, loads of in at its index before it. */
    int store_pos = -1, last_in = -1;
    pos = 0;
    for (const kir_stmt *st = cols->body; st; st = st->next, pos++) {
        if (st->kind == KS_LOOP || st->kind == KS_IF) {
            if (touches(st, in) || stores_in(st, out))
                return false;
            continue;
        }
        if ((st->kind == KS_STORE || st->kind == KS_ADDTO) && st->buf == out) {
            if (st->kind != KS_STORE)
                return false;
            store = st;
            store_pos = pos;
            stores++;
        }
        if (touches(st, in))
            last_in = pos;
    }
    if (stores != 1 || last_in > store_pos || var_uses(store->a, cols->var) != 1 || index_reassigned(k->body, store->a))
        return false;
    var_facts f = {k, kl_xcalloc((size_t)k->nvars + 1, sizeof(int64_t)), kl_xcalloc((size_t)k->nvars + 1, sizeof(kir_expr *))};
    collect_vars(k->body, &f);
    bool ok = true;
    for (const kir_stmt *st = cols->body; st && ok; st = st->next)
        ok = loads_at(st->a, in, store->a) && loads_at(st->b, in, store->a);
    pos = 0;
    for (const kir_stmt *st = rows->body; st && ok && pos < cols_pos; st = st->next, pos++) {
        kir_stmt one = *st;
        one.next = NULL;
        ok = stmts_load_in_row(&one, in, store->a, cols->var, cols->extent, &f);
    }
    free(f.extent);
    free(f.let);
    return ok;
}

/* The one-nest form of plan_kernel_inplace_ok: every access in one body. */
static bool nest_inplace_ok(const kir_kernel *k, int in, int out)
{
    const kir_buf *bo = &k->bufs[out];
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

bool plan_kernel_inplace_ok(const kir_kernel *k, int in, int out)
{
    const kir_buf *bi = &k->bufs[in], *bo = &k->bufs[out];
    if (in == out || !bi->read || bi->written || !bo->written || bi->numel != bo->numel || bi->dtype != bo->dtype)
        return false;
    return nest_inplace_ok(k, in, out) || row_inplace_ok(k, in, out);
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

/* True when nothing outside the group's fusion group reads v, nor any
 * view of v (a view's node belongs to no group: the values it names must
 * die here too). The group's kernel is its last step, so v is dead after
 * it. */
static bool dies_in_group(const cg_group *grp, int v, int depth)
{
    const ir_graph *g = grp->g;
    int gid = ir_nd(g, grp->nodes[0])->group;
    const ir_value *val = ir_val(g, v);
    for (int u = 0; u < val->uses.n; u++) {
        int node = val->uses.v[u].node;
        const ir_node *n = ir_nd(g, node);
        if (cg_in_group(grp, node) || (gid >= 0 && n->group == gid))
            continue;
        if (!ir_op_is_view(n->op) || n->out.n != 1 || depth > 8 || !dies_in_group(grp, n->out.v[0], depth + 1))
            return false;
    }
    return true;
}

/* The operand whose buffer an op's result may take, or -1: operand 0 of
 * the ops the table marks IR_F_INPLACE and of casts (a chain back to the
 * dtype it left; the kernel check compares the buffers' dtypes), and the
 * logits of the softmax cross-entropy gradient (written row by row over
 * them: row_inplace_ok). */
static int inplace_operand(const ir_node *d)
{
    if (d->out.n != 1)
        return -1;
    if ((ir_ops[d->op].flags & IR_F_INPLACE) || d->op == IR_OP_CAST)
        return d->in.n > 0 ? 0 : -1;
    return d->op == IR_OP_CROSS_ENTROPY_GRAD ? 1 : -1;
}

/* Whether the memory of v's buffer may be written over here: an arena
 * temporary, an in-place result, or a view (a reshape) of one, with v and
 * every value on the way to that memory unpinned temporaries. */
static bool reusable_memory(const kl_plan *p, const ir_graph *g, int v)
{
    for (int hops = 0; hops < 8; hops++) {
        const ir_value *val = ir_val(g, v);
        int b = p->value_buf[v];
        if (val->kind != IR_VAL_TEMP || val->def < 0 || b < 0 || pinned_value(p, v))
            return false;
        const kl_buffer *buf = &p->buffers.v[b];
        if (buf->region == KL_REGION_ARENA || (buf->region == KL_REGION_VIEW && buf->inplace))
            return true;
        const ir_node *d = ir_nd(g, val->def);
        if (buf->region != KL_REGION_VIEW || !ir_op_is_view(d->op) || d->in.n < 1)
            return false;
        v = d->in.v[0];
    }
    return false;
}

/* True when v and every value v is a view of die in grp's group. */
static bool memory_dies_in_group(const cg_group *grp, int v)
{
    const ir_graph *g = grp->g;
    for (int hops = 0; hops < 8; hops++) {
        if (!dies_in_group(grp, v, 0))
            return false;
        const ir_value *val = ir_val(g, v);
        if (val->def < 0 || !ir_op_is_view(ir_nd(g, val->def)->op))
            return true;
        v = ir_nd(g, val->def)->in.v[0];
    }
    return false;
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
        /* Back along the in-place operands of ops computed in this kernel. */
        int v = ov, hops = 0;
        while (v >= 0) {
            const ir_value *val = ir_val(g, v);
            if (val->def < 0 || !cg_in_group(grp, val->def))
                break;
            const ir_node *d = ir_nd(g, val->def);
            int operand = inplace_operand(d);
            v = operand >= 0 ? d->in.v[operand] : -1;
            hops++;
        }
        if (v < 0 || hops == 0 || !reusable_memory(p, g, v) || !memory_dies_in_group(grp, v))
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
