/* Lowering the syntax tree to the IR. See lower.h.
 *
 * Evaluation is direct: each expression is evaluated once, in order, to a
 * "lowered value" (a tensor in the graph, a compile-time number, a name or
 * a list). Calls of defs are inlined by evaluating the def's body in a new
 * frame. A user error reports file:line:col and unwinds through fail; the
 * arena and the half-built graph are freed there. */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "lower.h"
#include "ir/train_config.h"

typedef enum { LV_NONE, LV_TENSOR, LV_NUM, LV_STR, LV_LIST } lv_kind;

typedef struct lv {
    lv_kind kind;
    int v;            /* TENSOR: value id */
    bool is_int;      /* NUM */
    int64_t i;
    double f;
    const char *s;    /* STR */
    bool word;        /* STR written as a bare name */
    struct lv *items; /* LIST */
    int n;
    kl_loc loc;
} lv;

typedef struct binding {
    const char *name;
    lv val;
    struct binding *next;
} binding;

typedef struct counter {
    const char *name;
    int n;
    struct counter *next;
} counter;

typedef struct frame {
    const char *path;    /* "conv_bn_relu.1"; NULL in the model block */
    const ast_def *def;  /* NULL in the model block */
    binding *vars;
    counter *counts;     /* instances of defs and layers called from here */
    struct frame *caller;
    int depth;
    const char *precision; /* "f32", "bf16" or "f16" asked for this call; NULL: none */
    kl_loc call_loc;     /* where the caller calls def */
} frame;

typedef struct lower {
    const kl_source *src;
    kl_arena arena;
    ir_graph *g;
    jmp_buf fail;
    KL_VEC(const ast_def *) defs;
    KL_VEC(const ast_def *) called; /* the defs called so far, once each */
    int64_t batch;
    int depth; /* eval's nesting, across inlined calls */
    const frame *at; /* the def whose body (or defaults) is evaluated; NULL: the model's */
    /* What a call holds while it is built; freed on the error path too. */
    ir_attrs tmp_attrs;
    ir_attr_val tmp_val;
} lower;

#define MAX_CALL_DEPTH 64
/* Evaluation recurses through nested expressions and inlined calls, up to
 * 18 KiB of stack a level under AddressSanitizer (a call's argument lists
 * and operand types live on the stack), so the nesting is bounded to stay
 * well inside an 8 MiB stack; real models nest a few dozen levels. */
#define MAX_EVAL_DEPTH 200

/* Ends lowering after an error was reported. An error inside a def's
 * body points at a line of the def; as compilers do for inlined code,
 * notes name each call that led there, innermost first. */
static KL_NORETURN void bail(lower *L)
{
    for (const frame *f = L->at; f && f->def; f = f->caller)
        kl_note_at(L->src, f->call_loc, "'%s' is called from here", f->def->name);
    longjmp(L->fail, 1);
}

static KL_NORETURN void fail_at(lower *L, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
static void fail_at(lower *L, kl_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verror_at(L->src, loc, fmt, ap);
    va_end(ap);
    bail(L);
}

static const char *lv_kind_words(const lv *v)
{
    switch (v->kind) {
    case LV_NONE: return "the result of a def with no return";
    case LV_TENSOR: return "a tensor";
    case LV_NUM: return "a number";
    case LV_STR: return v->word ? "a name" : "a string";
    case LV_LIST: return "a list";
    }
    return "?";
}

/* ---- frames and names ---- */

static void bind(lower *L, frame *f, const char *name, lv val)
{
    binding *b = kl_arena_alloc(&L->arena, sizeof *b);
    b->name = name;
    b->val = val;
    b->next = f->vars;
    f->vars = b;
}

static binding *lookup(frame *f, const char *name)
{
    for (binding *b = f->vars; b; b = b->next)
        if (!strcmp(b->name, name))
            return b;
    return NULL;
}

/* The next instance number of name called from frame f. */
static int next_instance(lower *L, frame *f, const char *name)
{
    for (counter *c = f->counts; c; c = c->next)
        if (!strcmp(c->name, name))
            return ++c->n;
    counter *c = kl_arena_alloc(&L->arena, sizeof *c);
    c->name = name;
    c->n = 1;
    c->next = f->counts;
    f->counts = c;
    return 1;
}

/* "path.name" inside a def, "name" in the model block. */
static char *scoped(lower *L, frame *f, const char *name)
{
    if (!f->path)
        return kl_arena_strdup(&L->arena, name);
    char *s = kl_xasprintf("%s.%s", f->path, name);
    char *a = kl_arena_strdup(&L->arena, s);
    free(s);
    return a;
}

static const ast_def *find_def(lower *L, const char *name)
{
    for (int i = 0; i < L->defs.n; i++)
        if (!strcmp(L->defs.v[i]->name, name))
            return L->defs.v[i];
    return NULL;
}

/* ---- values ---- */

/* is_int only where f is an integer small enough to convert exactly. */
static lv num_lv(double f, bool is_int, kl_loc loc)
{
    lv v = {.kind = LV_NUM, .f = f, .is_int = is_int, .i = is_int ? (int64_t)f : 0, .loc = loc};
    return v;
}

static lv tensor_lv(int id, kl_loc loc)
{
    return (lv){.kind = LV_TENSOR, .v = id, .loc = loc};
}

static const ir_type *type_of(lower *L, const lv *v)
{
    return &ir_val(L->g, v->v)->type;
}

static KL_NORETURN void unknown_name(lower *L, const lv *v)
{
    fail_at(L, v->loc, "unknown name '%s'", v->s);
}

/* Emits a node and infers its types; errors point at loc. */
static int emit(lower *L, frame *f, ir_op op, const int *in, int nin, ir_attrs *attrs, kl_loc loc)
{
    ir_type types[64];
    if (nin > 64)
        fail_at(L, loc, "%s: too many operands", ir_op_name(op));
    for (int i = 0; i < nin; i++)
        types[i] = ir_val(L->g, in[i])->type;
    ir_attrs empty = {0};
    ir_infer inf = {.op = op, .nin = nin, .in = types, .attrs = attrs ? attrs : &empty};
    if (ir_infer_run(&inf)) {
        ir_attrs_free(&empty);
        fail_at(L, loc, "%s", inf.err);
    }
    ir_node *n = ir_add_node(L->g, op, in, nin, inf.attrs, inf.out, NULL, loc);
    ir_attrs_free(&empty);
    if (f->path)
        n->scope = kl_xstrdup(f->path);
    if (f->precision && !ir_attrs_find(&n->attrs, "_precision"))
        ir_attrs_set_str(&n->attrs, "_precision", f->precision);
    return n->out.v[0];
}

static int emit_const(lower *L, frame *f, double x, ir_dtype dt, kl_loc loc)
{
    ir_attrs a = {0};
    ir_attrs_set_float(&a, "value", x);
    ir_attrs_set_str(&a, "dtype", ir_dtype_name(dt));
    int v = emit(L, f, IR_OP_CONST, NULL, 0, &a, loc);
    ir_attrs_free(&a);
    return v;
}

/* A tensor operand from v; numbers become scalar constants of dtype dt. */
static int as_tensor(lower *L, frame *f, const lv *v, ir_dtype dt, const char *what)
{
    switch (v->kind) {
    case LV_TENSOR:
        return v->v;
    case LV_NUM:
        return emit_const(L, f, v->f, dt, v->loc);
    case LV_STR:
        if (v->word)
            unknown_name(L, v);
        /* fallthrough */
    default:
        fail_at(L, v->loc, "%s must be a tensor, not %s", what, lv_kind_words(v));
    }
}

static double as_number(lower *L, const lv *v, const char *what)
{
    if (v->kind == LV_STR && v->word)
        unknown_name(L, v);
    if (v->kind != LV_NUM)
        fail_at(L, v->loc, "%s must be a number, not %s", what, lv_kind_words(v));
    return v->f;
}

static int64_t as_dim(lower *L, const lv *v, const char *what)
{
    double x = as_number(L, v, what);
    if (x != floor(x) || x < 1 || x > 1e12)
        fail_at(L, v->loc, "%s must be a positive integer, got %g", what, x);
    return (int64_t)x;
}

/* An attribute value from a lowered value (tensors are not attributes),
 * written in place into out, which its owner already holds. */
static void to_attr(lower *L, const lv *v, const char *what, ir_attr_val *out)
{
    switch (v->kind) {
    case LV_NUM:
        *out = v->is_int ? ir_attr_val_int(v->i) : ir_attr_val_float(v->f);
        break;
    case LV_STR:
        *out = ir_attr_val_str(v->s);
        break;
    case LV_LIST:
        out->kind = IR_ATTR_LIST;
        out->items = kl_xcalloc((size_t)(v->n ? v->n : 1), sizeof *out->items);
        for (int i = 0; i < v->n; i++)
            to_attr(L, &v->items[i], what, &out->items[out->nitems++]);
        break;
    default:
        fail_at(L, v->loc, "%s must be a number, a name or a list, not %s", what, lv_kind_words(v));
    }
    out->loc = v->loc;
}

/* ---- expressions ---- */

static lv eval(lower *L, frame *f, const ast_expr *e);
static lv call(lower *L, frame *f, const ast_expr *e);

static lv arith(lower *L, frame *f, int op, lv a, lv b, kl_loc loc)
{
    if (a.kind == LV_NUM && b.kind == LV_NUM && op != '@') {
        double x = a.f, y = b.f, r = 0;
        bool is_int = a.is_int && b.is_int;
        switch (op) {
        case '+': r = x + y; break;
        case '-': r = x - y; break;
        case '*': r = x * y; break;
        case '/':
            if (y == 0)
                fail_at(L, loc, "division by zero");
            r = x / y;
            is_int = is_int && r == floor(r);
            break;
        }
        return num_lv(r, is_int && fabs(r) < 9e15, loc);
    }
    if (a.kind == LV_STR && a.word)
        unknown_name(L, &a);
    if (b.kind == LV_STR && b.word)
        unknown_name(L, &b);
    const char *opname = op == '@' ? "'@'" : op == '+' ? "'+'" : op == '-' ? "'-'" : op == '*' ? "'*'" : "'/'";
    if (a.kind != LV_TENSOR && b.kind != LV_TENSOR)
        fail_at(L, loc, "operands of %s must be tensors or numbers, not %s and %s", opname,
                lv_kind_words(&a), lv_kind_words(&b));
    if (op == '@' && (a.kind != LV_TENSOR || b.kind != LV_TENSOR))
        fail_at(L, loc, "both operands of '@' must be tensors");
    ir_dtype dt = a.kind == LV_TENSOR ? type_of(L, &a)->dtype : type_of(L, &b)->dtype;
    int in[2] = {as_tensor(L, f, &a, dt, opname), as_tensor(L, f, &b, dt, opname)};
    ir_op irop = op == '+' ? IR_OP_ADD : op == '-' ? IR_OP_SUB : op == '*' ? IR_OP_MUL
                 : op == '/' ? IR_OP_DIV : IR_OP_MATMUL;
    return tensor_lv(emit(L, f, irop, in, 2, NULL, loc), loc);
}

static lv eval_expr(lower *L, frame *f, const ast_expr *e);

static lv eval(lower *L, frame *f, const ast_expr *e)
{
    if (L->depth >= MAX_EVAL_DEPTH)
        fail_at(L, e->loc, "expressions and calls nested more than %d deep (split this into several statements)",
                MAX_EVAL_DEPTH);
    L->depth++;
    lv v = eval_expr(L, f, e);
    L->depth--;
    return v;
}

static lv eval_expr(lower *L, frame *f, const ast_expr *e)
{
    switch (e->kind) {
    case AST_NUM: {
        /* An integer literal keeps its exact value, beyond a double's 2^53. */
        lv v = num_lv(e->is_int ? (double)e->ival : e->num, false, e->loc);
        v.is_int = e->is_int;
        v.i = e->is_int ? e->ival : 0;
        return v;
    }
    case AST_STR:
        return (lv){.kind = LV_STR, .s = e->s, .loc = e->loc};
    case AST_IDENT: {
        binding *b = lookup(f, e->s);
        if (b) {
            lv v = b->val;
            v.loc = e->loc;
            return v;
        }
        if (!strcmp(e->s, "batch"))
            return num_lv((double)L->batch, true, e->loc);
        /* An unbound name is a word (an initializer, a dtype); it is an
         * error where a value is needed. */
        return (lv){.kind = LV_STR, .s = e->s, .word = true, .loc = e->loc};
    }
    case AST_BINOP: {
        lv a = eval(L, f, e->a), b = eval(L, f, e->b);
        return arith(L, f, e->op, a, b, e->loc);
    }
    case AST_NEG: {
        lv a = eval(L, f, e->a);
        if (a.kind == LV_NUM) {
            a.f = -a.f;
            a.i = -a.i; /* a literal is at most INT64_MAX, so this cannot overflow */
            a.loc = e->loc;
            return a;
        }
        if (a.kind == LV_STR && a.word)
            unknown_name(L, &a);
        if (a.kind != LV_TENSOR)
            fail_at(L, e->loc, "cannot negate %s", lv_kind_words(&a));
        return tensor_lv(emit(L, f, IR_OP_NEG, &a.v, 1, NULL, e->loc), e->loc);
    }
    case AST_CALL:
        return call(L, f, e);
    case AST_LIST: {
        int n = 0;
        for (ast_arg *a = e->args; a; a = a->next)
            n++;
        lv v = {.kind = LV_LIST, .n = n, .loc = e->loc};
        v.items = kl_arena_alloc(&L->arena, sizeof(lv) * (size_t)(n ? n : 1));
        n = 0;
        for (ast_arg *a = e->args; a; a = a->next)
            v.items[n++] = eval(L, f, a->value);
        return v;
    }
    }
    kl_panic("unknown expression kind %d", e->kind);
}

/* ---- calls ---- */

typedef struct call_args {
    lv pos[32];
    kl_loc pos_loc[32];
    int npos;
    const ast_arg *kw[32];
    lv kwval[32];
    int nkw;
} call_args;

static void eval_args(lower *L, frame *f, const ast_expr *e, call_args *ca)
{
    memset(ca, 0, sizeof *ca);
    for (const ast_arg *a = e->args; a; a = a->next) {
        if (!a->name) {
            if (ca->nkw)
                fail_at(L, a->loc, "a positional argument follows keyword arguments");
            if (ca->npos == 32)
                fail_at(L, a->loc, "too many arguments");
            ca->pos_loc[ca->npos] = a->loc;
            ca->pos[ca->npos++] = eval(L, f, a->value);
        } else {
            for (int i = 0; i < ca->nkw; i++)
                if (!strcmp(ca->kw[i]->name, a->name))
                    fail_at(L, a->loc, "argument '%s' is given twice", a->name);
            if (ca->nkw == 32)
                fail_at(L, a->loc, "too many arguments");
            ca->kw[ca->nkw] = a;
            ca->kwval[ca->nkw++] = eval(L, f, a->value);
        }
    }
}

/* Takes a "precision = fp32|bf16|fp16" keyword out of the arguments: it
 * asks that the call's ops run in that precision (passes/precision.c).
 * Returns the dtype name, or NULL when the call has none. */
static const char *take_precision(lower *L, call_args *ca)
{
    for (int i = 0; i < ca->nkw; i++) {
        if (strcmp(ca->kw[i]->name, "precision"))
            continue;
        const lv *v = &ca->kwval[i];
        const char *dt = NULL;
        if (v->kind == LV_STR && v->word)
            dt = !strcmp(v->s, "fp32") ? "f32" : !strcmp(v->s, "bf16") ? "bf16" : !strcmp(v->s, "fp16") ? "f16" : NULL;
        if (!dt)
            fail_at(L, v->loc, "precision must be fp32, bf16 or fp16");
        /* A call may keep fp32 in any run, or ask for the run's own low
         * precision; another low precision would be ignored, so it is
         * refused (the train block's precision, or --precision, sets the
         * run's, and with it loss scaling and the params' copies). */
        const char *run = ir_attr_str(&L->g->train, "precision", "fp32");
        if (strcmp(dt, "f32") && strcmp(v->s, run))
            fail_at(L, v->loc, "precision = %s on a call needs a %s run (precision = %s in the train block, or --precision %s); this run is %s",
                    v->s, v->s, v->s, v->s, run);
        memmove(&ca->kw[i], &ca->kw[i + 1], sizeof(ca->kw[0]) * (size_t)(ca->nkw - i - 1));
        memmove(&ca->kwval[i], &ca->kwval[i + 1], sizeof(ca->kwval[0]) * (size_t)(ca->nkw - i - 1));
        ca->nkw--;
        return dt;
    }
    return NULL;
}

/* True when the train block's keep_fp32 lists def name. */
static bool kept_fp32(lower *L, const char *name)
{
    ir_attr *a = ir_attrs_find(&L->g->train, "keep_fp32");
    for (int i = 0; a && a->val.kind == IR_ATTR_LIST && i < a->val.nitems; i++)
        if (a->val.items[i].kind == IR_ATTR_STR && !strcmp(a->val.items[i].s, name))
            return true;
    return false;
}

static lv exec_body(lower *L, frame *f, const ast_stmt *body);
static void check_param_type(lower *L, frame *callee, const ast_param *p, const lv *arg, const ast_def *d);

static lv call_def(lower *L, frame *f, const ast_expr *e, const ast_def *d)
{
    for (frame *c = f; c; c = c->caller) {
        if (c->def == d) {
            kl_error_at(L->src, e->loc, "recursive call of '%s' (defs are inlined, so recursion never ends)", d->name);
            kl_note_at(L->src, d->loc, "'%s' is defined here", d->name);
            bail(L);
        }
    }
    if (f->depth >= MAX_CALL_DEPTH)
        fail_at(L, e->loc, "calls nested more than %d deep", MAX_CALL_DEPTH);
    bool seen = false;
    for (int i = 0; i < L->called.n && !seen; i++)
        seen = L->called.v[i] == d;
    if (!seen)
        kl_vec_push(L->called, d);
    call_args ca;
    eval_args(L, f, e, &ca);
    bool has_precision_param = false;
    for (const ast_param *p = d->params; p; p = p->next)
        has_precision_param |= !strcmp(p->name, "precision");
    const char *precision = has_precision_param ? NULL : take_precision(L, &ca);
    int nparams = 0;
    for (const ast_param *p = d->params; p; p = p->next)
        nparams++;
    if (ca.npos > nparams) {
        kl_error_at(L->src, ca.pos_loc[nparams], "%s takes %d argument%s, got %d", d->name, nparams,
                    nparams == 1 ? "" : "s", ca.npos);
        kl_note_at(L->src, d->loc, "'%s' is defined here", d->name);
        bail(L);
    }
    frame *callee = kl_arena_alloc(&L->arena, sizeof *callee);
    int k = next_instance(L, f, d->name);
    char *path = f->path ? kl_xasprintf("%s.%s.%d", f->path, d->name, k) : kl_xasprintf("%s.%d", d->name, k);
    callee->path = kl_arena_strdup(&L->arena, path);
    free(path);
    callee->def = d;
    callee->caller = f;
    callee->depth = f->depth + 1;
    callee->precision = precision ? precision : kept_fp32(L, d->name) ? "f32" : f->precision;
    callee->call_loc = e->loc;
    for (int i = 0; i < ca.nkw; i++) {
        int idx = 0;
        const ast_param *p;
        for (p = d->params; p && strcmp(p->name, ca.kw[i]->name); p = p->next)
            idx++;
        if (!p) {
            kl_error_at(L->src, ca.kw[i]->loc, "%s has no parameter '%s'", d->name, ca.kw[i]->name);
            kl_note_at(L->src, d->loc, "'%s' is defined here", d->name);
            bail(L);
        }
        if (idx < ca.npos)
            fail_at(L, ca.kw[i]->loc, "argument '%s' of %s is given twice", p->name, d->name);
    }
    int idx = 0;
    for (const ast_param *p = d->params; p; p = p->next, idx++) {
        lv arg;
        bool have = false;
        if (idx < ca.npos) {
            arg = ca.pos[idx];
            have = true;
        }
        for (int i = 0; i < ca.nkw && !have; i++)
            if (!strcmp(ca.kw[i]->name, p->name))
                arg = ca.kwval[i], have = true;
        if (!have && p->dflt) {
            const frame *at = L->at;
            L->at = callee;
            arg = eval(L, callee, p->dflt);
            L->at = at;
            have = true;
        }
        if (!have) {
            kl_error_at(L->src, e->loc, "%s needs argument '%s'", d->name, p->name);
            kl_note_at(L->src, p->loc, "'%s' is declared here", p->name);
            bail(L);
        }
        if (p->type)
            check_param_type(L, callee, p, &arg, d);
        bind(L, callee, p->name, arg);
    }
    const frame *at = L->at;
    L->at = callee;
    lv r = exec_body(L, callee, d->body);
    L->at = at;
    r.loc = e->loc;
    return r;
}

/* Checks a def's argument against its annotation "x: f32[n, k]" and binds
 * the annotation's free dimension names to the argument's sizes. */
static void check_param_type(lower *L, frame *callee, const ast_param *p, const lv *arg, const ast_def *d)
{
    const ast_type *t = p->type;
    if (arg->kind != LV_TENSOR) {
        if (arg->kind == LV_STR && arg->word)
            unknown_name(L, arg);
        fail_at(L, arg->loc, "argument '%s' of %s must be a tensor, not %s", p->name, d->name, lv_kind_words(arg));
    }
    const ir_type *at = type_of(L, arg);
    if (t->dtype) {
        int dt = ir_dtype_from_name(t->dtype);
        if (dt < 0)
            fail_at(L, t->loc, "unknown dtype '%s' (expected u8, i32, i64, f16, bf16, f32 or f64)", t->dtype);
        if (dt != (int)at->dtype)
            fail_at(L, arg->loc, "argument '%s' of %s must be %s, got %s", p->name, d->name, t->dtype,
                    ir_dtype_name(at->dtype));
    }
    if (!t->has_dims)
        return;
    int rank = 0;
    for (const ast_arg *a = t->dims; a; a = a->next)
        rank++;
    char *ts = ir_type_str(at);
    char msg[160];
    snprintf(msg, sizeof msg, "%s", ts);
    free(ts);
    if (rank != at->rank)
        fail_at(L, arg->loc, "argument '%s' of %s must have rank %d, got %s", p->name, d->name, rank, msg);
    int i = 0;
    for (const ast_arg *a = t->dims; a; a = a->next, i++) {
        const ast_expr *de = a->value;
        if (de->kind == AST_IDENT && !lookup(callee, de->s) && strcmp(de->s, "batch")) {
            bind(L, callee, de->s, num_lv((double)at->dim[i], true, de->loc));
            continue;
        }
        lv dv = eval(L, callee, de);
        int64_t want = as_dim(L, &dv, "a dimension");
        if (want != at->dim[i])
            fail_at(L, arg->loc, "argument '%s' of %s: dimension %d must be %lld, got %s", p->name,
                    d->name, i, (long long)want, msg);
    }
}

static ir_dtype first_float_dtype(lower *L, const call_args *ca)
{
    for (int i = 0; i < ca->npos; i++)
        if (ca->pos[i].kind == LV_TENSOR)
            return type_of(L, &ca->pos[i])->dtype;
    return IR_F32;
}

/* Parameters a layer op creates when called with just its input:
 * batchnorm(x) and layernorm(x). */
static int implicit_param(lower *L, const char *prefix, const char *name, ir_value_kind kind,
                          int64_t c, ir_dtype dt, const char *init, kl_loc loc)
{
    char *full = kl_xasprintf("%s.%s", prefix, name);
    ir_type t = {dt, 1, {c}};
    int id = ir_declare(L->g, kind, full, &t, loc);
    free(full);
    ir_attrs_set_str(&ir_val(L->g, id)->attrs, "init", init);
    return id;
}

static lv call_op(lower *L, frame *f, const ast_expr *e, ir_op op)
{
    const ir_op_info *info = &ir_ops[op];
    call_args ca;
    eval_args(L, f, e, &ca);
    const char *precision = take_precision(L, &ca);
    ir_dtype dt = first_float_dtype(L, &ca);
    int in[64], nin = 0;
    ir_attrs *attrs = &L->tmp_attrs;
    /* Positional arguments fill the operands the op needs, then optional
     * tensor operands, then attributes in the op table's order. */
    for (int i = 0; i < ca.npos; i++) {
        lv *a = &ca.pos[i];
        bool operand = nin < info->min_in ||
                       (a->kind == LV_TENSOR && (info->max_in < 0 || nin < info->max_in) && attrs->n == 0);
        if (operand) {
            if (nin == 64)
                fail_at(L, a->loc, "%s: too many operands", info->name);
            char what[64];
            snprintf(what, sizeof what, "operand %d of %s", nin + 1, info->name);
            in[nin++] = as_tensor(L, f, a, dt, what);
            continue;
        }
        if (a->kind == LV_TENSOR) {
            if (info->max_in >= 0 && nin >= info->max_in)
                fail_at(L, a->loc, "%s takes %d tensor operand%s, got more", info->name, info->max_in,
                        info->max_in == 1 ? "" : "s");
            fail_at(L, a->loc, "%s: a tensor cannot follow the attributes", info->name);
        }
        ir_attr at = {kl_xstrdup(""), {0}, a->loc};
        kl_vec_push(*attrs, at);
        to_attr(L, a, info->name, &attrs->v[attrs->n - 1].val);
    }
    for (int i = 0; i < ca.nkw; i++) {
        const lv *a = &ca.kwval[i];
        if (a->kind == LV_TENSOR)
            fail_at(L, ca.kw[i]->loc, "argument '%s' of %s must not be a tensor", ca.kw[i]->name, info->name);
        ir_attr at = {kl_xstrdup(ca.kw[i]->name), {0}, ca.kw[i]->loc};
        kl_vec_push(*attrs, at);
        to_attr(L, a, info->name, &attrs->v[attrs->n - 1].val);
    }
    /* Layers that make their own parameters. */
    if ((op == IR_OP_BATCHNORM || op == IR_OP_LAYERNORM) && nin == 1) {
        const ir_type *x = &ir_val(L->g, in[0])->type;
        bool bn = op == IR_OP_BATCHNORM;
        if (!ir_dtype_is_float(x->dtype) || (bn && x->rank != 2 && x->rank != 4) || x->rank < 1) {
            char *ts = ir_type_str(x);
            char tbuf[96];
            snprintf(tbuf, sizeof tbuf, "%s", ts);
            free(ts);
            fail_at(L, e->loc, "%s needs a float input of rank %s, got %s", info->name,
                    bn ? "2 or 4" : "1 or more", tbuf);
        }
        int64_t c = bn ? x->dim[1] : x->dim[x->rank - 1];
        int k = next_instance(L, f, info->name);
        char *base = kl_xasprintf("%s.%d", info->name, k);
        char *prefix = scoped(L, f, base);
        free(base);
        /* Scale, shift and statistics are f32 (f64 for f64 inputs). */
        ir_dtype pdt = x->dtype == IR_F64 ? IR_F64 : IR_F32;
        in[nin++] = implicit_param(L, prefix, "gamma", IR_VAL_PARAM, c, pdt, "ones", e->loc);
        in[nin++] = implicit_param(L, prefix, "beta", IR_VAL_PARAM, c, pdt, "zeros", e->loc);
        if (bn) {
            in[nin++] = implicit_param(L, prefix, "running_mean", IR_VAL_STATE, c, pdt, "zeros", e->loc);
            in[nin++] = implicit_param(L, prefix, "running_var", IR_VAL_STATE, c, pdt, "ones", e->loc);
        }
    }
    if (op == IR_OP_BATCHNORM && nin == 5)
        for (int i = 3; i < 5; i++)
            if (!ir_is_persistent(ir_val(L->g, in[i])))
                fail_at(L, e->loc, "batchnorm: the running statistics (operands 4 and 5) must be declared, not computed");
    /* Check the operand count here so the message names the call. */
    if (nin < info->min_in || (info->max_in >= 0 && nin > info->max_in)) {
        if (info->min_in == info->max_in)
            fail_at(L, e->loc, "%s takes %d tensor operand%s, got %d", info->name, info->min_in,
                    info->min_in == 1 ? "" : "s", nin);
        fail_at(L, e->loc, "%s takes %d to %d tensor operands, got %d", info->name, info->min_in,
                info->max_in, nin);
    }
    if (precision)
        ir_attrs_set_str(attrs, "_precision", precision);
    int v = emit(L, f, op, in, nin, attrs, e->loc);
    ir_attrs_free(attrs);
    return tensor_lv(v, e->loc);
}

/* Calls that are neither defs nor ops: casts and shape queries. */
static bool call_builtin(lower *L, frame *f, const ast_expr *e, lv *out)
{
    int dt = ir_dtype_from_name(e->s);
    bool is_channels = !strcmp(e->s, "channels"), is_dim = !strcmp(e->s, "dim");
    if (dt < 0 && !is_channels && !is_dim)
        return false;
    call_args ca;
    eval_args(L, f, e, &ca);
    if (ca.nkw)
        fail_at(L, ca.kw[0]->loc, "%s takes no keyword arguments", e->s);
    int want = is_dim ? 2 : 1;
    if (ca.npos != want)
        fail_at(L, e->loc, "%s takes %d argument%s, got %d", e->s, want, want == 1 ? "" : "s", ca.npos);
    lv *x = &ca.pos[0];
    if (dt >= 0) {
        if (x->kind == LV_NUM) {
            *out = *x;
            return true;
        }
        int v = as_tensor(L, f, x, IR_F32, "the operand of a cast");
        if (ir_val(L->g, v)->type.dtype == (ir_dtype)dt) {
            *out = *x;
            return true;
        }
        ir_attrs a = {0};
        ir_attrs_set_str(&a, "to", e->s);
        int r = emit(L, f, IR_OP_CAST, &v, 1, &a, e->loc);
        ir_attrs_free(&a);
        *out = tensor_lv(r, e->loc);
        return true;
    }
    if (x->kind != LV_TENSOR) {
        if (x->kind == LV_STR && x->word)
            unknown_name(L, x);
        fail_at(L, x->loc, "%s needs a tensor, not %s", e->s, lv_kind_words(x));
    }
    const ir_type *t = type_of(L, x);
    double axis = 1;
    if (is_dim) {
        axis = as_number(L, &ca.pos[1], "the axis");
        if (axis != floor(axis))
            fail_at(L, ca.pos[1].loc, "the axis must be an integer");
    }
    /* Range-checked as a double: a huge axis must not reach an int. */
    if (axis < -t->rank || axis >= t->rank)
        fail_at(L, e->loc, "%s: axis %g is out of range for rank %d", e->s, axis, t->rank);
    int ax = axis < 0 ? (int)axis + t->rank : (int)axis;
    *out = num_lv((double)t->dim[ax], true, e->loc);
    return true;
}

static lv call(lower *L, frame *f, const ast_expr *e)
{
    const ast_def *d = find_def(L, e->s);
    if (d)
        return call_def(L, f, e, d);
    lv out;
    if (call_builtin(L, f, e, &out))
        return out;
    int op = ir_op_from_name(e->s);
    if (op >= 0 && (ir_ops[op].flags & IR_F_USER))
        return call_op(L, f, e, op);
    fail_at(L, e->loc, "unknown function '%s'", e->s);
}

/* ---- statements ---- */

/* Evaluates a declared type's dimensions to sizes. */
static void eval_type(lower *L, frame *f, const ast_type *t, ir_dtype dflt, ir_type *out, const char *what)
{
    out->dtype = dflt;
    if (t->dtype) {
        int dt = ir_dtype_from_name(t->dtype);
        if (dt < 0)
            fail_at(L, t->loc, "unknown dtype '%s' (expected u8, i32, i64, f16, bf16, f32 or f64)", t->dtype);
        out->dtype = dt;
    } else if (dflt == IR_NONE) {
        fail_at(L, t->loc, "%s needs a dtype, such as f32[...]", what);
    }
    if (!t->has_dims)
        fail_at(L, t->loc, "%s needs a shape, such as [batch, 10]", what);
    out->rank = 0;
    int64_t total = 1;
    for (const ast_arg *a = t->dims; a; a = a->next) {
        if (out->rank == IR_MAX_RANK)
            fail_at(L, a->loc, "more than %d dimensions", IR_MAX_RANK);
        lv d = eval(L, f, a->value);
        if (d.kind == LV_STR && d.word)
            fail_at(L, d.loc, "unknown dimension '%s'", d.s);
        int64_t n = as_dim(L, &d, "a dimension");
        if (total > ((int64_t)1 << 40) / n)
            fail_at(L, a->loc, "%s is too large", what);
        total *= n;
        out->dim[out->rank++] = n;
    }
}

/* Initializers a param may name; the spec fills their defaults. */
static const struct {
    const char *name, *spec;
} inits[] = {
    {"zeros", ""},
    {"ones", ""},
    {"constant", "value:float"},
    {"normal", "mean:float=0 std:float=0.01"},
    {"uniform", "low:float=-0.05 high:float=0.05"},
    {"xavier", "gain:float=1"},
    {"kaiming", "gain:float=1.4142135623730951"},
};

static void param_init(lower *L, frame *f, const ast_arg *opt, ir_attrs *attrs, int rank)
{
    ir_attr_val *v = &L->tmp_val;
    kl_loc loc = opt ? opt->loc : (kl_loc){0, 0};
    if (!opt) {
        *v = ir_attr_val_str(rank >= 2 ? "xavier" : "zeros");
    } else {
        const ast_expr *e = opt->value;
        loc = e->loc;
        if (e->kind == AST_IDENT) {
            *v = ir_attr_val_str(e->s);
        } else if (e->kind == AST_CALL) {
            call_args ca;
            eval_args(L, f, e, &ca);
            v->kind = IR_ATTR_CALL;
            v->s = kl_xstrdup(e->s);
            v->args = kl_xcalloc(1, sizeof *v->args);
            for (int i = 0; i < ca.npos + ca.nkw; i++) {
                bool pos = i < ca.npos;
                ir_attr at = {kl_xstrdup(pos ? "" : ca.kw[i - ca.npos]->name), {0},
                              pos ? ca.pos_loc[i] : ca.kw[i - ca.npos]->loc};
                kl_vec_push(*v->args, at);
                to_attr(L, pos ? &ca.pos[i] : &ca.kwval[i - ca.npos], e->s, &v->args->v[i].val);
            }
        } else {
            fail_at(L, e->loc, "init must name an initializer, such as kaiming or normal(std = 0.02)");
        }
    }
    size_t k;
    for (k = 0; k < KL_ARRAY_LEN(inits) && strcmp(inits[k].name, v->s); k++)
        ;
    if (k == KL_ARRAY_LEN(inits))
        fail_at(L, loc, "unknown initializer '%s' (expected zeros, ones, constant, normal, uniform, xavier or kaiming)", v->s);
    if (v->kind == IR_ATTR_STR && inits[k].spec[0]) {
        /* A bare name: the call with its defaults, so the dump shows them. */
        v->kind = IR_ATTR_CALL;
        v->args = kl_xcalloc(1, sizeof *v->args);
    }
    if (v->kind == IR_ATTR_CALL) {
        char err[256];
        if (ir_spec_normalize(inits[k].spec, inits[k].name, v->args, err, sizeof err))
            fail_at(L, loc, "%s", err);
        if (!v->args->n) {
            ir_attrs_free(v->args);
            free(v->args);
            v->args = NULL;
            v->kind = IR_ATTR_STR;
        }
    }
    ir_attrs_set(attrs, "init", *v);
    memset(v, 0, sizeof *v);
}

static void exec_param(lower *L, frame *f, const ast_stmt *s)
{
    if (lookup(f, s->name) && lookup(f, s->name)->val.kind == LV_TENSOR) {
        const ir_value *old = ir_val(L->g, lookup(f, s->name)->val.v);
        if (old->kind == IR_VAL_PARAM && !strcmp(old->name, scoped(L, f, s->name)))
            fail_at(L, s->name_loc, "param '%s' is declared twice", s->name);
    }
    ir_type t;
    eval_type(L, f, s->type, IR_F32, &t, "a param");
    if (!ir_dtype_is_float(t.dtype))
        fail_at(L, s->type->loc, "a param must have a float dtype (f16, bf16, f32 or f64), not %s",
                ir_dtype_name(t.dtype));
    const ast_arg *init = NULL;
    int decay = -1;
    for (const ast_arg *o = s->opts; o; o = o->next) {
        for (const ast_arg *q = s->opts; q != o; q = q->next)
            if (!strcmp(q->name, o->name))
                fail_at(L, o->loc, "param option '%s' is given twice", o->name);
        if (!strcmp(o->name, "init")) {
            init = o;
        } else if (!strcmp(o->name, "decay")) {
            lv d = eval(L, f, o->value);
            double x = as_number(L, &d, "decay");
            if (x != 0 && x != 1)
                fail_at(L, o->value->loc, "decay must be 0 or 1");
            decay = (int)x;
        } else {
            fail_at(L, o->loc, "unknown param option '%s' (options: init, decay)", o->name);
        }
    }
    const char *name = scoped(L, f, s->name);
    if (ir_find_value(L->g, name) >= 0)
        fail_at(L, s->name_loc, "'%s' is already defined", s->name);
    int id = ir_declare(L->g, IR_VAL_PARAM, name, &t, s->loc);
    param_init(L, f, init, &ir_val(L->g, id)->attrs, t.rank);
    if (decay >= 0)
        ir_attrs_set_int(&ir_val(L->g, id)->attrs, "decay", decay);
    bind(L, f, s->name, tensor_lv(id, s->name_loc));
}

static void exec_input(lower *L, frame *f, const ast_stmt *s)
{
    if (f->def)
        fail_at(L, s->loc, "inputs are declared in the model block, not inside a def");
    if (lookup(f, s->name))
        fail_at(L, s->name_loc, "'%s' is already defined", s->name);
    ir_type t;
    eval_type(L, f, s->type, IR_NONE, &t, "an input");
    int id = ir_declare(L->g, IR_VAL_INPUT, s->name, &t, s->loc);
    bind(L, f, s->name, tensor_lv(id, s->name_loc));
}

static void exec_report(lower *L, frame *f, const ast_stmt *s)
{
    if (f->def)
        fail_at(L, s->loc, "report belongs in the model block, not inside a def");
    const char *name = s->name;
    if (!name) {
        if (s->value->kind != AST_CALL)
            fail_at(L, s->value->loc, "name this metric: report NAME = ...");
        name = s->value->s;
    }
    for (int i = 0; i < L->g->reports.n; i++)
        if (!strcmp(L->g->reports.v[i].name, name))
            fail_at(L, s->name ? s->name_loc : s->value->loc, "metric '%s' is reported twice", name);
    lv v = eval(L, f, s->value);
    if (v.kind != LV_TENSOR || type_of(L, &v)->rank != 0)
        fail_at(L, s->value->loc, "a reported metric must be a scalar tensor");
    ir_report r = {kl_xstrdup(name), v.v};
    kl_vec_push(L->g->reports, r);
}

/* Runs statements; returns what a return statement gave (LV_NONE when
 * there is none). */
static lv exec_body(lower *L, frame *f, const ast_stmt *body)
{
    for (const ast_stmt *s = body; s; s = s->next) {
        int first_new = L->g->values.n;
        switch (s->kind) {
        case AST_ASSIGN: {
            lv v = eval(L, f, s->value);
            if (v.kind == LV_NONE)
                fail_at(L, s->value->loc, "this call returns nothing");
            /* A value made by this statement takes the binding's name. */
            if (v.kind == LV_TENSOR && v.v >= first_new) {
                ir_rename_value(L->g, v.v, ir_unique_name(L->g, scoped(L, f, s->name)));
            }
            bind(L, f, s->name, v);
            break;
        }
        case AST_PARAM:
            exec_param(L, f, s);
            break;
        case AST_INPUT:
            exec_input(L, f, s);
            break;
        case AST_REPORT:
            exec_report(L, f, s);
            break;
        case AST_RETURN:
            if (!f->def)
                fail_at(L, s->loc, "return is only allowed inside a def");
            if (s->next)
                fail_at(L, s->next->loc, "statement after return");
            return eval(L, f, s->value);
        }
    }
    return (lv){.kind = LV_NONE};
}

/* ---- the train block ---- */

/* Converts a train block value in place: out is already owned by the
 * graph, so an error part-way leaves nothing unowned. */
static void expr_to_attr(lower *L, const ast_expr *e, int depth, ir_attr_val *out)
{
    if (depth > 16)
        fail_at(L, e->loc, "value nested too deeply");
    out->loc = e->loc;
    switch (e->kind) {
    case AST_NUM:
        *out = e->is_int ? ir_attr_val_int(e->ival) : ir_attr_val_float(e->num);
        break;
    case AST_STR:
    case AST_IDENT:
        *out = ir_attr_val_str(e->s);
        break;
    case AST_NEG:
    case AST_BINOP: {
        frame top = {0};
        lv n = eval(L, &top, e);
        if (n.kind != LV_NUM)
            fail_at(L, e->loc, "expected a number here");
        *out = n.is_int ? ir_attr_val_int(n.i) : ir_attr_val_float(n.f);
        break;
    }
    case AST_LIST: {
        int n = 0;
        for (ast_arg *a = e->args; a; a = a->next)
            n++;
        out->kind = IR_ATTR_LIST;
        out->items = kl_xcalloc((size_t)(n ? n : 1), sizeof *out->items);
        for (ast_arg *a = e->args; a; a = a->next)
            expr_to_attr(L, a->value, depth + 1, &out->items[out->nitems++]);
        break;
    }
    case AST_CALL:
        out->kind = IR_ATTR_CALL;
        out->s = kl_xstrdup(e->s);
        out->args = kl_xcalloc(1, sizeof *out->args);
        for (ast_arg *a = e->args; a; a = a->next) {
            ir_attr at = {kl_xstrdup(a->name ? a->name : ""), {0}, a->loc};
            kl_vec_push(*out->args, at);
            expr_to_attr(L, a->value, depth + 1, &out->args->v[out->args->n - 1].val);
        }
        break;
    }
    out->loc = e->loc;
}

static int lower_train(lower *L, const ast_block *train, const kl_lower_opts *opts)
{
    ir_attrs *t = &L->g->train;
    for (const ast_arg *a = train ? train->items : NULL; a; a = a->next) {
        ir_attr at = {kl_xstrdup(a->name), {0}, a->loc};
        kl_vec_push(*t, at);
        expr_to_attr(L, a->value, 0, &t->v[t->n - 1].val);
    }
    if (kl_train_check(t, L->src))
        return -1;
    if (kl_train_set_all(t, opts ? opts->overrides : NULL))
        return -1;
    L->batch = ir_attr_int(t, "batch", 32);
    if (!ir_attrs_find(t, "batch"))
        ir_attrs_set_int(t, "batch", L->batch);
    return 0;
}

/* ---- the whole program ---- */

/* Every def that keep_fp32 names must be called (as for recompute): a
 * misspelt name would otherwise leave its calls in low precision. */
static void check_kept_defs(lower *L)
{
    ir_attr *a = ir_attrs_find(&L->g->train, "keep_fp32");
    for (int i = 0; a && a->val.kind == IR_ATTR_LIST && i < a->val.nitems; i++) {
        const ir_attr_val *item = &a->val.items[i];
        if (item->kind != IR_ATTR_STR)
            continue;
        bool called = false;
        for (int k = 0; k < L->called.n && !called; k++)
            called = !strcmp(L->called.v[k]->name, item->s);
        if (!called)
            fail_at(L, item->loc.line > 0 ? item->loc : a->loc,
                    "keep_fp32 names '%s', but the model calls no def of that name", item->s);
    }
}

static void lower_program(lower *L, const ast_program *prog, const kl_lower_opts *opts)
{
    const kl_source *src = L->src;
    const ast_block *model = NULL, *train = NULL;
    for (const ast_item *it = prog->items; it; it = it->next) {
        if (it->kind == AST_ITEM_DEF) {
            const ast_def *d = it->def;
            const ast_def *old = find_def(L, d->name);
            if (old) {
                kl_error_at(src, d->loc, "def '%s' is defined twice", d->name);
                kl_note_at(src, old->loc, "the first definition is here");
                bail(L);
            }
            int op = ir_op_from_name(d->name);
            if ((op >= 0 && (ir_ops[op].flags & IR_F_USER)) || ir_dtype_from_name(d->name) >= 0 ||
                !strcmp(d->name, "channels") || !strcmp(d->name, "dim"))
                fail_at(L, d->loc, "def '%s' would hide the built-in of that name", d->name);
            for (const ast_param *p = d->params; p; p = p->next)
                for (const ast_param *q = d->params; q != p; q = q->next)
                    if (!strcmp(p->name, q->name))
                        fail_at(L, p->loc, "parameter '%s' is declared twice", p->name);
            kl_vec_push(L->defs, d);
        } else if (it->kind == AST_ITEM_MODEL) {
            if (model) {
                kl_error_at(src, it->block->loc, "a file holds one model block");
                kl_note_at(src, model->loc, "the first model block is here");
                bail(L);
            }
            model = it->block;
        } else {
            if (train) {
                kl_error_at(src, it->block->loc, "a file holds one train block");
                kl_note_at(src, train->loc, "the first train block is here");
                bail(L);
            }
            train = it->block;
        }
    }
    if (!model)
        fail_at(L, (kl_loc){1, 1}, "no model block in this file (expected: model NAME { ... })");
    L->g = ir_graph_new(model->name);
    L->g->source = kl_xstrdup(src->name);
    if (lower_train(L, train, opts))
        bail(L);
    frame top = {0};
    exec_body(L, &top, model->body);
    binding *loss = lookup(&top, "loss");
    if (loss) {
        if (loss->val.kind != LV_TENSOR || type_of(L, &loss->val)->rank != 0 ||
            !ir_dtype_is_float(type_of(L, &loss->val)->dtype))
            fail_at(L, loss->val.loc, "the loss must be a float scalar, such as cross_entropy(logits, label)");
        L->g->loss = loss->val.v;
    }
    check_kept_defs(L);
    ir_graph_mark_pass(L->g, "lower");
}

ir_graph *kl_lower(const kl_source *src, const ast_program *prog, const kl_lower_opts *opts)
{
    lower L = {.src = src};
    if (setjmp(L.fail)) {
        ir_attrs_free(&L.tmp_attrs);
        ir_attr_val_free(&L.tmp_val);
        kl_arena_free(&L.arena);
        kl_vec_free(L.defs);
        kl_vec_free(L.called);
        ir_graph_free(L.g);
        return NULL;
    }
    lower_program(&L, prog, opts);
    kl_arena_free(&L.arena);
    kl_vec_free(L.defs);
    kl_vec_free(L.called);
    return L.g;
}

static bool looks_like_ir(const kl_source *src)
{
    const char *p = src->text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (*p != '#')
            break;
        while (*p && *p != '\n')
            p++;
    }
    return !strncmp(p, "graph ", 6) || !strncmp(p, "graph\t", 6);
}

ir_graph *kl_load_source(const kl_source *src, const kl_lower_opts *opts)
{
    if (src->len > ((size_t)1 << 28)) {
        kl_error("%s: file too large for a model (%zu bytes)", src->name, src->len);
        return NULL;
    }
    ir_graph *g;
    size_t n = strlen(src->name);
    if ((n > 4 && !strcmp(src->name + n - 4, ".kir")) || looks_like_ir(src)) {
        g = ir_parse(src);
        if (g && kl_train_check(&g->train, src)) {
            ir_graph_free(g);
            return NULL;
        }
        for (int i = 0; g && opts && opts->overrides && opts->overrides[i]; i += 2) {
            if (!strcmp(opts->overrides[i], "batch")) {
                kl_error("%s: --batch cannot change an IR dump (its shapes are fixed); rebuild from the model file",
                         src->name);
                ir_graph_free(g);
                return NULL;
            }
        }
        if (g && kl_train_set_all(&g->train, opts ? opts->overrides : NULL)) {
            ir_graph_free(g);
            return NULL;
        }
    } else {
        ast_program prog;
        if (ast_parse(src, &prog))
            return NULL;
        g = kl_lower(src, &prog, opts);
        ast_program_free(&prog);
    }
    if (g && ir_verify(g)) {
        ir_graph_free(g);
        kl_panic("the graph of %s fails the verifier right after loading", src->name);
    }
    return g;
}

ir_graph *kl_load(const char *path, const kl_lower_opts *opts)
{
    kl_source src;
    if (kl_source_read(&src, path))
        return NULL;
    ir_graph *g = kl_load_source(&src, opts);
    kl_source_free(&src);
    return g;
}
