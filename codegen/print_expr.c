/* The expression printer every target shares (see print_expr.h), and the
 * two target descriptions. */
#include <string.h>

#include "base/scalar.h"
#include "print_expr.h"

/* ---- the targets ---- */

/* The shared formats. RELU, MAX and MIN have none: each target keeps NaN
 * its own way (C: selects that vectorise without -ffast-math, kl_max_d for
 * f64; CUDA: overloads). */
static const char *const un_shared[KIR_NUNOPS] = {
    [KU_NEG] = "(-%a)",
    [KU_EXP] = "exp%f(%a)",
    [KU_LOG] = "log%f(%a)",
    [KU_SQRT] = "sqrt%f(%a)",
    /* 1 / sqrt, IEEE on both targets (CUDA's rsqrtf is an approximation) */
    [KU_RSQRT] = "(%1 / sqrt%f(%a))",
    [KU_TANH] = "tanh%f(%a)",
    [KU_SIGMOID] = "(%1 / (%1 + exp%f(-(%a))))",
    [KU_ABS] = "fabs%f(%a)",
    [KU_NOT] = "(!%a)",
    [KU_ERF] = "erf%f(%a)",
    [KU_NPDF] = "(0.3989422804014327%f * exp%f(-0.5%f * ((%a) * (%a))))",
    [KU_EXP_NONPOS] = "exp%f(%a)",
    [KU_ROUND_F32] = "(%T)(float)(%a)",
    [KU_ISFINITE] = "(%T)(isfinite(%a) ? 1 : 0)",
    [KU_UNIFORM] = "(%T)kl_rand(ka->seed, ka->step, %iull, (%u)(%a))",
};

static const char *const bin_shared[KIR_NBINOPS] = {
    [KB_ADD] = "(%a + %b)", [KB_SUB] = "(%a - %b)", [KB_MUL] = "(%a * %b)", [KB_DIV] = "(%a / %b)",
    [KB_POW] = "pow%f(%a, %b)",
    [KB_LT] = "(%a < %b)", [KB_LE] = "(%a <= %b)", [KB_GT] = "(%a > %b)", [KB_GE] = "(%a >= %b)",
    [KB_EQ] = "(%a == %b)", [KB_NE] = "(%a != %b)", [KB_AND] = "(%a && %b)", [KB_OR] = "(%a || %b)",
    [KB_IDIV] = "(%a / %b)", [KB_IMOD] = "(%a %% %b)",
};

/* Integer max and min (indices): plain selects on both targets. */
static const char imax[] = "((%a) > (%b) ? (%a) : (%b))", imin[] = "((%a) < (%b) ? (%a) : (%b))";

const kir_target kir_target_c = {
    .i64 = "int64_t",
    .u64 = "uint64_t",
    .storage = {[IR_U8] = "uint8_t", [IR_I32] = "int32_t", [IR_I64] = "int64_t", [IR_F16] = "uint16_t",
                [IR_BF16] = "uint16_t", [IR_F32] = "float", [IR_F64] = "double"},
    .load = {[IR_U8] = "(int64_t)", [IR_I32] = "(int64_t)", [IR_I64] = "(int64_t)", [IR_F16] = "kl_f16_to_f32",
             [IR_BF16] = "kl_bf16_to_f32", [IR_F32] = "", [IR_F64] = ""},
    .store = {[IR_F16] = "kl_f32_to_f16", [IR_BF16] = "kl_f32_to_bf16"},
    .load_scalar = {[IR_F16] = "kl_f16_to_f32_f16c"},
    .nan = {"(float)NAN", "NAN"},
    .inf = {"(float)INFINITY", "INFINITY"},
    .ninf = {"-(float)INFINITY", "-INFINITY"},
    /* 1 - c: with !c, gcc turns c & !d into branches and leaves the loop
     * scalar (max-pooling's backward, measured 3x slower). */
    .not_cond = "(1 - %a)",
    /* Conditions are 0 or 1: & and | give the value of && and || without
     * the branch short-circuiting needs (&& stays where it guards a load). */
    .cond_and = "(%a & %b)",
    .cond_or = "(%a | %b)",
    /* Selects in the prelude: they vectorise (fmaxf's NaN rule does not)
     * and keep NaN, as in PyTorch. */
    /* exp, log, pow, tanh, erf and the density keep the shared formats:
     * the prelude declares glibc's vector variants of them (base/scalar.h
     * vecmath), so their loops vectorise; the sigmoid is the prelude's
     * form that does not overflow. */
    .un = {[KU_RELU] = "kl_relu%d(%a)", [KU_SIGMOID] = "kl_sigmoid%d(%a)"},
    .bin = {[KB_MAX] = "kl_max%d(%a, %b)", [KB_MIN] = "kl_min%d(%a, %b)"},
};

const kir_target kir_target_cuda = {
    .i64 = "long long",
    .u64 = "unsigned long long",
    .storage = {[IR_U8] = "unsigned char", [IR_I32] = "int", [IR_I64] = "long long", [IR_F16] = "__half",
                [IR_BF16] = "__nv_bfloat16", [IR_F32] = "float", [IR_F64] = "double"},
    .load = {[IR_U8] = "(long long)", [IR_I32] = "(long long)", [IR_I64] = "(long long)", [IR_F16] = "__half2float",
             [IR_BF16] = "__bfloat162float", [IR_F32] = "", [IR_F64] = ""},
    .store = {[IR_F16] = "__float2half_rn", [IR_BF16] = "__float2bfloat16_rn"},
    .nan = {"KL_NAN", "KL_NAN_D"},
    .inf = {"KL_INF", "KL_INF_D"},
    .ninf = {"-KL_INF", "-KL_INF_D"},
    /* kl_max and kl_min are overloads (prelude): the casts pick one. */
    .un = {[KU_RELU] = "kl_max((%T)(%a), %0)"},
    .bin = {[KB_MAX] = "kl_max((%T)(%a), (%T)(%b))", [KB_MIN] = "kl_min((%T)(%a), (%T)(%b))"},
};

/* ---- types and names ---- */

const char *kir_print_ctype(const kir_target *t, kir_type ty)
{
    switch (ty) {
    case KT_I64: return t->i64;
    case KT_F32: return "float";
    case KT_F64: return "double";
    case KT_BOOL: return "int";
    }
    kl_panic("unknown kernel type %d", (int)ty);
}

const char *kir_print_storage(const kir_target *t, ir_dtype dt)
{
    if (dt <= IR_NONE || dt >= IR_NDTYPES || !t->storage[dt])
        kl_panic("no element type for %s", ir_dtype_name(dt));
    return t->storage[dt];
}

const char *kir_print_var(const kir_printer *p, int v)
{
    if (p->used)
        p->used[v] = 1;
    return p->rename && p->rename[v] ? p->rename[v] : p->k->var_names[v];
}

const char *kir_print_acc_init(const kir_target *t, kir_acc_op op, kir_type ty)
{
    int d = ty == KT_F64;
    switch (op) {
    case KA_SUM: return d ? "0.0" : "0.0f";
    case KA_MAX: return t->ninf[d];
    case KA_MIN: return t->inf[d];
    }
    return "0";
}

void kir_print_indent(kir_printer *p)
{
    for (int i = 0; i < p->indent; i++)
        kl_buf_puts(p->b, "    ");
}

bool kir_expr_loads(const kir_expr *e)
{
    switch (e->kind) {
    case KE_LOAD: return true;
    case KE_UN:
    case KE_CAST: return kir_expr_loads(e->a);
    case KE_BIN: return kir_expr_loads(e->a) || kir_expr_loads(e->b);
    case KE_SELECT: return kir_expr_loads(e->a) || kir_expr_loads(e->b) || kir_expr_loads(e->c);
    case KE_CONST:
    case KE_VAR:
    case KE_ARG: return false;
    }
    return true;
}

/* ---- expressions ---- */

/* Whether float expression e is an integer constant (or a select between
 * such) within [lo, hi]: it converts exactly, with no helper (dropout's
 * mask stores 1.0 or 0.0 as u8). */
static bool exact_int(const kir_expr *e, double lo, double hi)
{
    if (e->kind == KE_SELECT)
        return exact_int(e->b, lo, hi) && exact_int(e->c, lo, hi);
    return e->kind == KE_CONST && e->f >= lo && e->f <= hi && e->f == (double)(int64_t)e->f;
}

/* Float value of e converted to an integer type whose range is [lo, hi]:
 * defined for NaN and out-of-range values, the same on every target
 * (kl_ftoi, base/scalar.h). Prints the opening; the caller closes ")". */
static bool print_ftoi(kir_printer *p, const kir_expr *e, double lo, double hi)
{
    if ((e->type != KT_F32 && e->type != KT_F64) || exact_int(e, lo, hi))
        return false;
    kl_buf_puts(p->b, e->type == KT_F64 ? "kl_ftoi_d(" : "kl_ftoi(");
    return true;
}

static void print_fconst(kir_printer *p, double f, kir_type t)
{
    int d = t == KT_F64;
    if (f != f) {
        kl_buf_puts(p->b, p->t->nan[d]);
    } else if (f == 1.0 / 0.0 || f == -1.0 / 0.0) {
        kl_buf_puts(p->b, f < 0 ? p->t->ninf[d] : p->t->inf[d]);
    } else {
        char s[64];
        snprintf(s, sizeof s, d ? "%.17g" : "%.9g", f);
        kl_buf_puts(p->b, s);
        if (!strpbrk(s, ".e"))
            kl_buf_puts(p->b, ".0");
        if (!d)
            kl_buf_putc(p->b, 'f');
    }
}

/* Prints a format (see print_expr.h) for expression e of type t. */
static void print_format(kir_printer *p, const char *fmt, const kir_expr *e, kir_type t)
{
    for (const char *c = fmt; *c; c++) {
        if (*c != '%') {
            kl_buf_putc(p->b, *c);
            continue;
        }
        switch (*++c) {
        case 'a': kir_print_expr(p, e->a); break;
        case 'b': kir_print_expr(p, e->b); break;
        case 'T': kl_buf_puts(p->b, kir_print_ctype(p->t, t)); break;
        case 'u': kl_buf_puts(p->b, p->t->u64); break;
        case 'f': kl_buf_puts(p->b, t == KT_F64 ? "" : "f"); break;
        case 'd': kl_buf_puts(p->b, t == KT_F64 ? "_d" : ""); break;
        case '1': kl_buf_puts(p->b, t == KT_F64 ? "1.0" : "1.0f"); break;
        case '0': kl_buf_puts(p->b, t == KT_F64 ? "0.0" : "0.0f"); break;
        case 'i': kl_buf_printf(p->b, "%lld", (long long)e->i); break;
        case '%': kl_buf_putc(p->b, '%'); break;
        default: kl_panic("bad directive %%%c in format \"%s\"", *c, fmt);
        }
    }
}

static bool exact16(const kir_printer *p, ir_dtype dt, const kir_expr *e, int depth, bool *keyed);

static void print_un(kir_printer *p, const kir_expr *e)
{
    kir_type t = e->type;
    const char *fmt = p->t->un[e->op] ? p->t->un[e->op] : un_shared[e->op];
    switch ((kir_unop)e->op) {
    case KU_NOT:
        if (e->a->type == KT_BOOL && p->t->not_cond)
            fmt = p->t->not_cond;
        break;
    case KU_ABS:
        if (t == KT_I64)
            fmt = "llabs(%a)";
        break;
    case KU_ROUND_BF16:
    case KU_ROUND_F16: {
        /* Through the 16-bit storage type and back: the conversions a
         * store and a load make; nothing for a value that is one of
         * its dt loads already (relu's gradient of a loaded dy). */
        ir_dtype dt = e->op == KU_ROUND_BF16 ? IR_BF16 : IR_F16;
        bool keyed = false;
        if (exact16(p, dt, e->a, 0, &keyed)) {
            kl_buf_printf(p->b, "(%s)(", kir_print_ctype(p->t, t));
            kir_print_expr(p, e->a);
            kl_buf_putc(p->b, ')');
            return;
        }
        kl_buf_printf(p->b, "(%s)%s(%s((float)(", kir_print_ctype(p->t, t), p->t->load[dt], p->t->store[dt]);
        kir_print_expr(p, e->a);
        kl_buf_puts(p->b, ")))");
        return;
    }
    default:
        break;
    }
    if (!fmt)
        kl_panic("no format for unary op %d", e->op);
    print_format(p, fmt, e, t);
}

static bool print_eq16(kir_printer *p, const kir_expr *e);

static void print_bin(kir_printer *p, const kir_expr *e)
{
    if (print_eq16(p, e))
        return;
    kir_type t = e->type;
    const char *fmt = p->t->bin[e->op] ? p->t->bin[e->op] : bin_shared[e->op];
    if (t == KT_I64 && (e->op == KB_MAX || e->op == KB_MIN))
        fmt = e->op == KB_MAX ? imax : imin;
    else if (e->op == KB_POW && t == KT_I64)
        t = KT_F32;
    else if ((e->op == KB_AND || e->op == KB_OR) && e->a->type == KT_BOOL && e->b->type == KT_BOOL &&
             !kir_expr_loads(e->b) && (e->op == KB_AND ? p->t->cond_and : p->t->cond_or))
        fmt = e->op == KB_AND ? p->t->cond_and : p->t->cond_or;
    if (!fmt)
        kl_panic("no format for binary op %d", e->op);
    print_format(p, fmt, e, t);
}

void kir_print_expr(kir_printer *p, const kir_expr *e)
{
    kl_buf *b = p->b;
    switch (e->kind) {
    case KE_CONST:
        if (e->type == KT_I64 || e->type == KT_BOOL)
            kl_buf_printf(b, "%lldLL", (long long)e->i);
        else
            print_fconst(p, e->f, e->type);
        return;
    case KE_VAR:
        if (p->inline_var && p->inline_var[e->var]) {
            kl_buf_putc(b, '(');
            kir_print_expr(p, p->inline_var[e->var]);
            kl_buf_putc(b, ')');
            return;
        }
        kl_buf_puts(b, kir_print_var(p, e->var));
        return;
    case KE_ARG:
        if (e->var == 0)
            kl_buf_puts(b, "ka->step");
        else if (e->var == 2)
            kl_buf_printf(b, p->t == &kir_target_c ? "(%s)omp_get_num_threads()" : "(%s)1", p->t->i64);
        else
            kl_buf_printf(b, "(%s)ka->seed", p->t->i64);
        return;
    case KE_LOAD: {
        for (int i = 0; i < p->nstaged; i++) {
            if (p->staged[i] == e) {
                if (p->staged_hits)
                    p->staged_hits[i]++;
                if (p->staged_index && p->staged_index[i])
                    kl_buf_printf(b, "%s[%s]", p->staged_row[i], p->staged_index[i]);
                else
                    kl_buf_printf(b, "%s[%s%s]", p->staged_row[i], kir_print_var(p, p->staged_var),
                                  p->staged_offset ? p->staged_offset : "");
                return;
            }
        }
        const kir_buf *kb = &p->k->bufs[e->buf];
        const char *conv = kb->dtype > IR_NONE && kb->dtype < IR_NDTYPES ? p->t->load[kb->dtype] : NULL;
        if (conv && p->k->scalar_f16 && p->t->load_scalar[kb->dtype])
            conv = p->t->load_scalar[kb->dtype];
        if (!conv)
            kl_panic("cannot load %s", ir_dtype_name(kb->dtype));
        if ((p->lanes >> e->buf) & 1) {
            kl_buf_printf(b, "%s(kl_l%s.v[kl_j])", conv, kb->name);
            return;
        }
        kl_buf_printf(b, "%s(%s[", conv, kb->name);
        kir_print_expr(p, e->a);
        kl_buf_puts(b, "])");
        return;
    }
    case KE_UN:
        print_un(p, e);
        return;
    case KE_BIN:
        print_bin(p, e);
        return;
    case KE_SELECT:
        kl_buf_puts(b, "(");
        kir_print_expr(p, e->a);
        kl_buf_puts(b, " ? ");
        kir_print_expr(p, e->b);
        kl_buf_puts(b, " : ");
        kir_print_expr(p, e->c);
        kl_buf_puts(b, ")");
        return;
    case KE_CAST:
        if (e->type == KT_I64 && print_ftoi(p, e->a, -9.2e18, 9.2e18)) {
            kir_print_expr(p, e->a);
            kl_buf_puts(b, ")");
            return;
        }
        kl_buf_printf(b, "((%s)(", kir_print_ctype(p->t, e->type));
        kir_print_expr(p, e->a);
        kl_buf_puts(b, "))");
        return;
    }
}

/* A 16-bit float stored as loaded from a buffer of its own dtype (im2col,
 * transposes, padding copies) moves its bits: widening and narrowing back
 * would give the same bits for every value but NaN (the narrowing makes
 * NaNs quiet, f16's canonical) and cost two conversions per element,
 * which in f16 are most of such a copy's time. */
static bool is_copy16(const kir_printer *p, ir_dtype dt, const kir_expr *value)
{
    return value->kind == KE_LOAD && p->k->bufs[value->buf].dtype == dt && !((p->lanes >> value->buf) & 1);
}


/* The statement in list s (and the lists inside it) that declares var v,
 * or NULL; *assigned: v is also set or accumulated somewhere. */
static const kir_stmt *find_let(const kir_stmt *s, int v, bool *assigned)
{
    const kir_stmt *found = NULL;
    for (; s; s = s->next) {
        if (s->var == v && (s->kind == KS_SET || s->kind == KS_ACC))
            *assigned = true;
        for (int a = 0; s->kind == KS_LOOP && a < s->naccs; a++)
            *assigned |= s->accs[a].var == v;
        if (s->kind == KS_LET && s->var == v)
            found = s;
        const kir_stmt *inner = s->kind == KS_LOOP || s->kind == KS_IF ? find_let(s->body, v, assigned) : NULL;
        found = inner ? inner : found;
    }
    return found;
}

/* Whether value is a bf16 value in float: a bf16 load, a constant bf16
 * holds, or a maximum, minimum, relu, negation or select of such values
 * (through the lets that name them). Its bf16 narrowing is its top half:
 * the same bits as rounding for every value but a NaN, which keeps its
 * payload rather than being made quiet (as 16-bit copies do). The
 * rounding's NaN test and carry kept max pooling's short rows scalar. */
static bool exact_bf16(const kir_printer *p, const kir_expr *e, int depth)
{
    if (depth > 16)
        return false;
    switch (e->kind) {
    case KE_LOAD:
        return p->k->bufs[e->buf].dtype == IR_BF16;
    case KE_CONST: {
        float f = (float)e->f;
        return e->type != KT_I64 && e->type != KT_BOOL && (double)f == e->f && kl_bf16_to_f32(kl_f32_to_bf16(f)) == f;
    }
    case KE_SELECT:
        return exact_bf16(p, e->b, depth + 1) && exact_bf16(p, e->c, depth + 1);
    case KE_BIN:
        return (e->op == KB_MAX || e->op == KB_MIN) && exact_bf16(p, e->a, depth + 1) && exact_bf16(p, e->b, depth + 1);
    case KE_UN:
        return (e->op == KU_RELU || e->op == KU_NEG) && exact_bf16(p, e->a, depth + 1);
    case KE_VAR: {
        bool assigned = false;
        const kir_stmt *let = find_let(kir_host_stmts(p->k), e->var, &assigned);
        return let && !assigned && exact_bf16(p, let->a, depth + 1);
    }
    default:
        return false;
    }
}

/* ---- f16 values in their own bits (C target) ----
 *
 * A value that is one of its loads (a maximum, relu, negation or select
 * of f16 loads and constants f16 holds) is stored, and two loads are
 * compared, on the 16-bit patterns: base/scalar.h's keys16 (an integer
 * that orders as the float does), with no widening or narrowing, which
 * in f16 are software and most of max pooling's time. Lets are printed
 * again where they are used (the float let is then dead code) when that
 * means the same there: never set, reading no buffer the kernel writes
 * and no variable that is set. bf16 keeps floats: its widening is a
 * shift, and exact_bf16's store a truncation. */

static bool bits16_dtype(const kir_printer *p, ir_dtype dt)
{
    return dt == IR_F16 && p->t == &kir_target_c && !p->lanes;
}

/* Whether e reads only buffers the kernel does not write and variables
 * no statement sets. */
static bool stable_expr(const kir_printer *p, const kir_expr *e)
{
    switch (e->kind) {
    case KE_LOAD: return !p->k->bufs[e->buf].written && stable_expr(p, e->a);
    case KE_VAR: return p->k->var_acc[e->var] == -1;
    case KE_UN:
    case KE_CAST: return stable_expr(p, e->a);
    case KE_BIN: return stable_expr(p, e->a) && stable_expr(p, e->b);
    case KE_SELECT: return stable_expr(p, e->a) && stable_expr(p, e->b) && stable_expr(p, e->c);
    case KE_CONST:
    case KE_ARG: return true;
    }
    return false;
}

/* The value of var v's let when it may be printed in v's place. */
static const kir_expr *reprintable_let(const kir_printer *p, int v)
{
    bool assigned = false;
    const kir_stmt *let = find_let(kir_host_stmts(p->k), v, &assigned);
    return let && !assigned && p->k->var_acc[v] == -1 && stable_expr(p, let->a) ? let->a : NULL;
}

static bool exact16_const(ir_dtype dt, double f)
{
    float x = (float)f;
    return (double)x == f && (dt == IR_F16 ? kl_f16_to_f32(kl_f32_to_f16(x)) : kl_bf16_to_f32(kl_f32_to_bf16(x))) == x;
}

static unsigned bits16_of(ir_dtype dt, double f)
{
    return dt == IR_F16 ? kl_f32_to_f16((float)f) : kl_f32_to_bf16((float)f);
}

/* Whether e is one of its f16 loads (see above); *keyed: it takes a
 * maximum or relu, so its bits come through a key. */
static bool exact16(const kir_printer *p, ir_dtype dt, const kir_expr *e, int depth, bool *keyed)
{
    if (depth > 16)
        return false;
    switch (e->kind) {
    case KE_LOAD: return p->k->bufs[e->buf].dtype == dt;
    case KE_CONST: return e->type != KT_I64 && e->type != KT_BOOL && exact16_const(dt, e->f);
    case KE_SELECT: return exact16(p, dt, e->b, depth + 1, keyed) && exact16(p, dt, e->c, depth + 1, keyed);
    case KE_BIN:
        *keyed = true;
        return e->op == KB_MAX && exact16(p, dt, e->a, depth + 1, keyed) && exact16(p, dt, e->b, depth + 1, keyed);
    case KE_UN:
        *keyed |= e->op == KU_RELU;
        return (e->op == KU_RELU || e->op == KU_NEG) && exact16(p, dt, e->a, depth + 1, keyed);
    case KE_VAR: {
        const kir_expr *v = reprintable_let(p, e->var);
        return v && exact16(p, dt, v, depth + 1, keyed);
    }
    default: return false;
    }
}

static void print_key16(kir_printer *p, ir_dtype dt, const kir_expr *e);

/* The bits of e, exact16 in dt, as a uint32_t expression. */
static void print_bits16(kir_printer *p, ir_dtype dt, const kir_expr *e)
{
    switch (e->kind) {
    case KE_LOAD:
        kl_buf_printf(p->b, "%s[", p->k->bufs[e->buf].name);
        kir_print_expr(p, e->a);
        kl_buf_putc(p->b, ']');
        return;
    case KE_CONST: kl_buf_printf(p->b, "0x%04xu", bits16_of(dt, e->f)); return;
    case KE_SELECT:
        kl_buf_puts(p->b, "kl_sel16(");
        kir_print_expr(p, e->a);
        kl_buf_puts(p->b, ", ");
        print_bits16(p, dt, e->b);
        kl_buf_puts(p->b, ", ");
        print_bits16(p, dt, e->c);
        kl_buf_putc(p->b, ')');
        return;
    case KE_UN:
        if (e->op == KU_NEG) {
            kl_buf_putc(p->b, '(');
            print_bits16(p, dt, e->a);
            kl_buf_puts(p->b, " ^ 0x8000u)");
            return;
        }
        break;
    case KE_VAR:
        if (p->reprinted)
            p->reprinted[e->var] = 1;
        print_bits16(p, dt, reprintable_let(p, e->var));
        return;
    default: break;
    }
    kl_buf_puts(p->b, "kl_unkey16(");
    print_key16(p, dt, e);
    kl_buf_putc(p->b, ')');
}

/* The key of e, exact16 in dt, as an int32_t expression. */
static void print_key16(kir_printer *p, ir_dtype dt, const kir_expr *e)
{
    if (e->kind == KE_VAR) {
        if (p->reprinted)
            p->reprinted[e->var] = 1;
        print_key16(p, dt, reprintable_let(p, e->var));
    } else if ((e->kind == KE_BIN && e->op == KB_MAX) || (e->kind == KE_UN && e->op == KU_RELU)) {
        kl_buf_puts(p->b, "kl_kmax(");
        print_key16(p, dt, e->a);
        kl_buf_puts(p->b, ", ");
        if (e->kind == KE_BIN)
            print_key16(p, dt, e->b);
        else
            kl_buf_putc(p->b, '0');
        kl_buf_putc(p->b, ')');
    } else {
        kl_buf_puts(p->b, dt == IR_F16 ? "kl_f16_key(" : "kl_bf16_key(");
        print_bits16(p, dt, e);
        kl_buf_putc(p->b, ')');
    }
}

/* The dtype of a 16-bit float load in e (through reprintable lets), or
 * IR_NONE. */
static ir_dtype load16_dtype(const kir_printer *p, const kir_expr *e, int depth)
{
    if (depth > 16)
        return IR_NONE;
    switch (e->kind) {
    case KE_LOAD: {
        ir_dtype dt = p->k->bufs[e->buf].dtype;
        return dt == IR_F16 || dt == IR_BF16 ? dt : IR_NONE;
    }
    case KE_VAR: {
        const kir_expr *v = reprintable_let(p, e->var);
        return v ? load16_dtype(p, v, depth + 1) : IR_NONE;
    }
    case KE_SELECT: {
        ir_dtype dt = load16_dtype(p, e->b, depth + 1);
        return dt != IR_NONE ? dt : load16_dtype(p, e->c, depth + 1);
    }
    case KE_UN: return load16_dtype(p, e->a, depth + 1);
    default: return IR_NONE;
    }
}

/* Whether e is a load the printer reads from a staged row. */
static bool staged_load(const kir_printer *p, const kir_expr *e)
{
    for (int i = 0; e->kind == KE_LOAD && i < p->nstaged; i++)
        if (p->staged[i] == e)
            return true;
    return false;
}

/* a == b or a != b of two 16-bit values that need no key (loads,
 * constants, selects of them): kl_f16_eq or kl_bf16_eq on their bits. */
static bool print_eq16(kir_printer *p, const kir_expr *e)
{
    if ((e->op != KB_EQ && e->op != KB_NE) || (e->a->type != KT_F32 && e->a->type != KT_F64))
        return false;
    ir_dtype dt = load16_dtype(p, e->a, 0);
    dt = dt != IR_NONE ? dt : load16_dtype(p, e->b, 0);
    bool ka = false, kb = false;
    if (dt == IR_NONE || !bits16_dtype(p, dt) || !exact16(p, dt, e->a, 0, &ka) || !exact16(p, dt, e->b, 0, &kb) || ka || kb)
        return false;
    /* Loads read from strided planes' rows compare as the floats there. */
    if (p->staged_index && (staged_load(p, e->a) || staged_load(p, e->b)))
        return false;
    kl_buf_puts(p->b, e->op == KB_EQ ? "" : "(1 - ");
    kl_buf_puts(p->b, dt == IR_F16 ? "kl_f16_eq(" : "kl_bf16_eq(");
    print_bits16(p, dt, e->a);
    kl_buf_puts(p->b, ", ");
    print_bits16(p, dt, e->b);
    kl_buf_puts(p->b, e->op == KB_EQ ? ")" : "))");
    return true;
}

/* A value rounded to dt and then stored as dt: the store rounds it
 * alike, so the rounding goes (kl_f32_to_f16 of an f16 value gives its
 * bits back, NaN included, and so does bf16's): a cast back to a 16-bit
 * dtype stores once, and a load so rounded is a copy. */
const kir_expr *kir_strip_rounding(ir_dtype dt, const kir_expr *value)
{
    kir_unop round = dt == IR_F16 ? KU_ROUND_F16 : KU_ROUND_BF16;
    while ((dt == IR_F16 || dt == IR_BF16) && value->kind == KE_UN && value->op == (int)round && value->type == KT_F32)
        value = value->a;
    return value;
}

/* How a value (its roundings stripped) is stored as dt: a cast (no
 * conversion for dt), the bits of a 16-bit load of dt (is_copy16), f16
 * bits (print_bits16), bf16's top half (exact_bf16), or the target's
 * narrowing. */
typedef enum store_form { STORE_CAST, STORE_COPY16, STORE_BITS16, STORE_TRUNC_BF16, STORE_NARROW } store_form;

static store_form store_form_of(const kir_printer *p, ir_dtype dt, const kir_expr *value)
{
    bool keyed = false;
    if (dt <= IR_NONE || dt >= IR_NDTYPES || !p->t->store[dt])
        return STORE_CAST;
    if (is_copy16(p, dt, value))
        return STORE_COPY16;
    if (bits16_dtype(p, dt) && exact16(p, dt, value, 0, &keyed))
        return STORE_BITS16;
    if (dt == IR_BF16 && p->t == &kir_target_c && exact_bf16(p, value, 0))
        return STORE_TRUNC_BF16;
    return STORE_NARROW;
}

bool kir_print_store_narrows(const kir_printer *p, ir_dtype dt, const kir_expr *value)
{
    return store_form_of(p, dt, kir_strip_rounding(dt, value)) == STORE_NARROW;
}

bool kir_print_store_truncates(const kir_printer *p, ir_dtype dt, const kir_expr *value)
{
    return store_form_of(p, dt, kir_strip_rounding(dt, value)) == STORE_TRUNC_BF16;
}

void kir_print_stored(kir_printer *p, ir_dtype dt, const kir_expr *value)
{
    value = kir_strip_rounding(dt, value);
    switch (store_form_of(p, dt, value)) {
    case STORE_COPY16:
        kl_buf_printf(p->b, "%s[", p->k->bufs[value->buf].name);
        kir_print_expr(p, value->a);
        kl_buf_putc(p->b, ']');
        return;
    case STORE_BITS16:
        kl_buf_puts(p->b, "(uint16_t)");
        print_bits16(p, dt, value);
        return;
    case STORE_TRUNC_BF16:
        kl_buf_puts(p->b, "kl_bf16_trunc((float)(");
        kir_print_expr(p, value);
        kl_buf_puts(p->b, "))");
        return;
    case STORE_NARROW:
        kl_buf_printf(p->b, "%s((float)(", p->t->store[dt]);
        kir_print_expr(p, value);
        kl_buf_puts(p->b, "))");
        return;
    case STORE_CAST:
        break;
    }
    if (!ir_dtype_is_float(dt)) {
        /* A float stored as an integer converts as a cast does. */
        kl_buf_printf(p->b, "(%s)(", kir_print_storage(p->t, dt));
        double lo = dt == IR_U8 ? 0 : dt == IR_I32 ? -2147483648.0 : -9.2e18;
        double hi = dt == IR_U8 ? 255 : dt == IR_I32 ? 2147483647.0 : 9.2e18;
        bool f = print_ftoi(p, value, lo, hi);
        kir_print_expr(p, value);
        kl_buf_puts(p->b, f ? "))" : ")");
    } else {
        kl_buf_printf(p->b, "(%s)(", kir_print_storage(p->t, dt));
        kir_print_expr(p, value);
        kl_buf_putc(p->b, ')');
    }
}
