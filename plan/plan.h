/* The plan: what the runtime executes for one graph. Buffers (one per IR
 * value that needs memory), the generated kernels, and an ordered list of
 * steps: kernel launches and library calls (GEMM).
 *
 * Built by the compile function (driver/compile.c) from a graph that went
 * through the passes: plan_lower, then plan_memory. The plan refers to the
 * graph for names and roles; it does not own it. */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include "ir/ir.h"
#include "codegen/attn_native.h"
#include "codegen/emit_cuda.h"

typedef enum kl_region {
    KL_REGION_ARENA,      /* activations, gradients, temporaries */
    KL_REGION_PERSISTENT, /* params and state, shared by every plan */
    KL_REGION_VIEW,       /* another buffer's memory (reshape, flatten) */
} kl_region;

typedef struct kl_buffer {
    int value;        /* IR value, or -1 for a scratch buffer of one group */
    ir_dtype dtype;
    int64_t numel, bytes;
    kl_region region;
    int64_t offset;   /* ARENA: byte offset in the arena */
    int view_of;      /* VIEW: the buffer whose memory this is */
    bool inplace;     /* VIEW: a result written over its operand (memory planning) */
    bool pinned;      /* read or written by the runtime between runs: inputs,
                         the loss, reports, kept values; never shares memory */
    int first, last;  /* ARENA: the steps it is live over, -1 when no step
                         touches it (codegen/memplan.c) */
} kl_buffer;

/* COLLECTIVE: a collective op (node) of the runtime's communicator, from
 * args[0] (read) into args[1] (written). */
typedef enum kl_step_kind { KL_STEP_KERNEL, KL_STEP_GEMM, KL_STEP_COLLECTIVE } kl_step_kind;

/* The elementwise work after a GEMM that cuBLASLt's epilogue can do in
 * the GEMM's own store (plan/lt_epilogue.c): one name per
 * CUBLASLT_EPILOGUE_*. The kernel step right after the GEMM step computes
 * the same thing; a backend that applies the epilogue skips that step, any
 * other runs it (the CPU backend always does). */
typedef enum kl_lt_epi {
    KL_LT_NONE,
    KL_LT_BIAS,          /* D = C + bias[col] */
    KL_LT_RELU,          /* D = relu(C) */
    KL_LT_RELU_BIAS,     /* D = relu(C + bias[col]) */
    KL_LT_GELU,          /* D = gelu_tanh(C) */
    KL_LT_GELU_BIAS,     /* D = gelu_tanh(C + bias[col]) */
    KL_LT_GELU_AUX,      /* D = gelu_tanh(C), aux = C */
    KL_LT_GELU_AUX_BIAS, /* D = gelu_tanh(C + bias[col]), aux = C + bias[col] */
    KL_LT_DGELU,         /* D = C gelu_tanh'(aux) */
    KL_LT_DGELU_BGRAD,   /* the same, and bias = the column sums of D */
    KL_LT_NEPI
} kl_lt_epi;

/* Buffers are -1 where the epilogue has none. Row-major: bias has one
 * element per column of C (n of them), aux is [m, n] like D. */
typedef struct kl_gemm_epilogue {
    kl_lt_epi kind;
    int bias; /* read (bias), or written (BGRAD: the bias gradient) */
    int aux;  /* written (GELU_AUX), or read (DGELU): GELU's operand */
    int d;    /* the epilogue's result, stored instead of C */
} kl_gemm_epilogue;

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b], row-major, for b < batch. */
typedef struct kl_gemm {
    ir_dtype dtype;     /* of A and B */
    ir_dtype out_dtype; /* of C (fp32 for low-precision products that must stay wide) */
    int ta, tb;
    int64_t m, n, k;
    int64_t batch;
    int64_t stride_a, stride_b, stride_c; /* elements between batch items; 0: shared */
    int64_t off_a, off_b, off_c;          /* elements from each buffer's start */
    bool accumulate;                      /* batch items sum into one C (beta 1 after the first) */
    double alpha, beta;
    int a, b, c;                          /* buffers */
    kl_gemm_epilogue epi;                 /* kind KL_LT_NONE: none */
    /* Converted operands within one run (plan/gemm_reuse.c; 0: none):
     * keep_a/keep_b, an id under which a backend that converts this
     * operand (the CPU widens 16-bit ones) may keep the converted copy,
     * since a later GEMM step reads it unchanged; reuse_a/reuse_b, the id
     * of an earlier step's kept copy that holds this operand's elements. */
    int keep_a, keep_b, reuse_a, reuse_b;
} kl_gemm;

/* "gelu_aux_bias": the CUBLASLT_EPILOGUE_* name, lower case. */
const char *plan_lt_epi_name(kl_lt_epi e);

/* How a kernel uses an argument; WRITE_FIRST: every element is written
 * before the kernel reads any (a zero fill, then sums into it). */
enum { KL_ARG_READ = 1, KL_ARG_WRITE = 2, KL_ARG_WRITE_FIRST = 4 };

typedef struct kl_step {
    kl_step_kind kind;
    ir_phase phase;
    int kernel;       /* KERNEL: index into plan.kernels */
    int args[IR_KERNEL_MAX_BUFS]; /* KERNEL: buffers in the kernel's parameter order; COLLECTIVE: in, out */
    uint8_t rw[IR_KERNEL_MAX_BUFS]; /* KERNEL, COLLECTIVE: per argument, KL_ARG_* */
    int nargs;
    kl_gemm gemm;
    bool lt_covered;  /* KERNEL: the GEMM step before it has an epilogue
                         (kl_gemm.epi) that computes what it does */
    int node;         /* the group's first IR node (labels, profiling) */
    int64_t bytes;    /* bytes the step must move at least */
    double flops;
} kl_step;

typedef struct kl_kernel_src {
    char *name;       /* kk_<hash of the C source> */
    char *what;       /* the ops it computes */
    char *c_src;      /* without the prelude */
    kir_cuda cuda;    /* the same kernel as CUDA C, with its launches */
    cg_attn_native attn; /* an attention kernel the CPU backend may run by
                            hand-written code (runtime/cpu/cpu_attn.c); kind
                            CG_ATTN_NONE for every other kernel */
} kl_kernel_src;

typedef struct kl_plan {
    const ir_graph *g;
    KL_VEC(kl_buffer) buffers;
    KL_VEC(kl_kernel_src) kernels;
    KL_VEC(kl_step) steps;
    int *value_buf;        /* per IR value: its buffer, or -1 */
    int nvalues;
    int64_t arena_bytes;
    bool planned;          /* offsets from memory planning, in-place results */
    int64_t arena_lower_bound; /* the most bytes live at one step */
    int64_t arena_unplanned;   /* every buffer in its own memory */
} kl_plan;

typedef struct kl_plan_opts {
    bool unplanned;  /* every buffer its own memory, no in-place results */
    const int *keep; /* values the caller reads after a run besides the
                        loss and reports (they stay live to the end) */
    int nkeep;
} kl_plan_opts;

/* Kernel lowering: the plan of a graph that went through the passes
 * (fusion groups set, nodes in schedule order): its buffers, one kernel
 * per fusion group and library calls, as steps; in-place results are
 * chosen here when the plan is planned (o NULL: the defaults: planned
 * unless the environment sets KILN_MEMPLAN=0). No offsets yet. */
kl_plan *plan_lower(const ir_graph *g, const kl_plan_opts *o);
/* Memory planning of a lowered plan: liveness over its steps and arena
 * offsets (plan/memplan.c), or every buffer its own memory when the
 * plan is unplanned; then plan_mark_gemm_reuse. */
void plan_memory(kl_plan *p);
/* A buffer touched at step's place (plan_memory_of's extra touches). */
typedef struct kl_touch {
    int step, buf;
} kl_touch;
/* plan_memory for a run of only the marked steps (a pipeline stage's:
 * plan_liveness_of), placing again a plan plan_memory placed. */
void plan_memory_of(kl_plan *p, const bool *steps, const kl_touch *extra, int nextra);
/* The keep and reuse ids of the plan's 16-bit GEMM operands (kl_gemm;
 * plan/gemm_reuse.c): after memory planning, which plan_memory does. */
void plan_mark_gemm_reuse(kl_plan *p);
/* True unless the environment turns memory planning off (KILN_MEMPLAN=0). */
bool plan_memplan_enabled(void);
void plan_free(kl_plan *p);
/* Every kernel's C source, with the prelude once: a compilable file. */
char *plan_c_source(const kl_plan *p);
/* The same in CUDA C, each kernel's launches in a comment before it. */
char *plan_cuda_source(const kl_plan *p);
/* A label for a step: "matmul @8:12 in dense.1". */
char *plan_step_label(const kl_plan *p, const kl_step *s);
/* One line per step, in order: its index, when it runs (startup: once,
 * before the first step; forward, backward: every micro-batch; update:
 * once per optimizer step) and its label (kiln ir --format steps). */
char *plan_steps_text(const kl_plan *p);
/* The buffers step st touches (at most IR_KERNEL_MAX_BUFS): a kernel's
 * arguments, a collective's operands, or a GEMM's A, B, C and its
 * epilogue's buffers (which a backend may write in the GEMM step).
 * Returns how many. */
int plan_step_buffers(const kl_step *st, int *bufs);
/* The GEMM epilogues a library may do, for start-up lines: "relu_bias 2,
 * bias 1 (3 of 5 GEMM steps)", or NULL when the plan has none. */
char *plan_lt_summary(const kl_plan *p);
/* The buffer backing value v, following views to the real one. */
int plan_real_buffer(const kl_plan *p, int buf);

#endif
