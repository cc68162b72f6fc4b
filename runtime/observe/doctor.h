/* What Kiln finds on this machine and whether it fits: `kiln doctor`, and
 * the one-line version the training executable prints at start-up.
 *
 * kl_doctor_probe (runtime/observe/doctor_probe.c) fills in the facts: the OS and
 * CPU, OpenBLAS, the C compiler, and the GPU libraries opened with dlopen
 * (the CUDA driver, NVRTC, cuBLASLt, NCCL, MPI), so it runs in any build
 * and on machines that lack them. kl_doctor_verdicts (runtime/observe/doctor_rules.c)
 * turns facts into verdicts by version tables alone: a pure function,
 * unit-tested without a GPU (tests/unit/test_doctor.c). */
#ifndef KILN_DOCTOR_H
#define KILN_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KL_DOCTOR_MAX_GPUS = 16, KL_DOCTOR_MAX_ARCHS = 64, KL_DOCTOR_MAX_VERDICTS = 48 };

typedef struct kl_doctor_gpu {
    char name[128];
    int cc_major, cc_minor; /* compute capability: sm_<major><minor> */
    int sms;
    int64_t memory;         /* bytes */
    int clock_mhz, memory_clock_mhz; /* 0: unknown */
} kl_doctor_gpu;

typedef struct kl_doctor_facts {
    char os[160];
    char cpu_model[160];
    int physical_cores, logical_cpus;
    bool avx2, avx512f, avx512_bf16, amx;
    /* OpenBLAS: core name and build configuration, "" when unknown;
     * parallel: 0 sequential, 1 pthreads, 2 OpenMP, -1 unknown. */
    char blas_core[64], blas_config[256];
    int blas_threads, blas_parallel;
    /* The C compiler kernels are built with, and the first line of its
     * --version ("" when it did not run; cc_why says why). */
    char cc[160], cc_version[200], cc_why[200];
    /* MPI's library version string ("" when no libmpi; mpi_why). */
    char mpi[200], mpi_why[200];
    /* The CUDA driver: the CUDA version it supports (12040 for 12.4; 0
     * when libcuda is absent or cuInit failed: driver_why says why) and
     * its release ("580.65.06", from NVML; "" when unknown). */
    bool gpu_probed;
    int driver_cuda;
    char driver_release[32], driver_why[200];
    /* NVRTC's version (0.0: absent, nvrtc_why) and the sm_XY it targets. */
    int nvrtc_major, nvrtc_minor;
    int archs[KL_DOCTOR_MAX_ARCHS];
    int narchs;
    char nvrtc_why[200];
    int cublaslt; /* cublasLtGetVersion(): 130000 for 13.0.0; 0: absent */
    int nccl;     /* ncclGetVersion(): 22707 for 2.27.7; 0: absent */
    int ngpus;
    kl_doctor_gpu gpus[KL_DOCTOR_MAX_GPUS];
} kl_doctor_facts;

typedef enum { KL_DOCTOR_OK, KL_DOCTOR_NOTE, KL_DOCTOR_PROBLEM } kl_doctor_level;

typedef struct kl_doctor_verdict {
    kl_doctor_level level;
    char text[400];
} kl_doctor_verdict;

/* Fills f. full: also runs the C compiler (--version) and opens MPI,
 * cuBLASLt and NCCL; without it (the start-up line) only what is cheap:
 * OS, CPU, OpenBLAS, driver and GPUs, and NVRTC when there is a GPU.
 * gpu false: not the driver either (a run forced onto the CPU does not
 * pay for cuInit); f->gpu_probed says which. */
void kl_doctor_probe(kl_doctor_facts *f, bool full, bool gpu);

/* The verdicts on f, into out (at most max); returns how many. A pure
 * function of f: version tables, no probing. */
int kl_doctor_verdicts(const kl_doctor_facts *f, kl_doctor_verdict *out, int max);
/* True when no verdict on f is a problem: what Kiln needs fits. */
bool kl_doctor_fits(const kl_doctor_facts *f);
/* The oldest Linux driver release ("580.65.06") that runs a CUDA
 * toolkit of this major version, or NULL when the table lacks it. */
const char *kl_doctor_min_driver(int cuda_major);
/* A one-line summary of f ("kiln 0.1.0: Linux 6.1 x86_64; CPU ...");
 * caller frees. */
char *kl_doctor_oneline(const kl_doctor_facts *f);
const char *kl_doctor_level_name(kl_doctor_level l);

#endif
