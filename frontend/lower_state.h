/* What the files of the lowering share (lower.c: the program, the train
 * block and the entry points; lower_expr.c: names, values and
 * expressions; lower_call.c: calls of defs, ops and built-ins;
 * lower_stmt.c: statements). Private to frontend/. */
#ifndef KILN_LOWER_STATE_H
#define KILN_LOWER_STATE_H

#include <setjmp.h>

#include "lower.h"

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

typedef struct call_args {
    lv pos[32];
    kl_loc pos_loc[32];
    int npos;
    const ast_arg *kw[32];
    lv kwval[32];
    int nkw;
} call_args;

/* is_int only where f is an integer small enough to convert exactly. */
static inline lv num_lv(double f, bool is_int, kl_loc loc)
{
    lv v = {.kind = LV_NUM, .f = f, .is_int = is_int, .i = is_int ? (int64_t)f : 0, .loc = loc};
    return v;
}

static inline lv tensor_lv(int id, kl_loc loc)
{
    return (lv){.kind = LV_TENSOR, .v = id, .loc = loc};
}

static inline const ir_type *type_of(lower *L, const lv *v)
{
    return &ir_val(L->g, v->v)->type;
}

/* Errors (lower.c): report at loc, then unwind to kl_lower. */
KL_NORETURN void lower_bail(lower *L);
KL_NORETURN void lower_fail_at(lower *L, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
/* "a tensor", "a number", ... for messages. */
const char *lower_kind_words(const lv *v);

/* Frames and names (lower_expr.c). */
void lower_bind(lower *L, frame *f, const char *name, lv val);
binding *lower_lookup(frame *f, const char *name);
int lower_next_instance(lower *L, frame *f, const char *name);
char *lower_scoped(lower *L, frame *f, const char *name);
const ast_def *lower_find_def(lower *L, const char *name);

/* Values (lower_expr.c). */
KL_NORETURN void lower_unknown_name(lower *L, const lv *v);
int lower_emit(lower *L, frame *f, ir_op op, const int *in, int nin, ir_attrs *attrs, kl_loc loc);
int lower_as_tensor(lower *L, frame *f, const lv *v, ir_dtype dt, const char *what);
double lower_as_number(lower *L, const lv *v, const char *what);
int64_t lower_as_dim(lower *L, const lv *v, const char *what);
void lower_to_attr(lower *L, const lv *v, const char *what, ir_attr_val *out);

/* Expressions (lower_expr.c), calls (lower_call.c), statements
 * (lower_stmt.c): they recurse into each other. */
lv lower_eval(lower *L, frame *f, const ast_expr *e);
lv lower_call(lower *L, frame *f, const ast_expr *e);
void lower_eval_args(lower *L, frame *f, const ast_expr *e, call_args *ca);
lv lower_exec_body(lower *L, frame *f, const ast_stmt *body);

#endif
