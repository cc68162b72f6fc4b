/* The CUDA printer of the kernel IR: CUDA C for NVRTC (codegen/emit_cuda.c).
 *
 * One kernel-IR function becomes one or more __global__ functions (its
 * launches), run in order on one stream: the top-level loop nests of a
 * kernel need a grid-wide barrier between them when one reads what another
 * wrote, and a launch boundary is that barrier. Independent elementwise
 * nests share one launch (their index spaces are concatenated).
 *
 * Each launch carries what the runtime needs to configure it; every
 * generated loop strides by gridDim/blockDim, so any grid is correct and
 * the grid size is only a performance choice (runtime/exec/cuda_launch.h). */
#ifndef KILN_EMIT_CUDA_H
#define KILN_EMIT_CUDA_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kir_kernel kir_kernel;

typedef enum kir_cuda_map {
    KIR_CUDA_FLAT,  /* one thread per unit of work, grid-stride */
    KIR_CUDA_BLOCK, /* one block per outer iteration, block-stride; needs
                       blockDim.x a multiple of 32 (warp shuffles) */
} kir_cuda_map;

typedef struct kir_cuda_launch {
    char fn[48];       /* the __global__ function's name */
    kir_cuda_map map;
    int64_t units;     /* FLAT: units of work (elements, or groups of
                          `vector` elements); BLOCK: outer iterations */
    int64_t inner;     /* BLOCK: the largest block-level loop (threads that
                          have work); FLAT: 0 */
    int vector;        /* FLAT: elements per unit when vectorised, else 1 */
    int threads;       /* BLOCK: the block size a hand-written kernel is
                          written for (codegen/cuda_attn.c); 0: chosen at
                          launch (runtime/exec/cuda_launch.h) */
} kir_cuda_launch;

enum { KIR_CUDA_BF16 = 1, KIR_CUDA_F16 = 2 };

typedef struct kir_cuda {
    char *src;                 /* the __global__ functions, no prelude */
    kir_cuda_launch *launches; /* in launch order */
    int nlaunches;
    unsigned needs;            /* KIR_CUDA_BF16 | KIR_CUDA_F16 */
    int nbufs;                 /* buffer parameters, then (with a workspace) a
                                  double *, then a const kl_kargs * */
    int64_t workspace;         /* bytes of scratch its split reductions need
                                  (0: none, and no workspace parameter);
                                  at most KIR_CUDA_WORKSPACE_BYTES. The
                                  runtime passes one buffer of that size,
                                  allocated once, to every such kernel */
} kir_cuda;

/* The most workspace a kernel needs (codegen/cuda_map.h's split limits:
 * units x slices x accumulators doubles). */
#define KIR_CUDA_WORKSPACE_BYTES ((int64_t)1 << 20)

/* Prints kernel k (named: kir_finish ran) as CUDA C. Launch names are
 * k->name, or k->name + "_<i>" when there are several. */
void kir_emit_cuda(const kir_kernel *k, kir_cuda *out);
void kir_cuda_free(kir_cuda *c);
/* A whole NVRTC program: the prelude (includes for `needs`, the RNG, block
 * reductions, atomics) followed by src. Caller frees. */
char *kir_cuda_program(const char *src, unsigned needs);

#endif
