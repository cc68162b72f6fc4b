/* The CUDA backend (runtime/exec/backend_cuda.c; runtime/exec/cuda_stub.c in builds
 * without the toolkit). */
#ifndef KILN_BACKEND_CUDA_H
#define KILN_BACKEND_CUDA_H

#include "backend.h"

/* A kernel compiled by `kiln build --cuda-arch` into the executable. */
typedef struct kl_cuda_builtin {
    const char *name;  /* the plan's kernel name */
    const char *arch;  /* "sm_90" */
    const unsigned char *image;
    size_t size;
} kl_cuda_builtin;

typedef struct kl_cuda_options {
    int device;                       /* ordinal */
    bool tf32;                        /* fp32 GEMMs on TF32 tensor cores */
    bool quiet;                       /* no notice when compiling kernels */
    const char *cache_dir;            /* NULL: the default (see nvrtc.h) */
    const kl_cuda_builtin *builtins;  /* may be NULL; ends with a NULL name */
} kl_cuda_options;

/* Kernels compiled into the executable (its generated main registers
 * them before anything else runs); used when the options give none. */
void kl_cuda_set_builtins(const kl_cuda_builtin *table);

/* A backend on the GPU, or NULL with a one-line reason in why (no driver,
 * no device, no NVRTC or cuBLASLt, or a build without CUDA). */
kl_backend *kl_cuda_backend_new(const kl_cuda_options *o, char *why, size_t n);
bool kl_backend_is_cuda(const kl_backend *be);
/* Device-to-device copy bandwidth (GB/s, bytes read + written), measured
 * with a 256 MiB copy. */
double kl_cuda_copy_bandwidth(kl_backend *be);
/* Seconds between two points of the compute stream's work: start a
 * timer, enqueue work, stop (synchronises). */
void kl_cuda_timer_start(kl_backend *be);
double kl_cuda_timer_stop(kl_backend *be);

#endif
