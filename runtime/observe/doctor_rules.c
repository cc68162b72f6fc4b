/* kiln doctor's verdicts: facts (runtime/observe/doctor_probe.c) to verdicts by
 * version tables. Pure: nothing here probes the machine, so every rule is
 * unit-tested on made-up machines (tests/unit/test_doctor.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"
#include "base/support.h"

/* The oldest Linux driver release for each CUDA major version (NVIDIA's
 * CUDA compatibility table: "minimum required driver version for CUDA
 * minor version compatibility"). A driver of that release or newer runs
 * CUBINs built by any toolkit of that major version. */
static const struct {
    int major;
    const char *release;
} min_driver[] = {
    {11, "450.80.02"},
    {12, "525.60.13"},
    {13, "580.65.06"},
};

const char *kl_doctor_min_driver(int cuda_major)
{
    for (size_t i = 0; i < KL_ARRAY_LEN(min_driver); i++)
        if (min_driver[i].major == cuda_major)
            return min_driver[i].release;
    return NULL;
}

const char *kl_doctor_level_name(kl_doctor_level l)
{
    return l == KL_DOCTOR_OK ? "ok" : l == KL_DOCTOR_NOTE ? "note" : "problem";
}

typedef struct verdicts {
    kl_doctor_verdict *v;
    int n, max;
} verdicts;

static void say(verdicts *vs, kl_doctor_level level, const char *fmt, ...) KL_PRINTF(3, 4);
static void say(verdicts *vs, kl_doctor_level level, const char *fmt, ...)
{
    if (vs->n >= vs->max)
        return;
    kl_doctor_verdict *v = &vs->v[vs->n++];
    v->level = level;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->text, sizeof v->text, fmt, ap);
    va_end(ap);
}

static int arch_of(const kl_doctor_gpu *g) { return g->cc_major * 10 + g->cc_minor; }

/* The newest NVRTC target not newer than arch, or 0. */
static int best_target(const kl_doctor_facts *f, int arch)
{
    int best = 0;
    for (int i = 0; i < f->narchs; i++)
        if (f->archs[i] <= arch && f->archs[i] > best)
            best = f->archs[i];
    return best;
}

static bool targets(const kl_doctor_facts *f, int arch)
{
    for (int i = 0; i < f->narchs; i++)
        if (f->archs[i] == arch)
            return true;
    return false;
}

static void cpu_verdicts(const kl_doctor_facts *f, verdicts *vs)
{
    if (!f->avx2)
        say(vs, KL_DOCTOR_NOTE, "the CPU lacks AVX2: kernels run with narrower vectors (slower, same results)");
    if (f->blas_parallel == 1)
        say(vs, KL_DOCTOR_NOTE,
            "OpenBLAS uses its own pthreads while Kiln's kernels use OpenMP: the two thread pools can "
            "oversubscribe the cores; install the OpenMP build (libopenblas-openmp-dev)");
    else if (f->blas_parallel < 0)
        say(vs, KL_DOCTOR_NOTE, "OpenBLAS's build (threading) is unknown");
    if (!f->cc_version[0])
        say(vs, KL_DOCTOR_PROBLEM,
            "no working C compiler (%s: %s): kiln build and the kernels a run compiles need one; install gcc "
            "or set KILN_CC",
            f->cc[0] ? f->cc : "cc", f->cc_why[0] ? f->cc_why : "did not run");
    if (!f->mpi[0])
        say(vs, KL_DOCTOR_NOTE, "no MPI library (%s): one process per run", f->mpi_why[0] ? f->mpi_why : "not found");
}

static void driver_vs_toolkit(const kl_doctor_facts *f, verdicts *vs, const char *what, int major, int minor)
{
    int dmaj = f->driver_cuda / 1000, dmin = f->driver_cuda % 1000 / 10;
    const char *need = kl_doctor_min_driver(major);
    if (dmaj < major)
        say(vs, KL_DOCTOR_PROBLEM,
            "driver%s%s supports CUDA %d.%d, older than the CUDA %d.%d %s: kernels will not load; update the "
            "driver to >= %s",
            f->driver_release[0] ? " " : "", f->driver_release, dmaj, dmin, major, minor, what,
            need ? need : "one for that CUDA version");
    else if (dmaj == major && dmin < minor)
        say(vs, KL_DOCTOR_NOTE,
            "driver CUDA %d.%d is older than the CUDA %d.%d %s: CUBINs load (minor version compatibility), PTX "
            "(KILN_CUDA_PTX=1, or a GPU newer than NVRTC's targets) would not",
            dmaj, dmin, major, minor, what);
}

static void gpu_verdicts(const kl_doctor_facts *f, verdicts *vs)
{
    if (!f->driver_cuda) {
        say(vs, KL_DOCTOR_NOTE, "no CUDA driver (%s): training runs on the CPU backend",
            f->driver_why[0] ? f->driver_why : "libcuda.so.1 not found");
        return;
    }
    if (f->ngpus == 0) {
        say(vs, KL_DOCTOR_NOTE, "CUDA driver %d.%d found, but no GPU: training runs on the CPU backend",
            f->driver_cuda / 1000, f->driver_cuda % 1000 / 10);
        return;
    }
    bool nvrtc = f->nvrtc_major > 0;
    if (!nvrtc)
        say(vs, KL_DOCTOR_PROBLEM,
            "%d GPU%s but no NVRTC (%s): the CUDA backend cannot compile kernels; install the CUDA toolkit's "
            "NVRTC (libnvrtc.so.13 or .12) or set CUDA_HOME",
            f->ngpus, f->ngpus == 1 ? "" : "s", f->nvrtc_why[0] ? f->nvrtc_why : "libnvrtc not found");
    else
        driver_vs_toolkit(f, vs, "NVRTC", f->nvrtc_major, f->nvrtc_minor);
    if (!f->cublaslt)
        say(vs, KL_DOCTOR_PROBLEM, "no cuBLASLt (libcublasLt.so.13 or .12): the GPU's GEMMs need it");
    else
        driver_vs_toolkit(f, vs, "cuBLASLt", f->cublaslt / 10000, f->cublaslt / 100 % 100);
    int newest = 0, oldest = 0;
    for (int i = 0; i < f->narchs; i++) {
        newest = f->archs[i] > newest ? f->archs[i] : newest;
        oldest = !oldest || f->archs[i] < oldest ? f->archs[i] : oldest;
    }
    for (int i = 0; i < f->ngpus && i < KL_DOCTOR_MAX_GPUS; i++) {
        const kl_doctor_gpu *g = &f->gpus[i];
        int a = arch_of(g);
        if (g->cc_major < 7) {
            say(vs, KL_DOCTOR_PROBLEM, "GPU %d (%s) is sm_%d: Kiln needs compute capability 7.0 or newer", i, g->name, a);
        } else if (!nvrtc) {
            continue;
        } else if (!f->narchs) {
            say(vs, KL_DOCTOR_NOTE, "GPU %d (%s, sm_%d): NVRTC %d.%d does not list its targets", i, g->name, a,
                f->nvrtc_major, f->nvrtc_minor);
        } else if (targets(f, a)) {
            say(vs, KL_DOCTOR_OK, "GPU %d (%s): sm_%d, compiled to CUBIN by NVRTC %d.%d", i, g->name, a,
                f->nvrtc_major, f->nvrtc_minor);
        } else if (a < oldest) {
            say(vs, KL_DOCTOR_PROBLEM,
                "GPU %d (%s) is sm_%d, older than NVRTC %d.%d's oldest target sm_%d: kernels cannot be compiled "
                "for it; use an older CUDA toolkit's NVRTC",
                i, g->name, a, f->nvrtc_major, f->nvrtc_minor, oldest);
        } else {
            /* Newer than (or between) NVRTC's CUBIN targets: PTX for the
             * newest target below it, which the driver JIT-compiles. */
            int b = best_target(f, a);
            int dmaj = f->driver_cuda / 1000, dmin = f->driver_cuda % 1000 / 10;
            bool jit = dmaj > f->nvrtc_major || (dmaj == f->nvrtc_major && dmin >= f->nvrtc_minor);
            say(vs, jit ? KL_DOCTOR_NOTE : KL_DOCTOR_PROBLEM,
                "GPU %d (%s): sm_%d is newer than NVRTC %d.%d's CUBIN targets (newest sm_%d): PTX for compute_%d "
                "will be JIT-compiled by the driver%s",
                i, g->name, a, f->nvrtc_major, f->nvrtc_minor, newest, b,
                jit ? " at first start (cached)" : ", which is older than NVRTC and cannot load it; update the driver");
        }
    }
    if (!f->nccl)
        say(vs, KL_DOCTOR_NOTE, "no NCCL (libnccl.so.2): no collectives between GPUs");
}

int kl_doctor_verdicts(const kl_doctor_facts *f, kl_doctor_verdict *out, int max)
{
    verdicts vs = {out, 0, max};
    cpu_verdicts(f, &vs);
    gpu_verdicts(f, &vs);
    bool problem = false;
    for (int i = 0; i < vs.n; i++)
        problem |= vs.v[i].level == KL_DOCTOR_PROBLEM;
    if (!problem)
        say(&vs, KL_DOCTOR_OK, "what Kiln needs fits: %s",
            f->ngpus > 0 && f->driver_cuda ? "the CUDA backend, with the CPU backend beside it"
                                           : "the CPU backend (no usable GPU)");
    return vs.n;
}

bool kl_doctor_fits(const kl_doctor_facts *f)
{
    kl_doctor_verdict v[KL_DOCTOR_MAX_VERDICTS];
    int n = kl_doctor_verdicts(f, v, KL_DOCTOR_MAX_VERDICTS);
    for (int i = 0; i < n; i++)
        if (v[i].level == KL_DOCTOR_PROBLEM)
            return false;
    return true;
}

char *kl_doctor_oneline(const kl_doctor_facts *f)
{
    kl_buf b = {0};
    kl_buf_printf(&b, "kiln %s: %s; %d cores", KILN_VERSION, f->os, f->physical_cores);
    const char *isa[] = {f->avx2 ? "AVX2" : NULL, f->avx512f ? "AVX-512" : NULL,
                         f->avx512_bf16 ? "AVX512-BF16" : NULL, f->amx ? "AMX" : NULL};
    for (size_t i = 0; i < KL_ARRAY_LEN(isa); i++)
        if (isa[i])
            kl_buf_printf(&b, " %s", isa[i]);
    kl_buf_printf(&b, "; OpenBLAS %s", f->blas_core[0] ? f->blas_core : "(unknown core)");
    if (!f->gpu_probed)
        kl_buf_puts(&b, "; GPU not probed");
    else if (f->driver_cuda)
        kl_buf_printf(&b, "; CUDA driver %d.%d", f->driver_cuda / 1000, f->driver_cuda % 1000 / 10);
    else
        kl_buf_puts(&b, "; no CUDA driver");
    if (f->nvrtc_major)
        kl_buf_printf(&b, ", NVRTC %d.%d", f->nvrtc_major, f->nvrtc_minor);
    if (f->ngpus)
        kl_buf_printf(&b, ", %d GPU%s (%s, sm_%d)", f->ngpus, f->ngpus == 1 ? "" : "s", f->gpus[0].name,
                      arch_of(&f->gpus[0]));
    return kl_buf_take(&b);
}
