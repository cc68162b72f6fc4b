/* Run-time compilation of generated CUDA C with NVRTC, with an on-disk
 * cache (runtime/exec/nvrtc.c).
 *
 * NVRTC, the driver and cuBLASLt are opened with dlopen, so a binary built
 * with the toolkit starts on machines that lack them; NVRTC needs no GPU,
 * which is how every kernel is compiled and checked on machines without
 * one. Built only where CMake found the CUDA toolkit (KILN_HAVE_CUDA). */
#ifndef KILN_NVRTC_H
#define KILN_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/plan.h"

/* One program to compile; the results are filled in. */
typedef struct kl_nvrtc_job {
    const char *name;  /* for messages: the plan's kernel name */
    const char *src;   /* the whole program (prelude included) */
    char *owned;       /* freed with the job (src, when made for it) */
    void *image;       /* CUBIN, or PTX (NUL-terminated) */
    size_t size;
    char *log;         /* NVRTC's log: warnings and ptxas -v lines */
    bool cached;       /* read from the cache, not compiled */
    int rc;            /* 0, or -1 after a failure (reported) */
} kl_nvrtc_job;

typedef struct kl_nvrtc_opts {
    const char *arch;       /* "sm_90": read from the device, or given */
    bool ptx;               /* PTX (compute_XY) instead of CUBIN */
    int threads;            /* parallel compiles; 0: the online cores */
    const char *cache_dir;  /* NULL: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln (cuda/) */
    bool no_cache;
    bool quiet;             /* no notice when compiling */
} kl_nvrtc_opts;

/* Opens NVRTC; 0, or -1 with the reason in why. */
int kl_nvrtc_load(char *why, size_t n);
/* NVRTC's version (after a successful load). */
void kl_nvrtc_version(int *major, int *minor);
/* The target NVRTC compiles for a GPU of compute capability arch (90 for
 * sm_90; after a successful load): arch itself when NVRTC lists it (or
 * lists nothing); for a GPU newer than NVRTC's CUBIN targets, the newest
 * target below it with *ptx set (kl_nvrtc_compile then makes PTX, which
 * the driver JIT-compiles). */
int kl_nvrtc_target(int arch, bool *ptx);
/* Compiles the jobs on o->threads threads, each through the cache.
 * Returns the number that failed; each failure prints NVRTC's log and
 * the program with line numbers. */
int kl_nvrtc_compile(kl_nvrtc_job *jobs, int n, const kl_nvrtc_opts *o);
void kl_nvrtc_jobs_free(kl_nvrtc_job *jobs, int n);

/* What ptxas reported for __global__ function fn (needs the log of a
 * CUBIN compile). Returns 0, or -1 when the log has no such entry. */
typedef struct kl_ptxas_info {
    int registers, stack_bytes, spill_stores, spill_loads;
    int smem_bytes; /* static shared memory (0 when ptxas reports none) */
} kl_ptxas_info;
int kl_ptxas_info_of(const char *log, const char *fn, kl_ptxas_info *out);

/* dlopen of the first of names that opens, bare (the loader's search
 * path) and then in the toolkit's library folders. NULL, with why. */
void *kl_cuda_dlopen(const char *const *names, char *why, size_t n);
/* The toolkit's include folder (for cuda_bf16.h and cuda_fp16.h), or NULL. */
const char *kl_cuda_include_dir(void);

#endif
