/* How a kernel-IR function maps to CUDA threads: phases, chains of
 * loops, block or flat mode, vector accesses. The rules are in
 * cuda_map.h; codegen/emit_cuda.c prints what this decides. */
#include <stdlib.h>
#include <string.h>

#include "cuda_map.h"
#include "emit_cuda.h"

void cu_expr_loads(const kir_expr *e, cu_bufset *rd)
{
    if (!e)
        return;
    if (e->kind == KE_LOAD)
        *rd |= (cu_bufset)1 << e->buf;
    cu_expr_loads(e->a, rd);
    cu_expr_loads(e->b, rd);
    cu_expr_loads(e->c, rd);
}

/* Buffers read and written by statements [s, end) and everything inside. */
void cu_stmts_rw(const kir_stmt *s, const kir_stmt *end, cu_bufset *rd, cu_bufset *wr)
{
    for (; s && s != end; s = s->next) {
        cu_expr_loads(s->a, rd);
        cu_expr_loads(s->b, rd);
        if (s->kind == KS_STORE || s->kind == KS_ADDTO)
            *wr |= (cu_bufset)1 << s->buf;
        if (s->kind == KS_ADDTO)
            *rd |= (cu_bufset)1 << s->buf;
        if (s->body)
            cu_stmts_rw(s->body, NULL, rd, wr);
    }
}

/* Buffers that share memory (an in-place result and its operand) count as
 * one: a set touching any of them touches all. */
cu_bufset cu_alias_closure(const kir_kernel *k, cu_bufset s)
{
    cu_bufset aliased = 0;
    for (int i = 0; i < k->nbufs; i++)
        if (k->bufs[i].aliased)
            aliased |= (cu_bufset)1 << i;
    return s & aliased ? s | aliased : s;
}

void cu_expr_vars(const kir_expr *e, bool *used)
{
    if (!e)
        return;
    if (e->kind == KE_VAR)
        used[e->var] = true;
    cu_expr_vars(e->a, used);
    cu_expr_vars(e->b, used);
    cu_expr_vars(e->c, used);
}

void cu_stmts_vars(const kir_stmt *s, const kir_stmt *end, bool *used)
{
    for (; s && s != end; s = s->next) {
        cu_expr_vars(s->a, used);
        cu_expr_vars(s->b, used);
        if (s->kind == KS_ACC || s->kind == KS_SET)
            used[s->var] = true;
        if (s->body)
            cu_stmts_vars(s->body, NULL, used);
    }
}

/* A SEQ loop whose iterations commute: it only computes and scatters with
 * ADDTO (atomic on the GPU), so it may run as a grid loop. */
static bool seq_commutes(const kir_stmt *s)
{
    for (; s; s = s->next) {
        if (s->kind == KS_STORE || s->kind == KS_SET || s->kind == KS_ACC)
            return false;
        if (s->body && !seq_commutes(s->body))
            return false;
    }
    return true;
}

cu_block_role cu_block_role_of(kir_loop_kind kind)
{
    switch (kind) {
    case KL_RED: return CU_BLOCK_REDUCE;
    case KL_BPAR: case KL_PAR: return CU_BLOCK_SPREAD;
    case KL_SEQ: return CU_BLOCK_UNIFORM;
    }
    kl_panic("unknown loop kind %d", (int)kind);
}

/* A loop whose iterations may run on the grid's threads. */
static bool is_grid_loop(const kir_stmt *s)
{
    if (s->kind != KS_LOOP)
        return false;
    switch (s->loop) {
    case KL_PAR: return true;
    case KL_SEQ: return seq_commutes(s->body);
    case KL_RED: case KL_BPAR: return false;
    }
    return false;
}

static bool chain_accepts(cu_chain_kind kind, const kir_stmt *s, bool first)
{
    if (s->kind != KS_LOOP)
        return false;
    switch (kind) {
    /* A BPAR loop nested in grid loops (and LETs that read nothing it
     * writes: cu_build_chain checks) extends the grid: as a block-level
     * loop it would give each outer iteration one block, leaving most
     * SMs idle when there are few (batch norm's apply, one block per
     * channel). Its iterations are independent, so the grid may run them. */
    case CU_CHAIN_GRID: return is_grid_loop(s) || (!first && s->loop == KL_BPAR);
    case CU_CHAIN_RED: return cu_block_role_of(s->loop) == CU_BLOCK_REDUCE && (first || s->naccs == 0);
    case CU_CHAIN_SPREAD: return cu_block_role_of(s->loop) == CU_BLOCK_SPREAD;
    }
    return false;
}

/* Perfectly nested loops from s (LETs allowed between them when they do
 * not read what the inner loop writes). Returns the number of loops. */
int cu_build_chain(cu_chain_kind kind, const kir_stmt *s, const kir_stmt **chain)
{
    int n = 0;
    chain[n++] = s;
    for (;;) {
        const kir_stmt *t = s->body;
        cu_bufset lets_rd = 0;
        while (t && t->kind == KS_LET) {
            cu_expr_loads(t->a, &lets_rd);
            t = t->next;
        }
        if (!t || t->next || n == CU_MAX_CHAIN || !chain_accepts(kind, t, false))
            return n;
        cu_bufset rd = 0, wr = 0;
        cu_stmts_rw(t, t->next, &rd, &wr);
        if (lets_rd & wr)
            return n;
        chain[n++] = t;
        s = t;
    }
}

int64_t cu_chain_extent(const kir_stmt *const *chain, int n)
{
    int64_t e = 1;
    for (int i = 0; i < n; i++)
        e *= chain[i]->extent;
    return e;
}

/* The largest block-level loop in a block-context range (0: none). */
static int64_t block_inner(const kir_stmt *s, const kir_stmt *end)
{
    int64_t best = 0;
    const kir_stmt *chain[CU_MAX_CHAIN];
    for (; s && s != end; s = s->next) {
        int64_t e = 0;
        if (s->kind == KS_LOOP) {
            switch (cu_block_role_of(s->loop)) {
            case CU_BLOCK_REDUCE: e = cu_chain_extent(chain, cu_build_chain(CU_CHAIN_RED, s, chain)); break;
            case CU_BLOCK_SPREAD: e = cu_chain_extent(chain, cu_build_chain(CU_CHAIN_SPREAD, s, chain)); break;
            case CU_BLOCK_UNIFORM: e = block_inner(s->body, NULL); break;
            }
        } else if (s->kind == KS_IF) {
            e = block_inner(s->body, NULL);
        }
        if (e > best)
            best = e;
    }
    return best;
}

static bool has_side_effects(const kir_stmt *s, const kir_stmt *end)
{
    cu_bufset rd = 0, wr = 0;
    cu_stmts_rw(s, end, &rd, &wr);
    return wr != 0;
}

/* ---- phases ---- */

/* ---- vectorisation of plain elementwise chains ---- */

typedef struct affine {
    bool ok;
    int64_t ci;    /* coefficient of the innermost variable */
    bool rest_div; /* the rest is a multiple of the vector width */
} affine;

/* Whether e reads only variables uniform over a unit, and no memory. */
static bool uniform_expr(const kir_expr *e, const bool *uniform)
{
    if (!e)
        return true;
    if (e->kind == KE_VAR)
        return uniform[e->var];
    if (e->kind == KE_LOAD)
        return false;
    return uniform_expr(e->a, uniform) && uniform_expr(e->b, uniform) && uniform_expr(e->c, uniform);
}

/* Whether the integer e is a multiple of v whatever its variables hold. */
static bool divisible(const kir_expr *e, int64_t v)
{
    if (e->kind == KE_CONST)
        return e->type == KT_I64 && e->i % v == 0;
    if (e->kind == KE_BIN && e->op == KB_MUL)
        return divisible(e->a, v) || divisible(e->b, v);
    if (e->kind == KE_BIN && (e->op == KB_ADD || e->op == KB_SUB))
        return divisible(e->a, v) && divisible(e->b, v);
    return false;
}

/* e as ci * inner + rest, where rest is uniform over a unit. */
static affine affine_of(const kir_expr *e, int inner, int64_t v, const bool *uniform)
{
    affine r = {true, 0, false};
    if (!kir_expr_uses_var(e, inner)) {
        r.ok = e->type == KT_I64 && uniform_expr(e, uniform);
        r.rest_div = r.ok && divisible(e, v);
        return r;
    }
    switch (e->kind) {
    case KE_VAR:
        r.ci = 1;
        r.rest_div = true;
        return r;
    case KE_BIN:
        if (e->op == KB_ADD || e->op == KB_SUB) {
            affine a = affine_of(e->a, inner, v, uniform), b = affine_of(e->b, inner, v, uniform);
            r.ok = a.ok && b.ok;
            r.ci = e->op == KB_ADD ? a.ci + b.ci : a.ci - b.ci;
            r.rest_div = a.rest_div && b.rest_div;
            return r;
        }
        if (e->op == KB_MUL) {
            const kir_expr *c = e->b->kind == KE_CONST ? e->b : e->a->kind == KE_CONST ? e->a : NULL;
            const kir_expr *x = c == e->b ? e->a : e->b;
            if (!c || c->type != KT_I64)
                break;
            affine a = affine_of(x, inner, v, uniform);
            r.ok = a.ok;
            r.ci = a.ci * c->i;
            r.rest_div = a.rest_div || c->i % v == 0;
            return r;
        }
        break;
    case KE_CONST: case KE_LOAD: case KE_UN: case KE_SELECT: case KE_CAST: case KE_ARG:
        break;
    }
    r.ok = false;
    return r;
}

typedef struct vec_scan {
    const kir_kernel *k;
    int inner;
    int64_t v;
    const bool *uniform;
    bool fail;
    cu_bufset stored, candidates, scalar;
    /* The first index expression seen per buffer (all must be alike). */
    const kir_expr *index[64];
} vec_scan;

/* Whether two expressions are the same tree. */
static bool expr_equal(const kir_expr *a, const kir_expr *b)
{
    if (!a || !b)
        return a == b;
    return a->kind == b->kind && a->type == b->type && a->op == b->op && a->var == b->var && a->buf == b->buf &&
           (a->f == b->f || (a->f != a->f && b->f != b->f)) && a->i == b->i && expr_equal(a->a, b->a) &&
           expr_equal(a->b, b->b) && expr_equal(a->c, b->c);
}

static void vec_access(vec_scan *vs, int buf, const kir_expr *idx, bool store)
{
    cu_bufset bit = (cu_bufset)1 << buf;
    affine a = affine_of(idx, vs->inner, vs->v, vs->uniform);
    bool ok = a.ok && a.ci == 1 && a.rest_div;
    if (!ok) {
        if (store)
            vs->fail = true; /* every store goes through a vector */
        vs->scalar |= bit;
        return;
    }
    if (!vs->index[buf]) {
        vs->index[buf] = idx;
    } else if (!expr_equal(vs->index[buf], idx)) {
        if (store)
            vs->fail = true;
        vs->scalar |= bit;
    }
    vs->candidates |= bit;
}

static void vec_expr(vec_scan *vs, const kir_expr *e)
{
    if (!e)
        return;
    if (e->kind == KE_LOAD) {
        if (cu_alias_closure(vs->k, vs->stored) & ((cu_bufset)1 << e->buf))
            vs->fail = true; /* read after write in one iteration */
        if (kir_expr_uses_var(e->a, vs->inner))
            vec_access(vs, e->buf, e->a, false);
        else
            vs->scalar |= (cu_bufset)1 << e->buf; /* also read at a uniform index: plain loads */
    }
    vec_expr(vs, e->a);
    vec_expr(vs, e->b);
    vec_expr(vs, e->c);
}

/* Sets ph->vec and ph->vecbuf for a flat phase whose body is plain
 * elementwise work. */
static void plan_vector(const kir_kernel *k, cu_phase *ph)
{
    ph->vec = 1;
    ph->vecbuf = 0;
    const kir_stmt *last = ph->chain[ph->nchain - 1];
    if (last->loop != KL_PAR && last->loop != KL_BPAR)
        return;
    for (const kir_stmt *s = last->body; s; s = s->next)
        if (s->kind != KS_LET && s->kind != KS_STORE)
            return;
    /* The widest buffer the body touches decides the width. */
    cu_bufset rd = 0, wr = 0;
    cu_stmts_rw(last->body, NULL, &rd, &wr);
    int64_t widest = 1;
    for (int i = 0; i < k->nbufs; i++)
        if (((rd | wr) >> i) & 1)
            if (ir_dtype_size(k->bufs[i].dtype) > widest)
                widest = ir_dtype_size(k->bufs[i].dtype);
    int64_t v = 16 / widest;
    if (v < 2)
        return;
    if (ph->nchain > 1 && last->extent % v)
        return;
    if (last->extent < 2 * v)
        return;
    /* Uniform over a unit: every variable but the innermost loop's and the
     * LETs of its body (the outer chain, the LETs between chain loops and
     * those before the phase). */
    bool *uniform = kl_xcalloc((size_t)k->nvars + 1, 1);
    for (int i = 0; i < k->nvars; i++)
        uniform[i] = true;
    uniform[last->var] = false;
    for (const kir_stmt *s = last->body; s; s = s->next)
        if (s->kind == KS_LET)
            uniform[s->var] = false;
    vec_scan vs = {.k = k, .inner = last->var, .v = v, .uniform = uniform};
    for (const kir_stmt *s = last->body; s && !vs.fail; s = s->next) {
        vec_expr(&vs, s->a);
        vec_expr(&vs, s->b);
        if (s->kind == KS_STORE) {
            vec_access(&vs, s->buf, s->a, true);
            vs.stored |= (cu_bufset)1 << s->buf;
        }
    }
    cu_bufset vb = vs.candidates & ~vs.scalar;
    free(uniform);
    if (vs.fail || !vb || (vs.stored & ~vb))
        return;
    ph->vec = (int)v;
    ph->vecbuf = vb;
}

typedef KL_VEC(cu_phase) cu_phase_vec;

/* Whether a statement list holds a grid loop, directly or inside IFs. */
static bool contains_grid(const kir_stmt *s)
{
    for (; s; s = s->next)
        if (is_grid_loop(s) || (s->kind == KS_IF && contains_grid(s->body)))
            return true;
    return false;
}

static void push_phase(const kir_kernel *k, cu_phase_vec *ph, const kir_stmt *first, const kir_stmt *end, bool grid,
                       const kir_stmt *const *guards, int ng, const kir_stmt *top)
{
    if (!grid && !has_side_effects(first, end))
        return; /* only LETs: nothing to run */
    cu_phase p;
    memset(&p, 0, sizeof p);
    p.first = first;
    p.end = end;
    p.grid = grid;
    p.nguards = ng;
    memcpy(p.guards, guards, sizeof(guards[0]) * (size_t)ng);
    p.top = top ? top : first;
    cu_stmts_rw(first, end, &p.rd, &p.wr);
    for (int g = 0; g < ng; g++)
        cu_expr_loads(guards[g]->a, &p.rd);
    p.rd = cu_alias_closure(k, p.rd);
    p.wr = cu_alias_closure(k, p.wr);
    kl_vec_push(*ph, p);
}

/* Phases of one statement list: each grid loop alone, the runs of other
 * statements between them, and the phases inside IFs that hold grid loops
 * (their conditions become guards: uniform tests every thread makes). */
static void split_list(const kir_kernel *k, cu_phase_vec *ph, const kir_stmt *s, const kir_stmt **guards, int ng,
                       const kir_stmt *top)
{
    while (s) {
        const kir_stmt *t = top ? top : s;
        if (is_grid_loop(s)) {
            push_phase(k, ph, s, s->next, true, guards, ng, t);
            s = s->next;
        } else if (s->kind == KS_IF && ng < CU_MAX_GUARDS && contains_grid(s->body)) {
            guards[ng] = s;
            split_list(k, ph, s->body, guards, ng + 1, t);
            s = s->next;
        } else {
            const kir_stmt *first = s;
            while (s && !is_grid_loop(s) && !(s->kind == KS_IF && ng < CU_MAX_GUARDS && contains_grid(s->body)))
                s = s->next;
            push_phase(k, ph, first, s, false, guards, ng, top);
        }
    }
}

/* ---- split reductions ---- */

/* Whether the statements after a split RED loop may run over the split's
 * blocks: LETs, single-value writes (block 0 makes them) and block-level
 * spread loops (sliced); no later reduction or uniform loop, and no
 * statement reads a buffer an earlier one of them writes (the blocks do
 * not wait for each other, as the threads of one block do at its
 * barriers). */
static bool rest_splits(const kir_kernel *k, const kir_stmt *s, const kir_stmt *end, cu_bufset before_rd)
{
    cu_bufset written = 0;
    for (; s && s != end; s = s->next) {
        cu_bufset rd = 0, wr = 0;
        cu_stmts_rw(s, s->next, &rd, &wr);
        if (cu_alias_closure(k, rd) & written)
            return false;
        written |= cu_alias_closure(k, wr);
        /* Every block recomputes what comes before the rest (LETs, the
         * chain's LETs, guards) and must not see another block's writes. */
        if (written & cu_alias_closure(k, before_rd))
            return false;
        switch (s->kind) {
        case KS_LET: case KS_STORE: case KS_ADDTO:
            break;
        case KS_LOOP:
            if (cu_block_role_of(s->loop) != CU_BLOCK_SPREAD)
                return false;
            break;
        case KS_SET: case KS_ACC: case KS_IF:
            return false;
        }
    }
    return true;
}

/* Decides p's split (cu_phase.split): its body must open with LETs and
 * then a block-level RED loop. */
static void plan_split(const kir_kernel *k, cu_phase *p)
{
    const char *env = getenv("KILN_CUDA_SPLIT");
    if ((env && !strcmp(env, "0")) || p->units >= CU_SPLIT_MAX_UNITS)
        return;
    const kir_stmt *body = p->grid ? p->chain[p->nchain - 1]->body : p->first, *s = body;
    const kir_stmt *end = p->grid ? NULL : p->end;
    while (s && s != end && s->kind == KS_LET)
        s = s->next;
    if (!s || s == end || s->kind != KS_LOOP || cu_block_role_of(s->loop) != CU_BLOCK_REDUCE || s->naccs == 0)
        return;
    const kir_stmt *chain[CU_MAX_CHAIN];
    int64_t e = cu_chain_extent(chain, cu_build_chain(CU_CHAIN_RED, s, chain));
    int64_t want = (CU_SPLIT_BLOCKS + p->units - 1) / p->units, most = e / CU_SPLIT_MIN_SLICE;
    int64_t n = want < most ? want : most;
    while (n >= 2 && p->units * n * s->naccs * (int64_t)sizeof(double) > KIR_CUDA_WORKSPACE_BYTES)
        n--;
    if (n < 2)
        return;
    p->split = n;
    p->split_red = s;
    /* What every block of the finishing launch reads before the rest: the
     * LETs before the split loop (the loop itself becomes the partials'
     * combine), the LETs between the chain's loops, the guards. */
    cu_bufset before_rd = 0, wr = 0;
    cu_stmts_rw(body, s, &before_rd, &wr);
    for (int i = 0; i + 1 < p->nchain; i++)
        cu_stmts_rw(p->chain[i]->body, p->chain[i + 1], &before_rd, &wr);
    for (int g = 0; g < p->nguards; g++)
        cu_expr_loads(p->guards[g]->a, &before_rd);
    p->split_rest = rest_splits(k, s->next, end, before_rd);
}

/* Splits the body into phases and decides each one's mapping. */
int cu_split_phases(const kir_kernel *k, cu_phase **out)
{
    cu_phase_vec ph = {0};
    const kir_stmt *guards[CU_MAX_GUARDS];
    split_list(k, &ph, k->body, guards, 0, NULL);
    for (int i = 0; i < ph.n; i++) {
        cu_phase *p = &ph.v[i];
        p->vec = 1;
        if (!p->grid) {
            p->block = true;
            p->units = 1;
            p->inner = block_inner(p->first, p->end);
            plan_split(k, p);
            continue;
        }
        p->nchain = cu_build_chain(CU_CHAIN_GRID, p->first, p->chain);
        p->units = cu_chain_extent(p->chain, p->nchain);
        const kir_stmt *body = p->chain[p->nchain - 1]->body;
        p->inner = block_inner(body, NULL);
        p->block = p->inner >= CU_BLOCK_MIN_INNER && p->units < CU_BLOCK_MAX_OUTER;
        if (p->block)
            plan_split(k, p);
        if (!p->block) {
            p->inner = 0;
            plan_vector(k, p);
            if (p->vec > 1) {
                int64_t in = p->chain[p->nchain - 1]->extent;
                p->units = p->units / in * ((in + p->vec - 1) / p->vec);
            }
        }
    }
    *out = ph.v;
    return ph.n;
}

