/* What a backend needs to run an attention kernel by a hand-written
 * function instead of the kernel IR's generated code (the CPU backend:
 * runtime/cpu_attn.c). The generated kernel stays the reference, the
 * fallback and the GPU's kernel; this only describes the same
 * computation: the geometry of codegen/k_attn.c and which kernel
 * parameter holds which operand and result. */
#ifndef KILN_CODEGEN_ATTN_NATIVE_H
#define KILN_CODEGEN_ATTN_NATIVE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum cg_attn_kind {
    CG_ATTN_NONE,    /* not an attention kernel a native function can run */
    CG_ATTN_FORWARD, /* (q, k, v) -> (out, lse) */
    CG_ATTN_GRAD_Q,  /* (dout, q, k, v, out, lse) -> dq */
    CG_ATTN_GRAD_KV, /* (dout, q, k, v, out, lse) -> (dk, dv) */
} cg_attn_kind;

enum { CG_ATTN_MAX_ARGS = 8 };

typedef struct cg_attn_native {
    cg_attn_kind kind;
    int64_t batch; /* product of the leading dims (batch x heads) */
    int64_t tq, tk, d, dv;
    bool causal;
    double scale;
    /* The kernel parameter of each of the op's operands, then of each of
     * its results, in the op's order. */
    int arg[CG_ATTN_MAX_ARGS];
    int nargs;
} cg_attn_native;

#endif
