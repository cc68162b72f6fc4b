/* The backend interface: what the executor needs from a device.
 *
 * One implementation per target (runtime/exec/backend_cpu.c, and the CUDA
 * backend behind the same table). Device memory is opaque to the executor;
 * it moves data with copy_in/copy_out. Kernels are found by name (the hash
 * of their source), so a backend can take precompiled ones or compile what
 * is missing. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/cpu/cc.h"
#include "runtime/comm/comm.h"
#include "runtime/cpu/cpu_cores.h"
#include "plan/plan.h"

typedef struct kl_kargs {
    int64_t step;
    uint64_t seed;
} kl_kargs;

typedef void (*kl_cpu_kernel_fn)(void *const *bufs, const kl_kargs *args);

/* Kernels compiled into a training executable by `kiln build`. */
typedef struct kl_builtin_kernel {
    const char *name;
    kl_cpu_kernel_fn fn;
} kl_builtin_kernel;

typedef struct kl_backend kl_backend;

/* Where a GEMM's epilogue (kl_gemm.epi) reads and writes: D, the bias
 * (or its gradient) and aux; NULL where it has none. */
typedef struct kl_epi_ptrs {
    void *d, *bias, *aux;
} kl_epi_ptrs;

typedef struct kl_backend_ops {
    const char *name;
    void *(*alloc)(kl_backend *be, size_t bytes);
    void (*free)(kl_backend *be, void *p);
    void (*copy_in)(kl_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy_out)(kl_backend *be, void *dst, const void *src, size_t bytes);
    void (*fill_zero)(kl_backend *be, void *dst, size_t bytes);
    /* Makes every kernel of the plan launchable; -1 after an error. */
    int (*prepare)(kl_backend *be, const kl_plan *plan);
    void (*launch)(kl_backend *be, const kl_plan *plan, int kernel, void *const *bufs, const kl_kargs *args);
    void (*gemm)(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c);
    /* Optional: the GEMM with its epilogue g->epi done in the library's
     * store (the CUDA backend: cuBLASLt); true when it did both, and the
     * kernel step the epilogue covers must not run; false when it did
     * nothing (then the caller runs gemm and that kernel step). */
    bool (*gemm_epilogue)(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c, const kl_epi_ptrs *x);
    void (*sync)(kl_backend *be);
    void (*destroy)(kl_backend *be);
    /* Optional (NULL where a backend has no use for them). set_args: the
     * scalar arguments of the launches that follow; a device backend keeps
     * them in device memory, so a recorded graph reads the current ones. */
    void (*set_args)(kl_backend *be, const kl_kargs *args);
    /* Between capture_begin (0: capturing) and capture_end, launches and
     * GEMMs are recorded, not run; capture_end returns a graph to replay
     * with graph_launch, or NULL when recording failed (reported). */
    int (*capture_begin)(kl_backend *be);
    void *(*capture_end)(kl_backend *be);
    void (*graph_launch)(kl_backend *be, void *graph);
    void (*graph_free)(kl_backend *be, void *graph);
    /* Optional: the device memory free now, in bytes (--batch auto). */
    int64_t (*free_bytes)(kl_backend *be);
    /* Collectives on the backend's memory (comm.h's kl_coll): the CPU's
     * call MPI at once (kl_comm_run); the CUDA backend's enqueue NCCL on
     * its communication stream, after the compute work queued so far.
     * collective_wait (NULL: nothing to wait for) makes later compute
     * wait for every collective enqueued so far. collective NULL: this
     * build of the backend has none. */
    void (*collective)(kl_backend *be, const kl_coll *k);
    void (*collective_wait)(kl_backend *be);
    /* Optional: drops every converted GEMM operand kept so far
     * (kl_gemm.keep_a ...), and keeps and reuses them from now on only
     * when on. The executor turns it on for one run of a plan's steps in
     * their order (nothing else writes its buffers meanwhile) and off
     * after, so a kept copy never outlives the elements it was made from. */
    void (*gemm_reuse)(kl_backend *be, bool on);
} kl_backend_ops;

struct kl_backend {
    const kl_backend_ops *ops;
    int threads;
    char desc[160]; /* for progress lines: "cpu, 8 threads", "cuda: NVIDIA H200 (sm_90, 132 SMs)" */
};

typedef struct kl_cpu_options {
    int threads;                        /* 0: the rule of kl_cpu_default_threads */
    const char *threads_from;           /* where threads came from, for the description; NULL: "--threads" */
    const kl_builtin_kernel *builtins;  /* may be NULL */
    const char *cache_dir;              /* NULL: $XDG_CACHE_HOME/kiln or ~/.cache/kiln */
    bool quiet;                         /* no notice when compiling kernels */
    const char *jit_reason;             /* what makes kernels missing ("--batch 64"), for messages; may be NULL */
    const char *bf16_gemm;              /* auto (NULL), onednn, kiln or openblas: who runs bf16 GEMMs (choose_bf16) */
    const char *fp32_gemm;              /* auto (NULL), onednn or openblas: who runs fp32 GEMMs (runtime/cpu/cpu_dnnl.h) */
} kl_cpu_options;

/* The CPU backend's f16 conversions of GEMM operands and results (F16C
 * where the CPU has it): the same bits as kl_f16_to_f32 / kl_f32_to_f16. */
void kl_cpu_f16_widen(float *w, const uint16_t *h, int64_t n);
void kl_cpu_f16_narrow(uint16_t *h, const float *w, int64_t n);
/* Who runs a CPU backend's bf16 GEMMs, for the start-up line ("bf16
 * GEMMs: oneDNN 2.6.3 (AVX512_BF16)"); NULL for other backends. */
const char *kl_cpu_gemm_choice(const kl_backend *be);
/* Which path a CPU backend's f16 GEMM g takes: Kiln's kernel on the tile
 * unit or on AVX-512 FMAs (runtime/cpu/gemm16.h), or operands widened to fp32
 * for the fp32 library. */
typedef enum { KL_F16_WIDENED, KL_F16_AVX512, KL_F16_AMX } kl_f16_route;
kl_f16_route kl_cpu_f16_route(const kl_backend *be, const kl_gemm *g);
/* Whether a CPU backend's bf16 GEMM g runs on Kiln's AVX-512 FMA kernel
 * (--bf16-gemm kiln, or auto's choice: runtime/exec/backend_cpu.c
 * bf16_on_kiln); false for other backends. */
bool kl_cpu_bf16_on_kiln(const kl_backend *be, const kl_gemm *g);
/* Whether a 16-bit GEMM g that a CPU backend widens to fp32 runs on
 * OpenBLAS's sgemm although the fp32 choice is oneDNN's (few result
 * columns, where OpenBLAS is the faster: with its AVX-512 kernels,
 * kl_cpu_openblas_avx512). */
bool kl_cpu_wide_on_openblas(const kl_backend *be, const kl_gemm *g);
/* Whether OpenBLAS runs its AVX-512 sgemm kernels (its core is SkylakeX,
 * Cooperlake or SapphireRapids). */
bool kl_cpu_openblas_avx512(void);
/* NULL after an error when o asks for what cannot be (--bf16-gemm onednn
 * without oneDNN or bf16 instructions, an unknown --bf16-gemm). */
kl_backend *kl_cpu_backend_new(const kl_cpu_options *o);

/* Compiles C source into a shared object in the cache (keyed by a hash of
 * the source, the compiler and its flags) and opens it. A cached object
 * that is not this cache's for the key (not a private regular file of the
 * user's, without the key's mark, or not matching its KEY.sum) is
 * compiled again and replaced. A cache_dir that is not private is refused.
 * reason (may be NULL) says what needs the kernels ("--batch 64"), for the
 * notice and the error. Returns the dlopen handle, or NULL after printing
 * why (the compiler's output included). */
void *kl_cpu_jit(const char *source, const char *cache_dir, bool quiet, const char *reason);
/* One generated kernel for kl_cpu_jit_kernels: its symbol, its C source
 * (after kir_c_prelude()), and the function found (out). */
typedef struct kl_jit_kernel {
    const char *name, *src;
    void *fn;
} kl_jit_kernel;
typedef KL_VEC(void *) kl_jit_handles;
/* Each kernel of ks from the cache: from the object that already holds
 * it, whatever plan it was compiled for (the cache's per-kernel index),
 * the others compiled, split into chunks compiled at once on this
 * machine's cores. Every object opened is appended to handles (the caller
 * dlcloses them). Returns 0, or -1 after printing why. */
int kl_cpu_jit_kernels(kl_jit_kernel *ks, int n, const char *prelude, const char *cache_dir, bool quiet,
                       const char *reason, kl_jit_handles *handles);
/* The kernel cache's relocatable objects of the kernels ks (for kiln
 * build to link): cut into chunks as kl_cpu_jit_kernels does, compiled at
 * once where missing. A NULL-terminated array of paths (the caller frees
 * each and the array), or NULL after an error was printed. */
char **kl_cpu_objects(const kl_jit_kernel *ks, int n, const char *prelude, bool quiet);

/* Single-precision GEMM throughput in GFLOP/s, measured now: 1024^3
 * through the CPU backend be's fp32 GEMM (OpenBLAS's or oneDNN's sgemm,
 * as the run's), best of three (runtime/observe/bottleneck.h's compute peak). */
double kl_gemm_peak_gflops(kl_backend *be);

#endif
