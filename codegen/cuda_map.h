/* Internal to codegen: how a kernel-IR function maps to CUDA threads
 * (codegen/cuda_map.c), for the CUDA printer (codegen/emit_cuda.c).
 *
 * The mapping of loop kinds to threads (kir.h):
 *
 * - The kernel body splits into phases at its top-level grid loops (a PAR
 *   loop, or a SEQ loop whose body only scatters with ADDTO, whose
 *   iterations commute under atomics); the statements between them form
 *   single-block phases. Each phase is a launch; consecutive elementwise
 *   phases that touch disjoint buffers share one launch.
 * - A grid phase opens a chain of perfectly nested grid loops (LETs between
 *   them are recomputed inside, which is why they may not read what the
 *   loops write); a BPAR loop nested in them extends the chain (its
 *   iterations are independent, and one block per outer iteration would
 *   leave SMs idle when there are few). When the chain's body holds a block-level loop (RED, BPAR
 *   or PAR) with at least CU_BLOCK_MIN_INNER iterations, the phase runs one
 *   block per chain iteration (block mode); else one thread per chain
 *   iteration, grid-stride (flat mode), with every inner loop serial.
 * - In block mode the body runs on every thread of the block ("block
 *   context"): LETs are computed by all threads (their values are
 *   uniform), stores by thread 0, a RED loop's iterations are spread over
 *   the threads and combined with warp shuffles and shared memory (the
 *   result reaches every thread, bit-identical), BPAR and PAR loops are
 *   spread over the threads, SEQ loops and IFs stay uniform. Perfectly
 *   nested RED (or BPAR) loops are flattened into one index so adjacent
 *   threads read adjacent elements.
 * - Plain elementwise phases (a chain whose body only computes and stores)
 *   handle 16 bytes of the widest buffer per thread: buffers indexed by the
 *   innermost variable with unit stride, at a multiple of the vector width,
 *   are read and written with 16-byte accesses when the pointers allow.
 * - ADDTO is atomic; bf16/f16 atomics use a compare-and-swap loop that
 *   adds in fp32 and rounds once, as the C printer does.
 */
#ifndef KILN_CUDA_MAP_H
#define KILN_CUDA_MAP_H

#include "kir.h"

#define CU_MAX_CHAIN 32
/* A block-level loop shorter than this runs serially per thread: a block
 * of threads for a handful of iterations would leave most of them idle. */
#define CU_BLOCK_MIN_INNER 64
/* Past this many outer iterations, one thread each fills the device. */
#define CU_BLOCK_MAX_OUTER 65536

#define CU_MAX_GUARDS 8

/* Split reductions (cu_phase.split): a block phase of fewer than
 * CU_SPLIT_MAX_UNITS units whose first block-level reduction has at
 * least 2 * CU_SPLIT_MIN_SLICE elements gets about CU_SPLIT_BLOCKS
 * blocks in all (2 blocks per SM on a 132-SM H200 is 264; 512 leaves
 * room for an A100's 108 x 4), each reducing a slice of at least
 * CU_SPLIT_MIN_SLICE elements. KILN_CUDA_SPLIT=0 in the environment turns
 * it off (tests/cuda/occupancy_fails.sh: one block per output). */
#define CU_SPLIT_MAX_UNITS 256
#define CU_SPLIT_MIN_SLICE 2048
#define CU_SPLIT_BLOCKS 512

typedef uint64_t cu_bufset; /* a kernel has at most 64 buffers */

typedef enum cu_chain_kind { CU_CHAIN_GRID, CU_CHAIN_RED, CU_CHAIN_SPREAD } cu_chain_kind;

/* A launch's share of the kernel: a grid loop, or a run of other
 * statements that one block runs. */
typedef struct cu_phase {
    const kir_stmt *first, *end; /* a range of one statement list */
    const kir_stmt *guards[CU_MAX_GUARDS]; /* the IFs it is inside, outermost first */
    int nguards;
    const kir_stmt *top;         /* its top-level statement (itself, or the outermost guard) */
    bool grid;                   /* a grid loop (first), else one block runs the range */
    bool block;                  /* block mode */
    const kir_stmt *chain[CU_MAX_CHAIN];
    int nchain;
    int64_t units, inner;
    cu_bufset rd, wr;
    /* vectorisation (flat grid phases) */
    int vec;                     /* elements per unit; 1: none */
    cu_bufset vecbuf;               /* buffers accessed through vector registers */
    int launch;                  /* the launch it belongs to */
    /* split reduction (block phases; cu_split_phases decides): the first
     * block-level RED loop runs over `split` blocks per unit, each
     * writing its accumulators' partial values to the kernel's workspace
     * (a launch of its own), and the phase's launch combines them in a
     * fixed order; split_rest: the statements after the loop run over the
     * same `split` blocks per unit too (each a slice of the block-level
     * loops, block 0 the single-value stores). split < 2: none. */
    int64_t split;
    const kir_stmt *split_red;
    bool split_rest;
} cu_phase;

/* How a loop runs in block context (every thread of a block runs the
 * statements around it): its iterations spread over the threads and
 * combined (RED), spread (BPAR, PAR), or run by every thread (SEQ). */
typedef enum cu_block_role { CU_BLOCK_REDUCE, CU_BLOCK_SPREAD, CU_BLOCK_UNIFORM } cu_block_role;
cu_block_role cu_block_role_of(kir_loop_kind kind);

/* Splits k's body into phases and decides each one's mapping and
 * vectorisation; the caller frees *out. Returns the number of phases. */
int cu_split_phases(const kir_kernel *k, cu_phase **out);

/* Perfectly nested loops from s of one kind (LETs allowed between them
 * when they do not read what the inner loop writes): chain[0] = s. */
int cu_build_chain(cu_chain_kind kind, const kir_stmt *s, const kir_stmt **chain);
int64_t cu_chain_extent(const kir_stmt *const *chain, int n);

/* Buffers read (loaded) and written by expressions and statement ranges
 * [s, end), everything inside included. */
void cu_expr_loads(const kir_expr *e, cu_bufset *rd);
void cu_stmts_rw(const kir_stmt *s, const kir_stmt *end, cu_bufset *rd, cu_bufset *wr);
/* Buffers that share memory count as one: s with all of them if it has any. */
cu_bufset cu_alias_closure(const kir_kernel *k, cu_bufset s);
/* Marks the variables expressions and statements read (and assign). */
void cu_expr_vars(const kir_expr *e, bool *used);
void cu_stmts_vars(const kir_stmt *s, const kir_stmt *end, bool *used);

#endif
