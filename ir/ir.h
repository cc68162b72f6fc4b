/* The IR: a graph of values and nodes in SSA form.
 *
 * Every value has one definition: a node's result, or a graph-level
 * declaration (input, param, state). Nodes are kept in a valid execution
 * order (each operand is defined before the node that reads it); passes that
 * add nodes insert them where they belong and the schedule pass may reorder.
 * Values and nodes live behind stable pointers and are named by index.
 *
 * Persistent values (params and state) live across steps; an op that writes
 * one in place (an optimizer update, batch norm's running statistics) says
 * so in its row (ir_op_mutates()), and must run after every other reader
 * of it.
 */
#ifndef KILN_IR_H
#define KILN_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/support.h"

/* ---- dtypes ---- */

#define IR_DTYPES(X)            \
    X(NONE, "none", 0)          \
    X(U8, "u8", 1)              \
    X(I32, "i32", 4)            \
    X(I64, "i64", 8)            \
    X(F16, "f16", 2)            \
    X(BF16, "bf16", 2)          \
    X(F32, "f32", 4)            \
    X(F64, "f64", 8)

typedef enum ir_dtype {
#define X(id, name, size) IR_##id,
    IR_DTYPES(X)
#undef X
    IR_NDTYPES
} ir_dtype;

const char *ir_dtype_name(ir_dtype t);
int ir_dtype_size(ir_dtype t);
bool ir_dtype_is_float(ir_dtype t);
/* -1 when the name is not a dtype. */
int ir_dtype_from_name(const char *name);

/* ---- types ---- */

#define IR_MAX_RANK 8
/* Every tensor's sizes stay within these, so element and byte counts never
 * overflow: the IR parser and lowering check declared types, and
 * ir_infer_run checks what every shape rule gives. */
#define IR_MAX_DIM ((int64_t)1 << 40)
#define IR_MAX_NUMEL ((int64_t)1 << 50)
/* The most buffers one kernel reads or writes: the fusion pass keeps every
 * group within it; the kernel IR, the plan's steps and the CUDA launch have
 * room for this many. */
#define IR_KERNEL_MAX_BUFS 64

typedef struct ir_type {
    ir_dtype dtype;
    int rank;
    int64_t dim[IR_MAX_RANK];
} ir_type;

int64_t ir_type_numel(const ir_type *t);
int64_t ir_type_bytes(const ir_type *t);
bool ir_type_eq(const ir_type *a, const ir_type *b);
/* Sizes in [1, IR_MAX_DIM], at most IR_MAX_NUMEL elements, a known dtype. */
bool ir_type_in_range(const ir_type *t);
/* "f32[128,10]" */
void ir_type_print(kl_buf *b, const ir_type *t);
char *ir_type_str(const ir_type *t); /* caller frees */

/* ---- attributes ---- */

typedef enum ir_attr_kind {
    IR_ATTR_INT,
    IR_ATTR_FLOAT,
    IR_ATTR_STR,  /* identifiers and strings */
    IR_ATTR_LIST, /* [a, b, ...] */
    IR_ATTR_CALL, /* name(key = value, ...): optimizer and schedule specs */
} ir_attr_kind;

typedef struct ir_attrs ir_attrs;
typedef struct ir_attr_val ir_attr_val;

struct ir_attr_val {
    ir_attr_kind kind;
    int64_t i;
    double f;
    char *s;            /* STR text, CALL name */
    ir_attr_val *items; /* LIST */
    int nitems;
    ir_attrs *args;     /* CALL keyword arguments */
    kl_loc loc;         /* where it was written, when known */
};

typedef struct ir_attr {
    char *key;
    ir_attr_val val;
    kl_loc loc;
} ir_attr;

struct ir_attrs {
    ir_attr *v;
    int n, cap;
};

void ir_attrs_free(ir_attrs *a);
void ir_attrs_copy(ir_attrs *dst, const ir_attrs *src);
void ir_attr_val_free(ir_attr_val *v);
void ir_attr_val_copy(ir_attr_val *dst, const ir_attr_val *src);
ir_attr *ir_attrs_find(const ir_attrs *a, const char *key);
/* Sets key (replacing a previous value); takes ownership of val. */
void ir_attrs_set(ir_attrs *a, const char *key, ir_attr_val val);
void ir_attrs_set_int(ir_attrs *a, const char *key, int64_t i);
void ir_attrs_set_float(ir_attrs *a, const char *key, double f);
void ir_attrs_set_str(ir_attrs *a, const char *key, const char *s);
void ir_attrs_set_ints(ir_attrs *a, const char *key, const int64_t *v, int n);
void ir_attrs_remove(ir_attrs *a, const char *key);
int64_t ir_attr_int(const ir_attrs *a, const char *key, int64_t dflt);
double ir_attr_float(const ir_attrs *a, const char *key, double dflt);
const char *ir_attr_str(const ir_attrs *a, const char *key, const char *dflt);
/* gelu's and gelu_grad's form: approximate = "tanh" (GPT-2's), not the
 * erf (approximate = "none", the default). */
bool ir_gelu_is_tanh(const ir_attrs *a);
/* Reads an integer list into out (at most max); returns its length or -1. */
int ir_attr_ints(const ir_attrs *a, const char *key, int64_t *out, int max);
ir_attr_val ir_attr_val_int(int64_t i);
ir_attr_val ir_attr_val_float(double f);
ir_attr_val ir_attr_val_str(const char *s);
ir_attr_val ir_attr_val_ints(const int64_t *v, int n);
void ir_attr_val_print(kl_buf *b, const ir_attr_val *v);
/* "text", with the escapes ir_parse reads (\" \\ \n \t \xNN), so any
 * string prints on one line and reads back the same. */
void ir_print_quoted(kl_buf *b, const char *s);
/* True for a name (an identifier), false for other strings. */
bool ir_attr_val_is_word(const ir_attr_val *v);
/* {a = 1, b = [1, 2]}; nothing when empty. */
void ir_attrs_print(kl_buf *b, const ir_attrs *a);

/* ---- the op table ---- */

typedef enum ir_op {
#define OP(id, ...) IR_OP_##id,
#include "ops.def"
#undef OP
    IR_NOPS
} ir_op;

typedef enum ir_kernel_class {
    IR_KC_SOURCE,
    IR_KC_ELEMWISE,
    IR_KC_REDUCE,
    IR_KC_GEMM,
    IR_KC_CONV,
    IR_KC_POOL,
    IR_KC_NORM,
    IR_KC_MOVE,
    IR_KC_RANDOM,
    IR_KC_UPDATE,
    IR_KC_COLLECTIVE,
    IR_KC_ATTN, /* attention: online-softmax kernels (codegen/k_attn.c) */
} ir_kernel_class;

enum {
    IR_F_INPLACE = 1,   /* the result may reuse operand 0's buffer */
    IR_F_USER = 2,      /* model files may call it by name */
    IR_F_VIEW = 4,      /* no kernel: the result aliases operand 0's buffer */
    IR_F_POINTWISE = 8, /* each result element is a function of the operand
                         * elements at its index (operands broadcast to the
                         * result): fuses like elementwise, built by its row's
                         * body builder */
    IR_F_POSITIONAL = 16, /* the result depends on each element's position,
                           * not only on operand values (arange, tril), so a
                           * uniform operand does not make a uniform result */
};

/* The operands an op writes in place, in its row: IR_OPND(0)|IR_OPND(4). */
#define IR_OPND(i) (1u << (i))

typedef enum ir_precision_class {
    IR_PREC_LOW,
    IR_PREC_F32,
    IR_PREC_FOLLOW,
    IR_PREC_NONE,
} ir_precision_class;

typedef struct ir_graph ir_graph;
typedef struct ir_node ir_node;
typedef struct ir_infer ir_infer;

typedef int (*ir_shape_fn)(ir_infer *inf);

typedef struct ir_op_info {
    const char *name;
    int min_in, max_in, nout;
    ir_kernel_class kclass;
    unsigned flags;
    ir_precision_class precision;
    ir_shape_fn shape;
    unsigned writes; /* IR_OPND(i) for each operand i written in place */
    const char *attr_spec;
} ir_op_info;

extern const ir_op_info ir_ops[IR_NOPS];
/* -1 when unknown. */
int ir_op_from_name(const char *name);
static inline const char *ir_op_name(ir_op op) { return ir_ops[op].name; }
/* One entry of an op's attribute spec. */
typedef struct ir_attr_spec {
    char name[32];
    char type[8];
    char dflt[32]; /* "" required, "?" optional */
} ir_attr_spec;
/* Parses the op's attribute spec; returns the number of entries. */
int ir_op_attr_spec(ir_op op, ir_attr_spec *out, int max);
/* True when the op writes operand i in place (it must be persistent). */
static inline bool ir_op_mutates(ir_op op, int i) { return (unsigned)i < 32 && (ir_ops[op].writes >> i & 1); }
/* True for a view: no kernel, its result aliases operand 0's buffer. */
static inline bool ir_op_is_view(ir_op op) { return ir_ops[op].flags & IR_F_VIEW; }
/* True when the op fuses like elementwise (IR_F_POINTWISE). */
static inline bool ir_op_is_pointwise(ir_op op) { return ir_ops[op].flags & IR_F_POINTWISE; }
/* True when the result depends on element positions (IR_F_POSITIONAL). */
static inline bool ir_op_is_positional(ir_op op) { return ir_ops[op].flags & IR_F_POSITIONAL; }
const char *ir_kernel_class_name(ir_kernel_class k);

/* ---- shape inference ---- */

/* What a shape rule sees: operand types and attributes in, result types
 * out. On a user error it calls ir_infer_error() and returns -1; the caller
 * reports the message at the node's location. */
struct ir_infer {
    ir_op op;
    int nin;
    const ir_type *in;
    ir_attrs *attrs; /* defaults already filled in */
    ir_type out[4];
    char err[256];
};
int ir_infer_error(ir_infer *inf, const char *fmt, ...) KL_PRINTF(2, 3);
/* Checks attributes against the op's spec and fills in defaults; on error
 * writes a message into err and returns -1. */
int ir_attrs_normalize(ir_op op, ir_attrs *attrs, char *err, size_t errlen);
/* The same check against any spec string ("name:type=default ..."), for
 * calls that are not ops (optimizers, schedules); what names the call in
 * messages. Entries with an empty key are positional and take the spec's
 * names in order. */
int ir_spec_normalize(const char *spec, const char *what, ir_attrs *attrs, char *err, size_t errlen);
int ir_spec_parse(const char *spec, ir_attr_spec *out, int max);
/* Normalizes attributes and runs the shape rule. */
int ir_infer_run(ir_infer *inf);
/* NumPy broadcasting of two shapes; -1 when incompatible. */
int ir_broadcast_shapes(const ir_type *a, const ir_type *b, ir_type *out);

/* ---- values, nodes, graph ---- */

typedef enum ir_value_kind {
    IR_VAL_TEMP,  /* a node's result */
    IR_VAL_INPUT, /* fed by the data loader each step */
    IR_VAL_PARAM, /* trainable, persistent */
    IR_VAL_STATE, /* persistent, not trainable: running stats, optimizer state */
} ir_value_kind;

typedef struct ir_use {
    int node;
    int operand;
} ir_use;

typedef struct ir_value {
    int id;
    char *name;
    ir_value_kind kind;
    ir_type type;
    int def, def_out; /* producing node and result index; -1 for declarations */
    KL_VEC(ir_use) uses;
    ir_attrs attrs;   /* declarations: init = ..., role = ... */
    kl_loc loc;
    /* For ir_unique_name: every "NAME.k" with 0 < k < suffix_hint was in
     * use when it last looked (0: nothing known). */
    int suffix_hint;
} ir_value;

typedef enum ir_phase {
    IR_PHASE_FORWARD,
    IR_PHASE_BACKWARD,
    IR_PHASE_UPDATE, /* once per optimizer step (after accumulation) */
    /* Input-independent values (masks, position tables), computed once
     * before the first step into buffers kept live through every step
     * (passes/constants.c); first in program order. */
    IR_PHASE_STARTUP,
} ir_phase;

struct ir_node {
    int id;
    ir_op op;
    KL_VEC(int) in;
    KL_VEC(int) out;
    ir_attrs attrs;
    kl_loc loc;
    char *scope; /* the def instance it came from ("conv_bn_relu.1"), or NULL */
    ir_phase phase;
    int group;   /* fusion group, -1 when none */
    char *pattern; /* the fusion pattern that made the group, or NULL */
    bool dead;
};

/* The metrics a model may report (each evaluated, printed and recorded). */
#define IR_MAX_REPORTS 8

typedef struct ir_report {
    char *name;
    int value;
    /* better = lower (a loss, an error): which way "best" and early
     * stopping read it; else higher is better (an accuracy). */
    bool lower_better;
} ir_report;

/* A call of a def in the model file: the scope its nodes carry
 * ("conv_bn_relu.1", nested "block.1.dense.2") and where it was called
 * (the model summary's rows). The text form does not keep them: a graph
 * read back from a dump has none. */
typedef struct ir_call {
    char *scope;
    kl_loc loc;
} ir_call;

/* A param and the value holding its gradient (set by autodiff). */
typedef struct ir_grad_pair {
    int param;
    int grad;
} ir_grad_pair;

struct ir_graph {
    char *name;
    char *source; /* file it was lowered from (for locations) */
    KL_VEC(ir_value *) values;
    KL_VEC(ir_node *) nodes;
    KL_VEC(int) decls;  /* inputs, params and state, in declaration order */
    int loss;           /* value id or -1 */
    KL_VEC(ir_report) reports; /* at most IR_MAX_REPORTS */
    /* output NAME = ...: per-sample values (first dimension the batch)
     * that --predict writes; kept, like reports (lower_better unused). */
    KL_VEC(ir_report) outputs;
    KL_VEC(ir_grad_pair) grads;
    ir_attrs train;     /* the train block, key = value */
    KL_VEC(char *) passes; /* passes run so far, in order */
    KL_VEC(ir_call) calls; /* the def calls, in the order they were lowered */
    /* Value ids by name: open addressing, -1 empty, -2 removed. */
    int *name_slots;
    int name_cap, name_used;
};

ir_graph *ir_graph_new(const char *name);
void ir_graph_free(ir_graph *g);
ir_graph *ir_graph_clone(const ir_graph *g);

static inline ir_value *ir_val(const ir_graph *g, int id) { return g->values.v[id]; }
static inline ir_node *ir_nd(const ir_graph *g, int id) { return g->nodes.v[id]; }
/* n sums a value of rank >= 2 over every dim but the last (sum_to to
 * [C]): a bias gradient, which a GEMM's epilogue may compute (fusion.c,
 * codegen/k_colsum.c). */
static inline bool ir_is_column_sum(const ir_graph *g, const ir_node *n)
{
    if (n->op != IR_OP_SUM_TO)
        return false;
    const ir_type *in = &ir_val(g, n->in.v[0])->type, *out = &ir_val(g, n->out.v[0])->type;
    return in->rank >= 2 && out->rank == 1 && out->dim[0] == in->dim[in->rank - 1];
}
/* v is the exact widening of a 16-bit value (a cast of an f16 or bf16
 * value to f32): that value, else -1. A column sum of v may read it and
 * widen each element as it loads (the same terms; fusion.c,
 * codegen/k_colsum.c), so fp16's and bf16's bias gradients fuse with
 * their GEMM's epilogue as fp32's do. */
static inline int ir_widened_from(const ir_graph *g, int v)
{
    const ir_value *x = ir_val(g, v);
    if (x->def < 0 || ir_nd(g, x->def)->op != IR_OP_CAST || x->type.dtype != IR_F32)
        return -1;
    int s = ir_nd(g, x->def)->in.v[0];
    ir_dtype d = ir_val(g, s)->type.dtype;
    return d == IR_F16 || d == IR_BF16 ? s : -1;
}

/* Declares an input, param or state value. */
int ir_declare(ir_graph *g, ir_value_kind kind, const char *name, const ir_type *t, kl_loc loc);
/* Drops the declaration of v (an input, param or state nobody reads); the
 * value goes at the next ir_compact, which must come before any use of
 * the graph. */
void ir_undeclare(ir_graph *g, int v);
/* Appends a node whose results get the given types (and names, which may be
 * NULL for automatic ones). Returns the node. */
ir_node *ir_add_node(ir_graph *g, ir_op op, const int *in, int nin, const ir_attrs *attrs,
                     const ir_type *out_types, const char *const *out_names, kl_loc loc);
/* Appends a node and infers its result types; the op's rule must accept
 * the operands (an internal error otherwise). Returns result 0's id. */
int ir_emit(ir_graph *g, ir_op op, const int *in, int nin, const ir_attrs *attrs, const char *name);
int ir_emit1(ir_graph *g, ir_op op, int a, const char *name);
int ir_emit2(ir_graph *g, ir_op op, int a, int b, const char *name);
int ir_emit_const(ir_graph *g, double value, ir_dtype dt);
/* A fresh value name "base" or "base.N" that no value has yet. */
char *ir_unique_name(ir_graph *g, const char *base);
/* Gives value v the name (taken over; it must be unused, see ir_unique_name). */
void ir_rename_value(ir_graph *g, int v, char *name);
/* Replaces every use of value from by value to. */
void ir_replace_uses(ir_graph *g, int from, int to);
/* Whether v leaves the graph: the loss, a reported value or a gradient. */
bool ir_is_output(const ir_graph *g, int v);
/* Whether any result of n is used or leaves the graph (ir_is_output). */
bool ir_node_used(const ir_graph *g, const ir_node *n);
void ir_set_operand(ir_graph *g, ir_node *n, int i, int v);
void ir_append_operand(ir_graph *g, ir_node *n, int v);
/* Marks a node dead and drops its uses; its results must be unused. */
void ir_kill_node(ir_graph *g, ir_node *n);
/* Reorders the live nodes into a valid execution order (operands first,
 * in-place writers after the other readers), keeping the current order
 * where it is already valid. */
void ir_toposort(ir_graph *g);
/* The same with nodes of one unit (unit[i] >= 0 equal) kept together and
 * in their current order: fusion groups run as one kernel. */
void ir_toposort_units(ir_graph *g, const int *unit);
/* The same with the units whose head node j has eager[j] run as soon as
 * their operands are ready (before any other ready unit), the others in
 * program order: the schedule places collectives early this way. */
void ir_toposort_eager(ir_graph *g, const int *unit, const bool *eager);
/* Puts node order[k] at position k and renumbers. */
void ir_reorder(ir_graph *g, const int *order);
/* Drops dead nodes and values nobody defines or uses; renumbers. */
void ir_compact(ir_graph *g);
bool ir_is_persistent(const ir_value *v);
int ir_find_value(const ir_graph *g, const char *name);
/* The gradient of param p, or -1. */
int ir_grad_of(const ir_graph *g, int p);
void ir_graph_mark_pass(ir_graph *g, const char *pass);

/* ---- verifier, printer, parser, dot ---- */

/* Checks SSA, order, use lists and types (by rerunning every shape rule).
 * Returns 0, or -1 after printing what is broken to the diagnostic stream. */
int ir_verify(const ir_graph *g);
/* The text form read back by ir_parse: print(parse(print(g))) == print(g). */
char *ir_print(const ir_graph *g);
void ir_print_node(kl_buf *b, const ir_graph *g, const ir_node *n);
const char *ir_phase_name(ir_phase p);
ir_graph *ir_parse(const kl_source *src);
/* One attribute value in the same syntax (a number, "string", name,
 * call(args) or [list]) filling the whole of src; -1 after an error at
 * its file:line:col. */
int ir_parse_value(const kl_source *src, ir_attr_val *out);
char *ir_print_dot(const ir_graph *g);

#endif
