/* Building kernel IR. See kir.h. */
#include <stdlib.h>
#include <string.h>

#include "kir.h"

kir_kernel *kir_new(const char *what, kir_type compute)
{
    kir_kernel *k = kl_xcalloc(1, sizeof *k);
    k->what = kl_xstrdup(what);
    k->compute = compute;
    k->tail = &k->body;
    return k;
}

void kir_free(kir_kernel *k)
{
    if (!k)
        return;
    kl_arena_free(&k->arena);
    free(k->name);
    free(k->what);
    for (int i = 0; i < k->nvars; i++)
        free(k->var_names[i]);
    free(k->var_names);
    free(k->var_types);
    free(k->var_acc);
    free(k);
}

int kir_buf_add(kir_kernel *k, int value, ir_dtype dt, int64_t numel)
{
    for (int i = 0; i < k->nbufs; i++)
        if (k->bufs[i].value == value)
            return i;
    kl_check(k->nbufs < (int)KL_ARRAY_LEN(k->bufs));
    kir_buf *b = &k->bufs[k->nbufs];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "b%d", k->nbufs);
    b->dtype = dt;
    b->numel = numel;
    b->value = value;
    return k->nbufs++;
}

int kir_var(kir_kernel *k, kir_type t, const char *hint)
{
    if (k->nvars == k->capvars) {
        k->capvars = k->capvars ? 2 * k->capvars : 16;
        k->var_types = kl_xrealloc(k->var_types, sizeof *k->var_types * (size_t)k->capvars);
        k->var_names = kl_xrealloc(k->var_names, sizeof *k->var_names * (size_t)k->capvars);
        k->var_acc = kl_xrealloc(k->var_acc, sizeof *k->var_acc * (size_t)k->capvars);
    }
    k->var_acc[k->nvars] = -1;
    k->var_types[k->nvars] = t;
    k->var_names[k->nvars] = kl_xasprintf("%s%d", hint ? hint : "v", k->nvars);
    return k->nvars++;
}

static kir_expr *expr(kir_kernel *k, kir_expr_kind kind, kir_type t)
{
    kir_expr *e = kl_arena_alloc(&k->arena, sizeof *e);
    e->kind = kind;
    e->type = t;
    return e;
}

kir_expr *kir_const_f(kir_kernel *k, double f)
{
    kir_expr *e = expr(k, KE_CONST, k->compute);
    e->f = f;
    return e;
}

kir_expr *kir_const_i(kir_kernel *k, int64_t i)
{
    kir_expr *e = expr(k, KE_CONST, KT_I64);
    e->i = i;
    e->f = (double)i;
    return e;
}

kir_expr *kir_varref(kir_kernel *k, int var)
{
    kir_expr *e = expr(k, KE_VAR, k->var_types[var]);
    e->var = var;
    return e;
}

kir_expr *kir_load(kir_kernel *k, int buf, kir_expr *index)
{
    ir_dtype dt = k->bufs[buf].dtype;
    kir_type t = ir_dtype_is_float(dt) ? (dt == IR_F64 ? KT_F64 : k->compute) : KT_I64;
    kir_expr *e = expr(k, KE_LOAD, t);
    e->buf = buf;
    e->a = index;
    k->bufs[buf].read = true;
    return e;
}

static bool is_compare(int op)
{
    return op >= KB_LT && op <= KB_OR;
}

kir_expr *kir_un(kir_kernel *k, kir_unop op, kir_expr *a)
{
    kir_type t = op == KU_NOT ? KT_BOOL : op == KU_UNIFORM ? k->compute : a->type;
    if (op != KU_NOT && op != KU_UNIFORM && op != KU_NEG && op != KU_ABS && t == KT_I64)
        t = k->compute; /* math on integers happens in floating point */
    if (op == KU_ISFINITE)
        t = a->type == KT_F64 ? KT_F64 : k->compute;
    if (op == KU_NEG && a->kind == KE_CONST) {
        kir_expr *c = expr(k, KE_CONST, a->type);
        c->f = -a->f;
        c->i = -a->i;
        return c;
    }
    kir_expr *e = expr(k, KE_UN, t);
    e->op = op;
    e->a = a;
    return e;
}

kir_expr *kir_bin(kir_kernel *k, kir_binop op, kir_expr *a, kir_expr *b)
{
    kir_type t;
    if (is_compare(op))
        t = KT_BOOL;
    else if (op == KB_IDIV || op == KB_IMOD)
        t = KT_I64;
    else if (a->type == KT_I64 && b->type == KT_I64)
        t = KT_I64;
    else if (a->type == KT_F64 || b->type == KT_F64)
        t = KT_F64;
    else
        t = k->compute;
    kir_expr *e = expr(k, KE_BIN, t);
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}

kir_expr *kir_select(kir_kernel *k, kir_expr *c, kir_expr *a, kir_expr *b)
{
    kir_expr *e = expr(k, KE_SELECT, a->type == KT_I64 && b->type == KT_I64 ? KT_I64 : a->type == KT_F64 || b->type == KT_F64 ? KT_F64 : k->compute);
    e->a = c;
    e->b = a;
    e->c = b;
    return e;
}

kir_expr *kir_cast(kir_kernel *k, kir_type t, kir_expr *a)
{
    if (a->type == t)
        return a;
    kir_expr *e = expr(k, KE_CAST, t);
    e->a = a;
    return e;
}

kir_expr *kir_arg(kir_kernel *k, int which)
{
    kir_expr *e = expr(k, KE_ARG, KT_I64);
    e->var = which;
    return e;
}

kir_expr *kir_rand(kir_kernel *k, int64_t salt, kir_expr *index)
{
    kir_expr *e = expr(k, KE_UN, k->compute);
    e->op = KU_UNIFORM;
    e->i = salt;
    e->a = index;
    return e;
}

kir_expr *kir_iadd(kir_kernel *k, kir_expr *a, kir_expr *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->kind == KE_CONST && a->i == 0 && a->type == KT_I64)
        return b;
    if (b->kind == KE_CONST && b->i == 0 && b->type == KT_I64)
        return a;
    if (a->kind == KE_CONST && b->kind == KE_CONST && a->type == KT_I64 && b->type == KT_I64)
        return kir_const_i(k, a->i + b->i);
    return kir_bin(k, KB_ADD, a, b);
}

kir_expr *kir_imul(kir_kernel *k, kir_expr *a, int64_t c)
{
    if (c == 0)
        return kir_const_i(k, 0);
    if (c == 1)
        return a;
    if (a->kind == KE_CONST && a->type == KT_I64)
        return kir_const_i(k, a->i * c);
    return kir_bin(k, KB_MUL, a, kir_const_i(k, c));
}

/* ---- statements ---- */

static kir_stmt *append(kir_kernel *k, kir_stmt_kind kind)
{
    kir_stmt *s = kl_arena_alloc(&k->arena, sizeof *s);
    s->kind = kind;
    *k->tail = s;
    k->tail = &s->next;
    return s;
}

static void open_body(kir_kernel *k, kir_stmt *s)
{
    kl_check(k->depth < (int)KL_ARRAY_LEN(k->tail_stack));
    k->tail_stack[k->depth++] = k->tail;
    k->tail = &s->body;
}

static kir_stmt *innermost_loop(kir_kernel *k)
{
    /* The statement owning the current body is the one whose next pointer
     * the saved tail points at. */
    kl_check(k->depth > 0);
    kir_stmt **saved = k->tail_stack[k->depth - 1];
    return (kir_stmt *)((char *)saved - offsetof(kir_stmt, next));
}

int kir_loop_begin(kir_kernel *k, kir_loop_kind kind, int64_t extent, const char *hint)
{
    kir_stmt *s = append(k, KS_LOOP);
    s->loop = kind;
    s->extent = extent;
    s->var = kir_var(k, KT_I64, hint ? hint : "i");
    open_body(k, s);
    return s->var;
}

void kir_loop_lanes(kir_kernel *k)
{
    kir_stmt *s = innermost_loop(k);
    kl_check(s->kind == KS_LOOP && s->loop == KL_BPAR);
    s->lanes = true;
}

void kir_loop_free_order(kir_kernel *k)
{
    kir_stmt *s = innermost_loop(k);
    kl_check(s->kind == KS_LOOP && s->loop == KL_RED);
    s->free_order = true;
}

int kir_loop_acc(kir_kernel *k, kir_acc_op op, const char *hint)
{
    kir_stmt *s = innermost_loop(k);
    kl_check(s->kind == KS_LOOP && s->loop == KL_RED && s->naccs < (int)KL_ARRAY_LEN(s->accs));
    int v = kir_var(k, k->compute, hint ? hint : "acc");
    s->accs[s->naccs].var = v;
    s->accs[s->naccs].op = op;
    k->var_acc[v] = op;
    s->naccs++;
    return v;
}

void kir_loop_end(kir_kernel *k)
{
    kl_check(k->depth > 0);
    k->tail = k->tail_stack[--k->depth];
}

void kir_if_begin(kir_kernel *k, kir_expr *cond)
{
    kir_stmt *s = append(k, KS_IF);
    s->a = cond;
    open_body(k, s);
}

void kir_if_end(kir_kernel *k)
{
    kir_loop_end(k);
}

int kir_let(kir_kernel *k, kir_expr *value, const char *hint)
{
    int v = kir_var(k, value->type, hint ? hint : "t");
    kir_stmt *s = append(k, KS_LET);
    s->var = v;
    s->a = value;
    return v;
}

void kir_set(kir_kernel *k, int var, kir_expr *value)
{
    kir_stmt *s = append(k, KS_SET);
    if (k->var_acc[var] == -1)
        k->var_acc[var] = -2;
    s->var = var;
    s->a = kir_cast(k, k->var_types[var], value);
}

void kir_acc_add(kir_kernel *k, int var, kir_expr *value)
{
    kl_check(k->var_acc[var] >= 0);
    kir_stmt *s = append(k, KS_ACC);
    s->var = var;
    s->accop = k->var_acc[var];
    s->a = kir_cast(k, k->var_types[var], value);
}

/* A store or an atomic add (which reads the buffer too). */
static void write_stmt(kir_kernel *k, kir_stmt_kind kind, int buf, kir_expr *index, kir_expr *value)
{
    kir_stmt *s = append(k, kind);
    s->buf = buf;
    s->a = index;
    s->b = value;
    k->bufs[buf].written = true;
    if (kind == KS_ADDTO)
        k->bufs[buf].read = true;
}

void kir_store(kir_kernel *k, int buf, kir_expr *index, kir_expr *value)
{
    write_stmt(k, KS_STORE, buf, index, value);
}

void kir_addto(kir_kernel *k, int buf, kir_expr *index, kir_expr *value)
{
    write_stmt(k, KS_ADDTO, buf, index, value);
}

void kir_begin_host_body(kir_kernel *k)
{
    kl_check(k->depth == 0 && !k->host_body && k->body);
    k->tail = &k->host_body;
}

const kir_stmt *kir_host_stmts(const kir_kernel *k)
{
    return k->host_body ? k->host_body : k->body;
}

bool kir_expr_uses_var(const kir_expr *e, int var)
{
    if (!e)
        return false;
    if (e->kind == KE_VAR && e->var == var)
        return true;
    return kir_expr_uses_var(e->a, var) || kir_expr_uses_var(e->b, var) || kir_expr_uses_var(e->c, var);
}
