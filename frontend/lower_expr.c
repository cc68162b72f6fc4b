/* Lowering: frames and names, lowered values, and expressions (numbers,
 * names, arithmetic, lists). See lower.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_state.h"

/* ---- frames and names ---- */

void lower_bind(lower *L, frame *f, const char *name, lv val)
{
    binding *b = kl_arena_alloc(&L->arena, sizeof *b);
    b->name = name;
    b->val = val;
    b->next = f->vars;
    f->vars = b;
}

binding *lower_lookup(frame *f, const char *name)
{
    for (binding *b = f->vars; b; b = b->next)
        if (!strcmp(b->name, name))
            return b;
    return NULL;
}

/* The next instance number of name called from frame f. */
int lower_next_instance(lower *L, frame *f, const char *name)
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
char *lower_scoped(lower *L, frame *f, const char *name)
{
    if (!f->path)
        return kl_arena_strdup(&L->arena, name);
    char *s = kl_xasprintf("%s.%s", f->path, name);
    char *a = kl_arena_strdup(&L->arena, s);
    free(s);
    return a;
}

const ast_def *lower_find_def(lower *L, const char *name)
{
    for (int i = 0; i < L->defs.n; i++)
        if (!strcmp(L->defs.v[i]->name, name))
            return L->defs.v[i];
    return NULL;
}

/* ---- values ---- */

KL_NORETURN void lower_unknown_name(lower *L, const lv *v)
{
    lower_fail_at(L, v->loc, "unknown name '%s'", v->s);
}

/* Emits a node and infers its types; errors point at loc. */
int lower_emit(lower *L, frame *f, ir_op op, const int *in, int nin, ir_attrs *attrs, kl_loc loc)
{
    ir_type types[64];
    if (nin > 64)
        lower_fail_at(L, loc, "%s: too many operands", ir_op_name(op));
    for (int i = 0; i < nin; i++)
        types[i] = ir_val(L->g, in[i])->type;
    ir_attrs empty = {0};
    ir_infer inf = {.op = op, .nin = nin, .in = types, .attrs = attrs ? attrs : &empty};
    if (ir_infer_run(&inf)) {
        ir_attrs_free(&empty);
        lower_fail_at(L, loc, "%s", inf.err);
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
    int v = lower_emit(L, f, IR_OP_CONST, NULL, 0, &a, loc);
    ir_attrs_free(&a);
    return v;
}

/* A tensor operand from v; numbers become scalar constants of dtype dt. */
int lower_as_tensor(lower *L, frame *f, const lv *v, ir_dtype dt, const char *what)
{
    switch (v->kind) {
    case LV_TENSOR:
        return v->v;
    case LV_NUM:
        return emit_const(L, f, v->f, dt, v->loc);
    case LV_STR:
        if (v->word)
            lower_unknown_name(L, v);
        /* fallthrough */
    default:
        lower_fail_at(L, v->loc, "%s must be a tensor, not %s", what, lower_kind_words(v));
    }
}

double lower_as_number(lower *L, const lv *v, const char *what)
{
    if (v->kind == LV_STR && v->word)
        lower_unknown_name(L, v);
    if (v->kind != LV_NUM)
        lower_fail_at(L, v->loc, "%s must be a number, not %s", what, lower_kind_words(v));
    return v->f;
}

int64_t lower_as_dim(lower *L, const lv *v, const char *what)
{
    double x = lower_as_number(L, v, what);
    if (x != floor(x) || x < 1 || x > 1e12)
        lower_fail_at(L, v->loc, "%s must be a positive integer, got %g", what, x);
    return (int64_t)x;
}

/* An attribute value from a lowered value (tensors are not attributes),
 * written in place into out, which its owner already holds. */
void lower_to_attr(lower *L, const lv *v, const char *what, ir_attr_val *out)
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
            lower_to_attr(L, &v->items[i], what, &out->items[out->nitems++]);
        break;
    default:
        lower_fail_at(L, v->loc, "%s must be a number, a name or a list, not %s", what, lower_kind_words(v));
    }
    out->loc = v->loc;
}

/* ---- expressions ---- */

static bool is_comparison(int op)
{
    return op == '<' || op == '>' || op == AST_OP_LE || op == AST_OP_GE || op == AST_OP_EQ || op == AST_OP_NE;
}

static const char *op_spelling(int op)
{
    switch (op) {
    case AST_OP_LE: return "'<='";
    case AST_OP_GE: return "'>='";
    case AST_OP_EQ: return "'=='";
    case AST_OP_NE: return "'!='";
    case AST_OP_POW: return "'**'";
    case '+': return "'+'";
    case '-': return "'-'";
    case '*': return "'*'";
    case '/': return "'/'";
    case '<': return "'<'";
    case '>': return "'>'";
    default: return "'@'";
    }
}

/* Two numbers: the result as a number (a comparison gives 1 or 0). */
static lv fold(lower *L, int op, lv a, lv b, kl_loc loc)
{
    double x = a.f, y = b.f, r = 0;
    bool is_int = a.is_int && b.is_int;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/':
        if (y == 0)
            lower_fail_at(L, loc, "division by zero");
        r = x / y;
        is_int = is_int && r == floor(r);
        break;
    case AST_OP_POW:
        r = pow(x, y);
        is_int = is_int && y >= 0 && r == floor(r);
        break;
    case '<': r = x < y; is_int = true; break;
    case '>': r = x > y; is_int = true; break;
    case AST_OP_LE: r = x <= y; is_int = true; break;
    case AST_OP_GE: r = x >= y; is_int = true; break;
    case AST_OP_EQ: r = x == y; is_int = true; break;
    case AST_OP_NE: r = x != y; is_int = true; break;
    }
    return num_lv(r, is_int && fabs(r) < 9e15, loc);
}

/* A binary operator. The comparisons give 1 or 0 in their operands'
 * dtype (as the ops ge and eq do); a < b is gt(b, a) and a <= b is
 * ge(b, a), the same comparison with the operands swapped, so that the
 * op table needs no lt or le row: IEEE comparisons are false with a NaN
 * either way round, and != (ne) is true. */
static lv arith(lower *L, frame *f, int op, lv a, lv b, kl_loc loc)
{
    if (a.kind == LV_NUM && b.kind == LV_NUM && op != '@')
        return fold(L, op, a, b, loc);
    if (a.kind == LV_STR && a.word)
        lower_unknown_name(L, &a);
    if (b.kind == LV_STR && b.word)
        lower_unknown_name(L, &b);
    const char *opname = op_spelling(op);
    if (a.kind != LV_TENSOR && b.kind != LV_TENSOR)
        lower_fail_at(L, loc, "operands of %s must be tensors or numbers, not %s and %s", opname,
                lower_kind_words(&a), lower_kind_words(&b));
    if (op == '@' && (a.kind != LV_TENSOR || b.kind != LV_TENSOR))
        lower_fail_at(L, loc, "both operands of '@' must be tensors");
    ir_dtype dt = a.kind == LV_TENSOR ? type_of(L, &a)->dtype : type_of(L, &b)->dtype;
    int in[2] = {lower_as_tensor(L, f, &a, dt, opname), lower_as_tensor(L, f, &b, dt, opname)};
    ir_op irop;
    switch (op) {
    case '+': irop = IR_OP_ADD; break;
    case '-': irop = IR_OP_SUB; break;
    case '*': irop = IR_OP_MUL; break;
    case '/': irop = IR_OP_DIV; break;
    case AST_OP_POW: irop = IR_OP_POW; break;
    case '>': irop = IR_OP_GT; break;
    case AST_OP_GE: irop = IR_OP_GE; break;
    case AST_OP_EQ: irop = IR_OP_EQ; break;
    case AST_OP_NE: irop = IR_OP_NE; break;
    case '<': irop = IR_OP_GT; break;
    case AST_OP_LE: irop = IR_OP_GE; break;
    default: irop = IR_OP_MATMUL; break;
    }
    if (op == '<' || op == AST_OP_LE) {
        int t = in[0];
        in[0] = in[1];
        in[1] = t;
    }
    return tensor_lv(lower_emit(L, f, irop, in, 2, NULL, loc), loc);
}

static lv eval_expr(lower *L, frame *f, const ast_expr *e);

lv lower_eval(lower *L, frame *f, const ast_expr *e)
{
    if (L->depth >= MAX_EVAL_DEPTH)
        lower_fail_at(L, e->loc, "expressions and calls nested more than %d deep (split this into several statements)",
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
        binding *b = lower_lookup(f, e->s);
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
        /* Python reads a < b < c as a < b and b < c; refuse it rather
         * than compare a mask with c. */
        if (is_comparison(e->op) && e->a->kind == AST_BINOP && is_comparison(e->a->op) && !e->a->paren)
            lower_fail_at(L, e->loc, "comparisons do not chain: %s after %s (write (a < b) * (b < c) for both, "
                          "or parenthesize to compare a mask)", op_spelling(e->op), op_spelling(e->a->op));
        lv a = lower_eval(L, f, e->a), b = lower_eval(L, f, e->b);
        return arith(L, f, e->op, a, b, e->loc);
    }
    case AST_NEG: {
        lv a = lower_eval(L, f, e->a);
        if (a.kind == LV_NUM) {
            a.f = -a.f;
            a.i = -a.i; /* a literal is at most INT64_MAX, so this cannot overflow */
            a.loc = e->loc;
            return a;
        }
        if (a.kind == LV_STR && a.word)
            lower_unknown_name(L, &a);
        if (a.kind != LV_TENSOR)
            lower_fail_at(L, e->loc, "cannot negate %s", lower_kind_words(&a));
        return tensor_lv(lower_emit(L, f, IR_OP_NEG, &a.v, 1, NULL, e->loc), e->loc);
    }
    case AST_CALL:
        if (!e->s[0])
            lower_fail_at(L, e->loc, "a group (key = value, ...) is a train setting's value, not a model expression");
        return lower_call(L, f, e);
    case AST_LIST: {
        int n = 0;
        for (ast_arg *a = e->args; a; a = a->next)
            n++;
        lv v = {.kind = LV_LIST, .n = n, .loc = e->loc};
        v.items = kl_arena_alloc(&L->arena, sizeof(lv) * (size_t)(n ? n : 1));
        n = 0;
        for (ast_arg *a = e->args; a; a = a->next)
            v.items[n++] = lower_eval(L, f, a->value);
        return v;
    }
    }
    kl_panic("unknown expression kind %d", e->kind);
}
