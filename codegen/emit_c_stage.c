/* The C printer's staged rows (see emit_c.h): which f16 and bf16 loads and
 * stores of a leaf loop widen and narrow whole rows with F16C around it,
 * rows of planes and strided planes around the loop outside it, chunked
 * rows, the prefetch of rows one iteration ahead, and the staging code
 * before and after a loop. */
#include <stdlib.h>
#include <string.h>

#include "emit_c.h"

/* A loop without inner loops, conditions or atomics, whose iterations are
 * independent (no KS_SET carries a value from one to the next): it may be
 * vectorised. */
bool kir_c_is_leaf_loop(const kir_stmt *s)
{
    for (const kir_stmt *c = s->body; c; c = c->next)
        if (c->kind == KS_LOOP || c->kind == KS_IF || c->kind == KS_ADDTO || c->kind == KS_SET)
            return false;
    return true;
}

static bool same_expr(const kir_expr *a, const kir_expr *b)
{
    if (!a || !b)
        return a == b;
    return a->kind == b->kind && a->type == b->type && a->op == b->op && a->var == b->var && a->buf == b->buf &&
           (a->f == b->f || (a->f != a->f && b->f != b->f)) && a->i == b->i && same_expr(a->a, b->a) &&
           same_expr(a->b, b->b) && same_expr(a->c, b->c);
}

/* The value of var v when a let of leaf loop s's body declares it. */
static const kir_expr *body_let(const kir_stmt *s, int v)
{
    for (const kir_stmt *c = s->body; c; c = c->next)
        if (c->kind == KS_LET && c->var == v)
            return c->a;
    return NULL;
}

/* Whether e reads leaf loop s's variable, directly or through its body's
 * lets, or reads memory (an index that loads is left alone). */
static bool varies(const kir_stmt *s, const kir_expr *e)
{
    if (!e)
        return false;
    if (e->kind == KE_LOAD)
        return true;
    if (e->kind == KE_VAR) {
        const kir_expr *v = body_let(s, e->var);
        return e->var == s->var || (v && varies(s, v));
    }
    return varies(s, e->a) || varies(s, e->b) || varies(s, e->c);
}

/* e is leaf loop s's variable plus terms that do not vary with it
 * (integer adds only, through the body's lets). */
static bool unit_stride(const kir_stmt *s, const kir_expr *e)
{
    if (e->kind == KE_VAR) {
        const kir_expr *v = body_let(s, e->var);
        return e->var == s->var || (v && unit_stride(s, v));
    }
    if (e->kind != KE_BIN || e->op != KB_ADD || e->type != KT_I64)
        return false;
    return (unit_stride(s, e->a) && !varies(s, e->b)) || (unit_stride(s, e->b) && !varies(s, e->a));
}

/* An index a row can stand for: base + the loop's variable, the base
 * loading nothing. */
static bool row_index(const kir_stmt *loop, const kir_expr *index)
{
    return unit_stride(loop, index) && !kir_expr_loads(index);
}

static void count_expr(const kir_expr *e, int buf, int *loads)
{
    if (!e)
        return;
    *loads += e->kind == KE_LOAD && e->buf == buf;
    count_expr(e->a, buf, loads);
    count_expr(e->b, buf, loads);
    count_expr(e->c, buf, loads);
}

/* Counts the loop body's loads (*loads) and stores (*stores) of buffer buf. */
static void count_uses(const kir_stmt *loop, int buf, int *loads, int *stores)
{
    *loads = *stores = 0;
    for (const kir_stmt *c = loop->body; c; c = c->next) {
        count_expr(c->a, buf, loads);
        count_expr(c->b, buf, loads);
        *stores += (c->kind == KS_STORE || c->kind == KS_ADDTO) && c->buf == buf;
    }
}

static int add_row(staging *st, const kir_expr *index, int buf, const kir_stmt *store)
{
    for (int r = 0; r < st->nrows; r++)
        if (!store && !st->store[r] && st->buf[r] == buf && same_expr(st->index[r], index))
            return r;
    if (st->nrows == STAGE_ROWS || (st->nrows + 1) * st->extent > STAGE_FLOATS)
        return -1;
    int r = st->nrows++;
    st->index[r] = index;
    st->buf[r] = buf;
    st->store[r] = store;
    snprintf(st->name[r], sizeof st->name[r], "kl_row%d", r);
    return r;
}

/* The f16 loads in e that a row can stand for. */
static void stage_loads(const printer *p, const kir_stmt *loop, const kir_expr *e, staging *st)
{
    if (!e)
        return;
    ir_dtype dt = e->kind == KE_LOAD ? p->e.k->bufs[e->buf].dtype : IR_NONE;
    if (e->kind == KE_LOAD && (dt == IR_F16 || (dt == IR_BF16 && st->bf16)) && row_index(loop, e->a)) {
        int loads, stores;
        count_uses(loop, e->buf, &loads, &stores);
        int r = stores == 0 && st->nloads < STAGE_LOADS ? add_row(st, e->a, e->buf, NULL) : -1;
        if (r >= 0) {
            st->loads[st->nloads] = e;
            st->load_row[st->nloads] = r;
            st->load_name[st->nloads++] = st->name[r];
        }
        return;
    }
    stage_loads(p, loop, e->a, st);
    /* The right side of && and || may be a load its left side guards:
     * a row would read every element. */
    if (!(e->kind == KE_BIN && (e->op == KB_AND || e->op == KB_OR)))
        stage_loads(p, loop, e->b, st);
    stage_loads(p, loop, e->c, st);
}

/* The first index at which e loads a buffer that shares memory with
 * another into *index, false when a second one differs (or the dtypes
 * do). */
static bool aliased_loads(const kir_kernel *k, const kir_expr *e, const kir_expr **index, ir_dtype *dt)
{
    if (!e)
        return true;
    if (e->kind == KE_LOAD && k->bufs[e->buf].aliased) {
        if (*index && (!same_expr(*index, e->a) || *dt != k->bufs[e->buf].dtype))
            return false;
        *index = e->a;
        *dt = k->bufs[e->buf].dtype;
    }
    return aliased_loads(k, e->a, index, dt) && aliased_loads(k, e->b, index, dt) && aliased_loads(k, e->c, index, dt);
}

/* Whether leaf loop s touches the buffers that share memory (an
 * in-place result and its operand) only at one index, a row's: then
 * each element is read and written by its own iteration alone, and
 * reading its row before the loop and writing after changes nothing. */
static bool aliased_in_step(const kir_kernel *k, const kir_stmt *s)
{
    const kir_expr *index = NULL;
    ir_dtype dt = IR_NONE;
    for (const kir_stmt *c = s->body; c; c = c->next) {
        if (!aliased_loads(k, c->a, &index, &dt) || !aliased_loads(k, c->b, &index, &dt))
            return false;
        if ((c->kind == KS_STORE || c->kind == KS_ADDTO) && k->bufs[c->buf].aliased) {
            if (index && (!same_expr(index, c->a) || dt != k->bufs[c->buf].dtype))
                return false;
            index = c->a;
            dt = k->bufs[c->buf].dtype;
        }
    }
    return !index || row_index(s, index);
}

/* The store of leaf loop s that writes 16-bit store c's value, before
 * its rounding, at c's index into an fp32 buffer that s stores only
 * there and that shares memory with no other (the fp32 master weight that
 * an optimizer's update writes beside its f16 copy), or NULL. Narrowing
 * that buffer's elements after the loop gives c's bits without a row. */
static const kir_stmt *f32_twin(const kir_kernel *k, const kir_stmt *s, const kir_stmt *c)
{
    const kir_expr *value = kir_strip_rounding(k->bufs[c->buf].dtype, c->b);
    for (const kir_stmt *t = s->body; t; t = t->next) {
        if (t->kind != KS_STORE || k->bufs[t->buf].dtype != IR_F32 || k->bufs[t->buf].aliased ||
            !same_expr(t->a, c->a) || !same_expr(t->b, value))
            continue;
        int loads, stores;
        count_uses(s, t->buf, &loads, &stores);
        if (stores == 1)
            return t;
    }
    return NULL;
}

/* The rows to stage around leaf loop s (bf16: bf16 ones too); false when
 * there are none. */
bool kir_c_plan_staging(const printer *p, const kir_stmt *s, bool chunked, bool bf16, staging *st)
{
    const kir_kernel *k = p->e.k;
    memset(st, 0, sizeof *st);
    st->bf16 = bf16;
    st->var = s->var;
    st->chunked = chunked;
    st->extent = chunked && s->extent > STAGE_CHUNK ? STAGE_CHUNK : s->extent;
    if (chunked)
        snprintf(st->offset, sizeof st->offset, " - kl_c");
    if (k->compute != KT_F32 || s->extent < STAGE_MIN || st->extent > STAGE_FLOATS)
        return false;
    if (!aliased_in_step(k, s))
        return false;
    for (const kir_stmt *c = s->body; c; c = c->next) {
        ir_dtype dt = c->kind == KS_STORE ? k->bufs[c->buf].dtype : IR_NONE;
        bool trunc = dt == IR_BF16 && bf16 && kir_print_store_truncates(&p->e, dt, c->b);
        if ((dt == IR_F16 || (dt == IR_BF16 && bf16)) && row_index(s, c->a) &&
            (kir_print_store_narrows(&p->e, dt, c->b) || trunc)) {
            int loads, stores;
            count_uses(s, c->buf, &loads, &stores);
            int r = loads == 0 && stores == 1 ? add_row(st, c->a, c->buf, c) : -1;
            if (r >= 0) {
                st->trunc[r] = trunc;
                st->twin[r] = trunc ? NULL : f32_twin(k, s, c);
            }
        }
        if (c->kind == KS_STORE)
            stage_loads(p, s, c->b, st);
        else
            stage_loads(p, s, c->a, st);
    }
    return st->nrows > 0;
}


/* The value of var v when a let of loop a's or loop b's body declares it. */
static const kir_expr *let_in(const kir_stmt *a, const kir_stmt *b, int v)
{
    const kir_expr *e = body_let(a, v);
    return e ? e : body_let(b, v);
}

/* Whether e reads var v, directly or through the lets of loops a and b. */
static bool reads_var(const kir_stmt *a, const kir_stmt *b, const kir_expr *e, int v)
{
    if (!e)
        return false;
    if (e->kind == KE_VAR) {
        const kir_expr *l = let_in(a, b, e->var);
        return e->var == v || (l && reads_var(a, b, l, v));
    }
    return reads_var(a, b, e->a, v) || reads_var(a, b, e->b, v) || reads_var(a, b, e->c, v);
}

/* *coef: how much integer expression e grows when var v grows by one
 * (through the lets of loops a and b); false unless e is affine in v:
 * v only under sums, differences and products by constants. */
static bool coef_of(const kir_stmt *a, const kir_stmt *b, const kir_expr *e, int v, int64_t *coef)
{
    *coef = 0;
    if (!reads_var(a, b, e, v))
        return true;
    if (e->kind == KE_VAR)
        return e->var == v ? (*coef = 1, true) : coef_of(a, b, let_in(a, b, e->var), v, coef);
    if (e->kind != KE_BIN || e->type != KT_I64)
        return false;
    int64_t x, y;
    if (!coef_of(a, b, e->a, v, &x) || !coef_of(a, b, e->b, v, &y))
        return false;
    if (e->op == KB_ADD || e->op == KB_SUB) {
        *coef = e->op == KB_ADD ? x + y : x - y;
        return true;
    }
    if (e->op != KB_MUL)
        return false;
    if (e->b->kind == KE_CONST) {
        *coef = x * e->b->i;
        return true;
    }
    if (e->a->kind == KE_CONST) {
        *coef = e->a->i * y;
        return true;
    }
    return false;
}

/* The leaf loop of loop s when s's body is lets that load nothing and
 * that loop, else NULL. */
static const kir_stmt *plane_leaf(const kir_stmt *s)
{
    const kir_stmt *leaf = NULL;
    for (const kir_stmt *c = s->body; c; c = c->next) {
        if (c->kind == KS_LET && !leaf && !kir_expr_loads(c->a))
            continue;
        if (c->kind == KS_LOOP && !leaf && !c->next && kir_c_is_leaf_loop(c))
            leaf = c;
        else
            return NULL;
    }
    return leaf;
}

/* bf16 planes for leaf loops shorter than this: a short row's bf16
 * store or load is a vector and a scalar tail (the first convolution's
 * 28-wide rows: bf16 forward 2.46 -> 1.30 ms, weight gradient 3.01 ->
 * 2.54); longer ones GCC vectorises as well as the row conversions. */
#define BF16_PLANE_LEAF 64

/* Rows for the leaf loop of serial loop s staged once around s: when s's
 * body is lets that load nothing and that leaf loop, and every row of
 * the leaf is, over s's iterations, one run (its index grows by the
 * leaf's extent when s's variable grows by one). The first convolution's
 * 28-wide rows of a 28 x 28 plane: one conversion call a plane (bf16
 * rows too, for short leaves). The leaf's conditions for rows
 * (plan_staging) make each element belong to one iteration of the two
 * loops, so the order does not matter. */
bool kir_c_plan_plane(const printer *p, const kir_stmt *s, staging *st, const kir_stmt **leaf_out)
{
    const kir_stmt *leaf = plane_leaf(s);
    if (!leaf || leaf->extent < STAGE_MIN || s->extent < 2 ||
        !kir_c_plan_staging(p, leaf, false, leaf->extent < BF16_PLANE_LEAF, st) || !kir_c_drop_unread_rows(p, leaf, st) ||
        st->nrows * leaf->extent * s->extent > STAGE_FLOATS)
        return false;
    for (int r = 0; r < st->nrows; r++) {
        int64_t step;
        if (!coef_of(s, leaf, st->index[r], s->var, &step) || step != leaf->extent)
            return false;
    }
    st->outer = s;
    *leaf_out = leaf;
    st->extent = leaf->extent * s->extent;
    snprintf(st->offset, sizeof st->offset, " + %s * %lldLL", p->e.k->var_names[s->var], (long long)leaf->extent);
    return true;
}

/* The value of integer expression e with every variable 0 (through
 * the lets of loops a and b); false unless e is sums, differences and
 * products of constants and variables. */
static bool eval_at_zero(const kir_stmt *a, const kir_stmt *b, const kir_expr *e, int64_t *value)
{
    if (e->kind == KE_CONST) {
        *value = e->i;
        return true;
    }
    if (e->kind == KE_VAR) {
        const kir_expr *l = let_in(a, b, e->var);
        *value = 0;
        return !l || eval_at_zero(a, b, l, value);
    }
    int64_t x, y;
    if (e->kind != KE_BIN || e->type != KT_I64 || !eval_at_zero(a, b, e->a, &x) || !eval_at_zero(a, b, e->b, &y))
        return false;
    *value = e->op == KB_ADD ? x + y : e->op == KB_SUB ? x - y : x * y;
    return e->op == KB_ADD || e->op == KB_SUB || e->op == KB_MUL;
}

/* *d = e - f when that is a constant (affine with no variable left, over
 * loops a and b and every variable around them). */
static bool const_diff(const kir_kernel *k, const kir_stmt *a, const kir_stmt *b, const kir_expr *e,
                       const kir_expr *f, int64_t *d)
{
    kir_expr diff = {.kind = KE_BIN, .type = KT_I64, .op = KB_SUB, .a = (kir_expr *)e, .b = (kir_expr *)f};
    for (int v = 0; v < k->nvars; v++) {
        int64_t c;
        if (!coef_of(a, b, &diff, v, &c) || c)
            return false;
    }
    return eval_at_zero(a, b, &diff, d);
}

/* The strided-plane row of buf for an index with steps a (leaf) and b
 * (the loop around), a load's row (store NULL) or a store's (with
 * trunc): one of the same kind whose index differs from it by a
 * constant (*d), else a new one (*d = 0); -1 when the rows are full.
 * Widens the row's range of offsets to take *d in. */
static int strided_row(const kir_kernel *k, const kir_stmt *s, const kir_stmt *leaf, staging *st, const kir_expr *index,
                       int buf, const kir_stmt *store, int64_t a, int64_t b, bool trunc, int64_t *d)
{
    int r = 0;
    while (r < st->nrows && !(!st->store[r] == !store && st->buf[r] == buf && st->a[r] == a && st->b[r] == b &&
                              st->trunc[r] == trunc && const_diff(k, s, leaf, index, st->index[r], d)))
        r++;
    if (r == st->nrows) {
        if (r == STAGE_ROWS)
            return -1;
        st->nrows++;
        st->index[r] = index;
        st->buf[r] = buf;
        st->store[r] = store;
        st->a[r] = a;
        st->b[r] = b;
        st->trunc[r] = trunc;
        snprintf(st->name[r], sizeof st->name[r], "kl_row%d", r);
        *d = 0;
    }
    st->delta[r] = *d < st->delta[r] ? *d : st->delta[r];
    st->dmax[r] = *d > st->dmax[r] ? *d : st->dmax[r];
    return r;
}

/* The 16-bit loads of e in leaf loop `leaf` of serial loop s that
 * plan_strided stages; false when one of them cannot be. */
static bool strided_loads(const printer *p, const kir_stmt *s, const kir_stmt *leaf, const kir_expr *e, staging *st)
{
    const kir_kernel *k = p->e.k;
    if (!e)
        return true;
    if (e->kind == KE_LOAD && (k->bufs[e->buf].dtype == IR_F16 || k->bufs[e->buf].dtype == IR_BF16) &&
        !k->bufs[e->buf].written) {
        int64_t a, b, d = 0;
        if (kir_expr_loads(e->a) || !coef_of(s, leaf, e->a, leaf->var, &a) || !coef_of(s, leaf, e->a, s->var, &b) ||
            a < 0 || b < 0 || st->nloads == STAGE_LOADS)
            return false;
        int r = strided_row(k, s, leaf, st, e->a, e->buf, NULL, a, b, false, &d);
        if (r < 0)
            return false;
        st->strided |= a != 1 || leaf->extent < STAGE_MIN;
        st->loads[st->nloads] = e;
        st->load_row[st->nloads] = r;
        st->load_d[st->nloads] = d;
        st->load_name[st->nloads++] = st->name[r];
        return true;
    }
    if (!strided_loads(p, s, leaf, e->a, st))
        return false;
    /* The right side of && and || may be a load its left side guards:
     * its run might leave the buffer. */
    if (!(e->kind == KE_BIN && (e->op == KB_AND || e->op == KB_OR)) && !strided_loads(p, s, leaf, e->b, st))
        return false;
    return strided_loads(p, s, leaf, e->c, st);
}

/* Strided planes: the 16-bit loads of the leaf loop of serial loop s (a
 * body as for plan_plane), when one of them steps by more than one
 * element or the leaf is too short for rows, staged once around s: a
 * row for the run of elements that the loads of one buffer with the same
 * steps, their indices a constant apart, read over both loops (indices
 * affine in both variables, growing with them), read at a * leaf + b * s
 * there; and the leaf's 16-bit stores that write a plane (one run, every
 * element once: a = 1, b = the leaf's extent) as rows narrowed after.
 * Max pooling's windows, 7 outputs a row: bf16 2 x 2 pooling of 14 x 14
 * planes 1.89 -> 0.70 ms. Loads of buffers the kernel does not write
 * only (a run holds elements the loops skip). Every 16-bit load gets a
 * row, and every f16 store that narrows one, or nothing is staged this
 * way. */
bool kir_c_plan_strided(const printer *p, const kir_stmt *s, staging *st, const kir_stmt **leaf_out)
{
    const kir_kernel *k = p->e.k;
    const kir_stmt *leaf = plane_leaf(s);
    if (!leaf || s->extent < 2 || k->compute != KT_F32 || !aliased_in_step(k, leaf))
        return false;
    memset(st, 0, sizeof *st);
    st->var = leaf->var;
    st->extent = leaf->extent;
    st->outer = s;
    for (const kir_stmt *c = leaf->body; c; c = c->next)
        if (!strided_loads(p, s, leaf, c->kind == KS_STORE || c->kind == KS_ADDTO ? c->b : c->a, st))
            return false;
    if (!st->strided)
        return false;
    /* How the stores print with those loads staged. */
    for (int l = 0; l < st->nloads; l++)
        st->load_index[l] = st->load_sub[l];
    printer q = *p;
    kir_c_use_staging(&q, st);
    for (const kir_stmt *c = leaf->body; c; c = c->next) {
        if (c->kind != KS_STORE || (k->bufs[c->buf].dtype != IR_F16 && k->bufs[c->buf].dtype != IR_BF16))
            continue;
        ir_dtype dt = k->bufs[c->buf].dtype;
        int64_t a, b, d = 0;
        int loads, stores;
        count_uses(leaf, c->buf, &loads, &stores);
        bool narrows = kir_print_store_narrows(&q.e, dt, c->b);
        bool exact = dt == IR_BF16 && kir_print_store_truncates(&q.e, dt, c->b);
        bool affine = !kir_expr_loads(c->a) && coef_of(s, leaf, c->a, leaf->var, &a) &&
                      coef_of(s, leaf, c->a, s->var, &b) && a == 1 && b >= 0 && loads == 0 &&
                      !k->bufs[c->buf].aliased && (narrows || exact) && st->nstores < STAGE_LOADS;
        int r = affine ? strided_row(k, s, leaf, st, c->a, c->buf, c, a, b, exact, &d) : -1;
        if (r >= 0) {
            st->stores[st->nstores] = c;
            st->store_row[st->nstores] = r;
            st->store_d[st->nstores++] = d;
        } else if (dt == IR_F16 && narrows) {
            return false; /* f16 narrowed an element at a time: software */
        }
    }
    for (int r = 0; r < st->nrows; r++)
        st->len[r] = st->dmax[r] - st->delta[r] + st->a[r] * (leaf->extent - 1) + st->b[r] * (s->extent - 1) + 1;
    /* A store row is narrowed whole: its stores write each of its
     * elements exactly once over the two loops. */
    for (int r = 0; r < st->nrows; r++) {
        if (!st->store[r])
            continue;
        if (st->len[r] > STAGE_FLOATS)
            return false;
        uint8_t *hits = kl_xcalloc((size_t)st->len[r], 1);
        bool once = true;
        for (int i = 0; i < st->nstores; i++) {
            if (st->store_row[i] != r)
                continue;
            for (int64_t o = 0; o < s->extent; o++)
                for (int64_t e = 0; e < leaf->extent; e++)
                    once &= hits[st->store_d[i] - st->delta[r] + st->a[r] * e + st->b[r] * o]++ == 0;
        }
        for (int64_t e = 0; e < st->len[r]; e++)
            once &= hits[e] == 1;
        free(hits);
        if (!once)
            return false;
    }
    int64_t floats = 0;
    for (int r = 0; r < st->nrows; r++) {
        floats += st->len[r];
        if (st->len[r] > 4 * leaf->extent * s->extent + 64)
            return false;
    }
    if (floats > STAGE_FLOATS)
        return false;
    for (int l = 0; l < st->nloads; l++) {
        int r = st->load_row[l];
        snprintf(st->load_sub[l], sizeof st->load_sub[l], "%s * %lldLL + %s * %lldLL + %lldLL", k->var_names[leaf->var],
                 (long long)st->a[r], k->var_names[s->var], (long long)st->b[r], (long long)(st->load_d[l] - st->delta[r]));
    }
    if (!kir_c_drop_unread_rows(p, leaf, st))
        return false;
    *leaf_out = leaf;
    return true;
}

static void print_start(printer *p, const kir_stmt *loop, const staging *st, int buf, const kir_expr *index,
                        int64_t delta, const kir_stmt *next);

/* Loop-invariant rows: when loop s's body is lets that load nothing and
 * one leaf loop that the printer stages row by row (not chunked), the
 * leaf's f16 load rows whose index does not read s's variable (through
 * the lets of both loops) are the same row in every iteration of s: they
 * are widened once before s rather than once an iteration (add + relu's
 * bias row, the same for each of a batch's rows: 128 widenings of it a
 * call). Rows of buffers the kernel writes, or that share memory with
 * another, are left alone, so the row is the buffer's for the whole
 * kernel. */
bool kir_c_plan_hoist(const printer *p, const kir_stmt *s, hoisting *h)
{
    const kir_kernel *k = p->e.k;
    const kir_stmt *leaf = plane_leaf(s);
    memset(h, 0, sizeof *h);
    if (!leaf || leaf->extent > STAGE_FLOATS || s->extent < 2 || !kir_c_plan_staging(p, leaf, false, false, &h->st) ||
        !kir_c_drop_unread_rows(p, leaf, &h->st))
        return false;
    h->leaf = leaf;
    for (int r = 0; r < h->st.nrows; r++) {
        int buf = h->st.buf[r];
        if (h->st.store[r] || k->bufs[buf].written || k->bufs[buf].aliased || k->bufs[buf].dtype != IR_F16 ||
            reads_var(s, leaf, h->st.index[r], s->var))
            continue;
        h->buf[h->n] = buf;
        h->index[h->n] = h->st.index[r];
        snprintf(h->name[h->n], sizeof h->name[h->n], "kl_hrow%d", h->n);
        h->n++;
    }
    h->st.outer = s;
    return h->n > 0;
}

void kir_c_print_hoist(printer *p, const kir_stmt *s, const hoisting *h)
{
    (void)s;
    for (int i = 0; i < h->n; i++) {
        ind(p);
        kl_buf_printf(p->e.b, "float %s[%lld] __attribute__((aligned(64)));\n", h->name[i], (long long)h->leaf->extent);
    }
    for (int i = 0; i < h->n; i++) {
        ind(p);
        kl_buf_printf(p->e.b, "kl_f16_widen_row(%s, ", h->name[i]);
        print_start(p, h->leaf, &h->st, h->buf[i], h->index[i], 0, NULL);
        kl_buf_printf(p->e.b, ", %lldLL);\n", (long long)h->leaf->extent);
    }
}

void kir_c_use_hoisted(const printer *p, const kir_stmt *loop, staging *st)
{
    const hoisting *h = p->hoist;
    if (!h || h->leaf != loop || st->chunked || st->outer || st->strided || st->extent != h->leaf->extent)
        return;
    for (int r = 0; r < st->nrows; r++)
        for (int i = 0; i < h->n && !st->store[r]; i++)
            if (st->buf[r] == h->buf[i] && same_expr(st->index[r], h->index[i])) {
                st->hoisted[r] = true;
                snprintf(st->name[r], sizeof st->name[r], "%s", h->name[i]);
            }
}

/* Prints the loads of st as its rows' elements (st NULL: as loads). */
void kir_c_use_staging(printer *p, const staging *st)
{
    p->st = st;
    p->e.staged = st ? st->loads : NULL;
    p->e.staged_row = st ? st->load_name : NULL;
    p->e.nstaged = st ? st->nloads : 0;
    p->e.staged_var = st ? st->var : 0;
    p->e.staged_offset = st && st->offset[0] ? st->offset : NULL;
    p->e.staged_index = st && st->strided ? st->load_index : NULL;
}

/* Leaves out the load rows that printing leaf loop s does not read (a
 * load that a store copies, or compares and selects in its 16-bit bits,
 * prints the buffer's element instead); false when no row is left. */
bool kir_c_drop_unread_rows(const printer *p, const kir_stmt *s, staging *st)
{
    int hits[STAGE_LOADS] = {0};
    printer q = *p;
    kl_buf scratch = {0};
    q.e.b = &scratch;
    kir_c_use_staging(&q, st);
    q.e.staged_hits = hits;
    p->print_body(&q, s->body);
    kl_buf_free(&scratch);
    bool keep[STAGE_ROWS] = {0};
    for (int r = 0; r < st->nrows; r++)
        keep[r] = st->store[r] != NULL;
    for (int l = 0; l < st->nloads; l++)
        keep[st->load_row[l]] |= hits[l] > 0;
    int remap[STAGE_ROWS], n = 0;
    for (int r = 0; r < st->nrows; r++) {
        remap[r] = keep[r] ? n : -1;
        if (!keep[r])
            continue;
        st->index[n] = st->index[r];
        st->buf[n] = st->buf[r];
        st->store[n] = st->store[r];
        st->len[n] = st->len[r];
        st->delta[n] = st->delta[r];
        st->a[n] = st->a[r];
        st->b[n] = st->b[r];
        st->dmax[n] = st->dmax[r];
        st->trunc[n] = st->trunc[r];
        st->twin[n] = st->twin[r];
        snprintf(st->name[n], sizeof st->name[n], "kl_row%d", n);
        n++;
    }
    st->nrows = n;
    for (int i = 0; i < st->nstores; i++)
        st->store_row[i] = remap[st->store_row[i]];
    int m = 0;
    for (int l = 0; l < st->nloads; l++) {
        int r = remap[st->load_row[l]];
        if (r < 0)
            continue;
        st->loads[m] = st->loads[l];
        st->load_row[m] = r;
        st->load_d[m] = st->load_d[l];
        memmove(st->load_sub[m], st->load_sub[l], sizeof st->load_sub[m]);
        st->load_index[m] = st->strided ? st->load_sub[m] : NULL;
        st->load_name[m++] = st->name[r];
    }
    st->nloads = m;
    return n > 0;
}

/* &buf[index] with the loop's variable at 0 (the body's lets it reads
 * printed as their values): the row's first element, before the loop. */
static void print_start(printer *p, const kir_stmt *loop, const staging *st, int buf, const kir_expr *index,
                        int64_t delta, const kir_stmt *next)
{
    const kir_kernel *k = p->e.k;
    const char **rename = kl_xcalloc((size_t)k->nvars + 1, sizeof *rename);
    const kir_expr **inline_var = kl_xcalloc((size_t)k->nvars + 1, sizeof *inline_var);
    const char **saved = p->e.rename;
    if (saved)
        memcpy(rename, saved, sizeof *rename * (size_t)k->nvars);
    rename[st->var] = st->chunked ? "kl_c" : "0";
    for (const kir_stmt *c = loop->body; c; c = c->next)
        if (c->kind == KS_LET)
            inline_var[c->var] = c->a;
    if (st->outer) {
        rename[st->outer->var] = "0";
        for (const kir_stmt *c = st->outer->body; c; c = c->next)
            if (c->kind == KS_LET)
                inline_var[c->var] = c->a;
    }
    char *next_value = next ? kl_xasprintf("(%s + 1LL)", k->var_names[next->var]) : NULL;
    if (next) {
        rename[next->var] = next_value;
        for (const kir_stmt *c = next->body; c; c = c->next)
            if (c->kind == KS_LET)
                inline_var[c->var] = c->a;
    }
    p->e.rename = rename;
    p->e.inline_var = inline_var;
    kl_buf_printf(p->e.b, "&%s[", k->bufs[buf].name);
    kir_print_expr(&p->e, index);
    if (delta)
        kl_buf_printf(p->e.b, " + %lldLL", (long long)delta);
    kl_buf_putc(p->e.b, ']');
    p->e.rename = saved;
    p->e.inline_var = NULL;
    free(next_value);
    free(rename);
    free(inline_var);
}

static void print_row_start(printer *p, const kir_stmt *loop, const staging *st, int r, const kir_stmt *next)
{
    print_start(p, loop, st, st->buf[r], st->index[r], st->delta[r], next);
}

/* ", LENGTH);" of row r's conversion call. */
static void print_row_length(printer *p, const staging *st, int r)
{
    if (st->len[r])
        kl_buf_printf(p->e.b, ", %lldLL);\n", (long long)st->len[r]);
    else if (st->chunked)
        kl_buf_puts(p->e.b, ", kl_n);\n");
    else
        kl_buf_printf(p->e.b, ", %lldLL);\n", (long long)st->extent);
}

/* The least gap, in bytes, between a row a leaf loop reads or writes
 * and the one the next iteration of the loop around touches, for which
 * that row is fetched ahead: nearer rows are in the hardware
 * prefetcher's stream already. */
#define PREFETCH_GAP 1024
#define PREFETCH_ROWS 8

/* A row of buf at index for print_prefetch: once, to be written when
 * any of its uses stores (store: that store, else NULL). */
static void fetch_row(staging *st, const kir_expr *index, int buf, const kir_stmt *store)
{
    for (int r = 0; r < st->nrows; r++)
        if (st->buf[r] == buf && same_expr(st->index[r], index)) {
            st->store[r] = st->store[r] ? st->store[r] : store;
            return;
        }
    if (st->nrows < PREFETCH_ROWS) {
        st->index[st->nrows] = index;
        st->buf[st->nrows] = buf;
        st->store[st->nrows++] = store;
    }
}

/* The rows (base + the loop's variable, loading nothing) that e loads in
 * leaf loop s. */
static void fetch_loads(const kir_stmt *s, const kir_expr *e, staging *st)
{
    if (!e)
        return;
    if (e->kind == KE_LOAD && row_index(s, e->a)) {
        fetch_row(st, e->a, e->buf, NULL);
        return;
    }
    fetch_loads(s, e->a, st);
    fetch_loads(s, e->b, st);
    fetch_loads(s, e->c, st);
}

/* Fetches ahead the rows that leaf loop s will read and write in the
 * next iteration of loop `around` (the loop whose body holds s), where
 * they lie far from this iteration's: a batch norm's rows of one channel
 * in image after image, or a transpose's source rows, each a short run
 * that the hardware prefetcher meets cold (the CNN's first batch-norm
 * gradient at fp16 4.6 -> 3.4 ms a step). */
void kir_c_print_prefetch(printer *p, const kir_stmt *s, const kir_stmt *around)
{
    const kir_kernel *k = p->e.k;
    if (!around || around->extent < 2)
        return;
    /* s alone touches memory in around's body (other loops' rows would
     * fill the gaps between its rows), after lets that load nothing. */
    for (const kir_stmt *c = around->body; c; c = c->next)
        if (c != s && (c->kind != KS_LET || kir_expr_loads(c->a)))
            return;
    staging rows;
    memset(&rows, 0, sizeof rows);
    rows.var = s->var;
    for (const kir_stmt *c = s->body; c; c = c->next) {
        fetch_loads(s, c->a, &rows);
        fetch_loads(s, c->b, &rows);
        if ((c->kind == KS_STORE || c->kind == KS_ADDTO) && row_index(s, c->a))
            fetch_row(&rows, c->a, c->buf, c);
    }
    bool open = false;
    for (int r = 0; r < rows.nrows; r++) {
        int64_t step, size = ir_dtype_size(k->bufs[rows.buf[r]].dtype);
        if (!coef_of(around, s, rows.index[r], around->var, &step) ||
            ((step < 0 ? -step : step) - s->extent) * size < PREFETCH_GAP)
            continue;
        if (!open) {
            ind(p);
            kl_buf_printf(p->e.b, "if (%s < %lldLL) {\n", k->var_names[around->var], (long long)around->extent - 1);
            p->e.indent++;
            open = true;
        }
        ind(p);
        kl_buf_puts(p->e.b, rows.store[r] ? "kl_prefetch_row_w(" : "kl_prefetch_row(");
        print_row_start(p, s, &rows, r, around);
        kl_buf_printf(p->e.b, ", %lldLL);\n", (long long)(s->extent * size));
    }
    if (open) {
        p->e.indent--;
        ind(p);
        kl_buf_puts(p->e.b, "}\n");
    }
}

void kir_c_print_staging_begin(printer *p, const kir_stmt *loop, const staging *st)
{
    ind(p);
    kl_buf_puts(p->e.b, "{\n");
    p->e.indent++;
    for (int r = 0; r < st->nrows; r++) {
        if (st->twin[r] || st->hoisted[r])
            continue;
        ind(p);
        kl_buf_printf(p->e.b, "float %s[%lld] __attribute__((aligned(64)));\n", st->name[r],
                      (long long)(st->len[r] ? st->len[r] : st->extent));
    }
    for (int r = 0; r < st->nrows; r++) {
        if (st->store[r] || st->hoisted[r])
            continue;
        ind(p);
        kl_buf_printf(p->e.b, "kl_%s_widen_row(%s, ", p->e.k->bufs[st->buf[r]].dtype == IR_BF16 ? "bf16" : "f16",
                      st->name[r]);
        print_row_start(p, loop, st, r, NULL);
        print_row_length(p, st, r);
    }
}

void kir_c_print_staging_end(printer *p, const kir_stmt *loop, const staging *st)
{
    for (int r = 0; r < st->nrows; r++) {
        if (!st->store[r])
            continue;
        ind(p);
        bool bf16 = p->e.k->bufs[st->buf[r]].dtype == IR_BF16;
        kl_buf_printf(p->e.b, "kl_%s_%s_row(", bf16 ? "bf16" : "f16", st->trunc[r] ? "trunc" : "narrow");
        print_row_start(p, loop, st, r, NULL);
        if (st->twin[r]) {
            kl_buf_puts(p->e.b, ", ");
            print_start(p, loop, st, st->twin[r]->buf, st->twin[r]->a, st->delta[r], NULL);
        } else {
            kl_buf_printf(p->e.b, ", %s", st->name[r]);
        }
        print_row_length(p, st, r);
    }
    p->e.indent--;
    ind(p);
    kl_buf_puts(p->e.b, "}\n");
}

/* The row a staged store writes, or NULL. */
/* The row a staged store writes (*d: its offset there), or -1. */
int kir_c_staged_store(const printer *p, const kir_stmt *s, int64_t *d)
{
    *d = 0;
    for (int i = 0; p->st && i < p->st->nstores; i++)
        if (p->st->stores[i] == s) {
            *d = p->st->store_d[i] - p->st->delta[p->st->store_row[i]];
            return p->st->store_row[i];
        }
    for (int r = 0; p->st && r < p->st->nrows; r++)
        if (p->st->store[r] == s)
            return r;
    return -1;
}

