/* The kernel IR: one function per fused group, as loop nests over buffers.
 *
 * It is independent of the target: codegen/emit_c.c prints it as C with
 * OpenMP for the host compiler, codegen/emit_cuda.c as CUDA C for NVRTC,
 * both through one expression printer (codegen/print_expr.c) driven by a
 * target description.
 * The loop kinds carry what each printer needs to map work to threads:
 *
 *   PAR   independent iterations. Leading PAR loops are the kernel's outer
 *         parallelism: OpenMP threads on the CPU; on the GPU the grid (one
 *         block per iteration when the body holds block-level loops, else
 *         one thread per iteration, grid-stride).
 *   RED   a reduction: the body updates the loop's accumulators; after the
 *         loop they hold the combined value. Directly inside the leading PAR
 *         loops (or at the top), a RED loop is block-level on the GPU: its
 *         iterations are spread over the block's threads and combined with
 *         warp shuffles; nested deeper it runs serially per thread.
 *   BPAR  independent iterations at block level (on the GPU spread over the
 *         block's threads, e.g. the normalise step after a reduction).
 *   SEQ   a serial loop.
 *
 * Expressions compute in f32 (f64 when the data is f64) and i64 for
 * indices; loads convert from the buffer's storage dtype and stores
 * convert back (bf16 and f16 with round-to-nearest-even). A float becomes
 * an integer (CAST to I64, or a store into an integer buffer) toward
 * zero, NaN as 0 and saturating at i64's range, on every target; a
 * narrower integer buffer keeps the low bits.
 */
#ifndef KILN_KIR_H
#define KILN_KIR_H

#include "ir/ir.h"

typedef enum kir_type { KT_I64, KT_F32, KT_F64, KT_BOOL } kir_type;

typedef enum kir_expr_kind {
    KE_CONST,  /* f (floats) or i (integers) */
    KE_VAR,    /* a loop variable or local */
    KE_LOAD,   /* buf[a] */
    KE_UN,     /* op a */
    KE_BIN,    /* a op b */
    KE_SELECT, /* a ? b : c */
    KE_CAST,   /* (type) a */
    KE_ARG,    /* a runtime scalar argument: 0 step, 1 seed, 2 the threads
                  running the kernel (C: the OpenMP team's size; CUDA: 1) */
} kir_expr_kind;

typedef enum kir_unop {
    KU_NEG, KU_EXP, KU_LOG, KU_SQRT, KU_RSQRT, KU_TANH, KU_SIGMOID, KU_RELU, KU_ABS, KU_NOT,
    KU_ERF,
    KU_NPDF, /* the standard normal density, exp(-a^2 / 2) / sqrt(2 pi) */
    KU_EXP_NONPOS, /* exp(a) where a <= 0 (a value less a maximum): the C target's vectorising exp */
    KU_ROUND_BF16, KU_ROUND_F16, KU_ROUND_F32, /* round to the dtype, keep computing wide */
    KU_ISFINITE, /* 1 when finite, else 0 */
    KU_UNIFORM, /* a uniform float in [0, 1) from (seed, step, salt i, index a) */
} kir_unop;

typedef enum kir_binop {
    KB_ADD, KB_SUB, KB_MUL, KB_DIV, KB_MAX, KB_MIN, KB_POW,
    KB_LT, KB_LE, KB_GT, KB_GE, KB_EQ, KB_NE, KB_AND, KB_OR,
    KB_IDIV, KB_IMOD, /* integers */
} kir_binop;

typedef struct kir_expr kir_expr;
struct kir_expr {
    kir_expr_kind kind;
    kir_type type;
    int op;      /* kir_unop / kir_binop */
    int var;     /* VAR; ARG index */
    int buf;     /* LOAD */
    double f;
    int64_t i;
    kir_expr *a, *b, *c;
};

typedef enum kir_stmt_kind {
    KS_LOOP,
    KS_LET,   /* declares local var = a */
    KS_SET,   /* var = a (a local declared before) */
    KS_ACC,   /* accumulator var combined with a (inside its RED loop) */
    KS_STORE, /* buf[a] = b */
    KS_ADDTO, /* buf[a] += b, atomically on the GPU */
    KS_IF,    /* if (a) body */
} kir_stmt_kind;

typedef enum kir_loop_kind { KL_PAR, KL_RED, KL_BPAR, KL_SEQ } kir_loop_kind;
typedef enum kir_acc_op { KA_SUM, KA_MAX, KA_MIN } kir_acc_op;

typedef struct kir_acc {
    int var;
    kir_acc_op op;
} kir_acc;

typedef struct kir_stmt kir_stmt;
struct kir_stmt {
    kir_stmt_kind kind;
    int var;          /* LOOP variable, LET/SET/ACC target */
    int64_t extent;   /* LOOP: 0 .. extent-1 */
    kir_loop_kind loop;
    bool lanes;       /* LOOP BPAR: independent lanes even around inner SEQ
                         loops (each carries only its own values, KS_SET on
                         vars declared in the body): the C printer
                         vectorises across it (kir_loop_lanes) */
    bool free_order;  /* LOOP RED: its one sum's order is free (the sum is
                         only tested for finiteness): the C printer sums in
                         independent lanes (kir_loop_free_order) */
    kir_acc_op accop; /* ACC: how the accumulator combines */
    kir_acc accs[16]; /* LOOP RED: declared and initialised before the loop */
    int naccs;
    int buf;          /* STORE, ADDTO */
    kir_expr *a, *b;
    kir_stmt *body;   /* LOOP, IF: first statement */
    kir_stmt *next;
};

typedef struct kir_buf {
    char name[16];
    ir_dtype dtype;
    int64_t numel;
    bool read, written;
    bool aliased;     /* shares memory with another buffer of the kernel (an
                         in-place result): printed without restrict */
    bool written_first; /* read and written, but every element is stored by
                           the iteration that later loads it, before that
                           load (a builder's promise: codegen/k_attn.c's
                           accumulating rows); the plan need not keep the
                           old contents alive */
    int value;        /* the IR value it holds (for the plan) */
} kir_buf;

typedef struct kir_kernel {
    kl_arena arena;
    char *name;       /* set by kir_finish: "kk_" + hash of the C source */
    char *what;       /* one line: the ops it computes, for comments and bench */
    kir_buf bufs[IR_KERNEL_MAX_BUFS];
    int nbufs;
    kir_type *var_types;
    char **var_names;
    int *var_acc;      /* per var: its kir_acc_op if an accumulator, -2 if a
                          KS_SET assigns it after its LET (printed without
                          const), else -1 */
    int nvars, capvars;
    kir_stmt *body;
    /* When set, the C printer's body instead of body: the same computation
     * (same buffers read and written, same values stored) in a form that
     * suits a CPU, built after body (kir_begin_host_body); the CUDA
     * printer, the memory planner and every analysis read body. E.g. a
     * sum over leading axes: body reduces each column (one GPU block per
     * column, split), host_body streams the rows with a vector lane per
     * column (codegen/k_colsum.c). */
    kir_stmt *host_body;
    kir_type compute;  /* KT_F32 or KT_F64 */
    int64_t work;      /* elements touched, for thread heuristics */
    bool scalar_f16;   /* a kernel GCC leaves scalar, whose f16 loads only
                          meet arithmetic, comparisons and narrowing: the C
                          printer widens them with the CPU's F16C instruction
                          (kir_target.load_scalar), whose one difference, a
                          signalling NaN made quiet, none of those can show */
    /* The builder's insertion point: the statement list being appended. */
    kir_stmt **tail;
    kir_stmt **tail_stack[16];
    int depth;
} kir_kernel;

/* ---- building ---- */

kir_kernel *kir_new(const char *what, kir_type compute);
void kir_free(kir_kernel *k);
/* Adds (or finds) a buffer for IR value v; returns its index. */
int kir_buf_add(kir_kernel *k, int value, ir_dtype dt, int64_t numel);
int kir_var(kir_kernel *k, kir_type t, const char *hint);

kir_expr *kir_const_f(kir_kernel *k, double f);
kir_expr *kir_const_i(kir_kernel *k, int64_t i);
kir_expr *kir_varref(kir_kernel *k, int var);
kir_expr *kir_load(kir_kernel *k, int buf, kir_expr *index);
kir_expr *kir_un(kir_kernel *k, kir_unop op, kir_expr *a);
kir_expr *kir_bin(kir_kernel *k, kir_binop op, kir_expr *a, kir_expr *b);
kir_expr *kir_select(kir_kernel *k, kir_expr *c, kir_expr *a, kir_expr *b);
kir_expr *kir_cast(kir_kernel *k, kir_type t, kir_expr *a);
kir_expr *kir_arg(kir_kernel *k, int which);
/* A uniform random float in [0, 1): a counter-based hash of the run's
 * seed, the step, salt and index, identical on every backend. */
kir_expr *kir_rand(kir_kernel *k, int64_t salt, kir_expr *index);
/* Index arithmetic with constant folding: a + b, a * c. */
kir_expr *kir_iadd(kir_kernel *k, kir_expr *a, kir_expr *b);
kir_expr *kir_imul(kir_kernel *k, kir_expr *a, int64_t c);
/* True when e reads the variable var anywhere inside it. */
bool kir_expr_uses_var(const kir_expr *e, int var);

/* Statements are appended at the insertion point; loop_begin opens a body
 * that loop_end closes. */
int kir_loop_begin(kir_kernel *k, kir_loop_kind kind, int64_t extent, const char *hint);
/* Marks the innermost open loop, a BPAR one, as independent lanes
 * (kir_stmt.lanes). */
void kir_loop_lanes(kir_kernel *k);
/* For RED loops: declares an accumulator of the innermost open loop. */
int kir_loop_acc(kir_kernel *k, kir_acc_op op, const char *hint);
/* Marks the innermost open RED loop's sum as free of order (it is only
 * tested for finiteness): see kir_stmt.free_order. */
void kir_loop_free_order(kir_kernel *k);
void kir_loop_end(kir_kernel *k);
void kir_if_begin(kir_kernel *k, kir_expr *cond);
void kir_if_end(kir_kernel *k);
int kir_let(kir_kernel *k, kir_expr *value, const char *hint);
void kir_set(kir_kernel *k, int var, kir_expr *value);
void kir_acc_add(kir_kernel *k, int var, kir_expr *value);
void kir_store(kir_kernel *k, int buf, kir_expr *index, kir_expr *value);
void kir_addto(kir_kernel *k, int buf, kir_expr *index, kir_expr *value);

/* Starts the host body (kir_kernel.host_body): the statements appended
 * from here on, at the top level, are the C printer's instead of body. */
void kir_begin_host_body(kir_kernel *k);
/* The statements the C printer prints: host_body when set, else body. */
const kir_stmt *kir_host_stmts(const kir_kernel *k);

/* ---- printing ---- */

/* What every generated C file starts with: includes, bf16/f16 helpers,
 * the hash RNG and float-to-integer conversion (base/scalar.h's text),
 * the kernel argument struct. */
const char *kir_c_prelude(void);
/* Names the kernel after a hash of its C source, so equal kernels share a
 * name and a compiled kernel can be found by name, and returns that C
 * source (with no prelude; caller frees): each kernel is printed once
 * (codegen/emit_c.c). */
char *kir_finish(kir_kernel *k);

#endif
