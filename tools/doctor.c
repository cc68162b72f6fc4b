/* kiln doctor: what Kiln finds on this machine and whether it fits
 * (runtime/observe/doctor.h); exit status 0 when it fits, 1 when not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor_cmd.h"
#include "base/support.h"
#include "runtime/observe/doctor.h"

static const char usage[] =
    "usage: kiln doctor [--json]\n"
    "\n"
    "Prints what Kiln finds on this machine: OS, CPU (cores, AVX2, AVX-512,\n"
    "AVX512-BF16, AMX), OpenBLAS (core, threading, threads), the C compiler\n"
    "kernels are built with, MPI, the CUDA driver, NVRTC and the architectures\n"
    "it targets, cuBLASLt, NCCL and each GPU; then verdicts from version tables\n"
    "(driver against toolkit, GPU architecture against NVRTC's targets).\n"
    "Exit status 0 when what Kiln needs fits (the CPU backend alone fits\n"
    "without a GPU), 1 when something does not.\n"
    "\n"
    "  --json   one JSON object instead of text\n";

static void version3(char *out, size_t n, int v, int major_div, int minor_div, int minor_mod)
{
    if (v)
        snprintf(out, n, "%d.%d.%d", v / major_div, v / minor_div % minor_mod, v % minor_div);
    else
        snprintf(out, n, "not found");
}

static const char *parallel_name(int p)
{
    return p == 0 ? "sequential" : p == 1 ? "pthreads" : p == 2 ? "OpenMP" : "unknown threading";
}

static void print_text(const kl_doctor_facts *f, const kl_doctor_verdict *v, int nv, bool fits)
{
    char lt[32], nccl[32];
    version3(lt, sizeof lt, f->cublaslt, 10000, 100, 100);
    version3(nccl, sizeof nccl, f->nccl, 10000, 100, 100);
    printf("kiln %s doctor\n", KILN_VERSION);
    printf("  os        %s\n", f->os);
    printf("  cpu       %s: %d physical cores, %d logical CPUs; AVX2 %s, AVX-512 %s, AVX512-BF16 %s, AMX %s\n",
           f->cpu_model[0] ? f->cpu_model : "unknown model", f->physical_cores, f->logical_cpus, f->avx2 ? "yes" : "no",
           f->avx512f ? "yes" : "no", f->avx512_bf16 ? "yes" : "no", f->amx ? "yes" : "no");
    printf("  openblas  core %s, %s, %d threads (%s)\n", f->blas_core, parallel_name(f->blas_parallel), f->blas_threads,
           f->blas_config);
    if (f->cc_version[0])
        printf("  cc        %s: %s\n", f->cc, f->cc_version);
    else
        printf("  cc        %s: not working (%s)\n", f->cc, f->cc_why);
    printf("  mpi       %s\n", f->mpi[0] ? f->mpi : "not found");
    if (f->driver_cuda)
        printf("  driver    CUDA %d.%d%s%s\n", f->driver_cuda / 1000, f->driver_cuda % 1000 / 10,
               f->driver_release[0] ? ", release " : "", f->driver_release);
    else
        printf("  driver    not found (%s)\n", f->driver_why);
    if (f->nvrtc_major) {
        printf("  nvrtc     %d.%d, targets", f->nvrtc_major, f->nvrtc_minor);
        for (int i = 0; i < f->narchs; i++)
            printf(" sm_%d", f->archs[i]);
        printf("%s\n", f->narchs ? "" : " (not listed)");
    } else {
        printf("  nvrtc     not found (%s)\n", f->nvrtc_why);
    }
    printf("  cublaslt  %s\n", lt);
    printf("  nccl      %s\n", nccl);
    printf("  cudnn     not used (Kiln generates its own kernels; convolutions run as cuBLASLt GEMMs)\n");
    if (!f->ngpus)
        printf("  gpus      none\n");
    for (int i = 0; i < f->ngpus; i++) {
        const kl_doctor_gpu *g = &f->gpus[i];
        printf("  gpu %-5d %s: sm_%d%d, %d SMs, %.1f GiB, %d MHz, memory %d MHz\n", i, g->name, g->cc_major, g->cc_minor,
               g->sms, (double)g->memory / 1073741824.0, g->clock_mhz, g->memory_clock_mhz);
    }
    printf("verdicts\n");
    for (int i = 0; i < nv; i++)
        printf("  %-8s %s\n", kl_doctor_level_name(v[i].level), v[i].text);
    printf("%s\n", fits ? "fits (exit status 0)" : "does not fit (exit status 1)");
}

static void print_json(const kl_doctor_facts *f, const kl_doctor_verdict *v, int nv, bool fits)
{
    printf("{\"kiln\": \"%s\", \"os\": ", KILN_VERSION);
    kl_fput_json_str(stdout, f->os);
    printf(", \"cpu\": {\"model\": ");
    kl_fput_json_str(stdout, f->cpu_model);
    printf(", \"physical_cores\": %d, \"logical_cpus\": %d, \"avx2\": %s, \"avx512f\": %s, \"avx512_bf16\": %s, "
           "\"amx\": %s}",
           f->physical_cores, f->logical_cpus, f->avx2 ? "true" : "false", f->avx512f ? "true" : "false",
           f->avx512_bf16 ? "true" : "false", f->amx ? "true" : "false");
    printf(", \"openblas\": {\"core\": ");
    kl_fput_json_str(stdout, f->blas_core);
    printf(", \"config\": ");
    kl_fput_json_str(stdout, f->blas_config);
    printf(", \"threads\": %d, \"parallel\": \"%s\"}, \"cc\": {\"command\": ", f->blas_threads,
           parallel_name(f->blas_parallel));
    kl_fput_json_str(stdout, f->cc);
    printf(", \"version\": ");
    if (f->cc_version[0])
        kl_fput_json_str(stdout, f->cc_version);
    else
        printf("null");
    printf("}, \"mpi\": ");
    if (f->mpi[0])
        kl_fput_json_str(stdout, f->mpi);
    else
        printf("null");
    printf(", \"driver\": ");
    if (f->driver_cuda) {
        printf("{\"cuda\": \"%d.%d\", \"release\": ", f->driver_cuda / 1000, f->driver_cuda % 1000 / 10);
        kl_fput_json_str(stdout, f->driver_release);
        printf("}");
    } else {
        printf("null");
    }
    printf(", \"driver_why\": ");
    kl_fput_json_str(stdout, f->driver_why);
    printf(", \"nvrtc\": ");
    if (f->nvrtc_major) {
        printf("{\"version\": \"%d.%d\", \"archs\": [", f->nvrtc_major, f->nvrtc_minor);
        for (int i = 0; i < f->narchs; i++)
            printf("%s\"sm_%d\"", i ? ", " : "", f->archs[i]);
        printf("]}");
    } else {
        printf("null");
    }
    char lt[32], nccl[32];
    version3(lt, sizeof lt, f->cublaslt, 10000, 100, 100);
    version3(nccl, sizeof nccl, f->nccl, 10000, 100, 100);
    printf(", \"cublaslt\": ");
    if (f->cublaslt)
        kl_fput_json_str(stdout, lt);
    else
        printf("null");
    printf(", \"nccl\": ");
    if (f->nccl)
        kl_fput_json_str(stdout, nccl);
    else
        printf("null");
    printf(", \"cudnn\": \"not used\", \"gpus\": [");
    for (int i = 0; i < f->ngpus; i++) {
        const kl_doctor_gpu *g = &f->gpus[i];
        printf("%s{\"name\": ", i ? ", " : "");
        kl_fput_json_str(stdout, g->name);
        printf(", \"arch\": \"sm_%d%d\", \"sms\": %d, \"memory_bytes\": %lld, \"clock_mhz\": %d, \"memory_clock_mhz\": %d}",
               g->cc_major, g->cc_minor, g->sms, (long long)g->memory, g->clock_mhz, g->memory_clock_mhz);
    }
    printf("], \"verdicts\": [");
    for (int i = 0; i < nv; i++) {
        printf("%s{\"level\": \"%s\", \"text\": ", i ? ", " : "", kl_doctor_level_name(v[i].level));
        kl_fput_json_str(stdout, v[i].text);
        printf("}");
    }
    printf("], \"fits\": %s}\n", fits ? "true" : "false");
}

int kl_doctor_main(int argc, char **argv)
{
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else {
            kl_error("kiln doctor: unknown option %s (see kiln doctor --help)", argv[i]);
            return 2;
        }
    }
    kl_doctor_facts *f = kl_xcalloc(1, sizeof *f);
    kl_doctor_probe(f, true, true);
    kl_doctor_verdict v[KL_DOCTOR_MAX_VERDICTS];
    int nv = kl_doctor_verdicts(f, v, KL_DOCTOR_MAX_VERDICTS);
    bool fits = true;
    for (int i = 0; i < nv; i++)
        fits &= v[i].level != KL_DOCTOR_PROBLEM;
    if (json)
        print_json(f, v, nv, fits);
    else
        print_text(f, v, nv, fits);
    free(f);
    if (fflush(stdout))
        return 1;
    return fits ? 0 : 1;
}
