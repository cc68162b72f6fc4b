/* What a backend needs to run an attention kernel by a hand-written
 * function instead of the kernel IR's generated code (the CPU backend:
 * runtime/cpu/cpu_attn.c). The generated kernel stays the reference, the
 * fallback and the GPU's kernel; this only describes the same
 * computation: the geometry of codegen/k_attn.c and which kernel
 * parameter holds which operand and result. */
#ifndef KILN_CODEGEN_ATTN_NATIVE_H
#define KILN_CODEGEN_ATTN_NATIVE_H

#include <stdbool.h>
#include <stddef.h>
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
    /* Per operand and result (the op's order): bf16 rather than f32 (with
     * precision = bf16: q, k, v and dout; results are f32). */
    bool bf16[CG_ATTN_MAX_ARGS];
    int nargs;
} cg_attn_native;

/* The CUDA backend's tiled attention (codegen/cuda_attn.cuh, instantiated
 * by codegen/cuda_attn.c) in place of the generated kernel. */
typedef struct kir_cuda kir_cuda;

/* Whether the tiled kernel runs attention kernel a: true, or false with
 * the reason in why (not f32 or bf16 operands, f32 results, a head wider
 * than 128, or KILN_CUDA_ATTENTION=generated). */
bool cg_cuda_attention_fits(const cg_attn_native *a, int nbufs, char *why, size_t n);
/* Replaces *c (the generated kernel `name`, of nbufs buffers) by the tiled
 * kernel when it fits; returns whether it did. */
bool cg_cuda_attention(const cg_attn_native *a, const char *name, kir_cuda *c);

#endif
