/* kiln doctor's verdicts (runtime/observe/doctor_rules.c) on made-up machines: the
 * version tables (driver against NVRTC and cuBLASLt, GPU architecture
 * against NVRTC's targets) without a GPU. And, where the build has NVRTC,
 * the PTX fallback for a GPU newer than NVRTC's CUBIN targets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "runtime/observe/doctor.h"
#ifdef KILN_HAVE_CUDA
#include "runtime/exec/nvrtc.h"
#endif

/* A CPU machine with a compiler, OpenMP OpenBLAS and MPI, no driver. */
static kl_doctor_facts cpu_machine(void)
{
    kl_doctor_facts f;
    memset(&f, 0, sizeof f);
    snprintf(f.os, sizeof f.os, "Linux 6.1 x86_64");
    f.physical_cores = 8;
    f.avx2 = true;
    f.blas_parallel = 2;
    snprintf(f.cc, sizeof f.cc, "cc");
    snprintf(f.cc_version, sizeof f.cc_version, "gcc 12.2.0");
    snprintf(f.mpi, sizeof f.mpi, "Open MPI v4.1.4");
    snprintf(f.driver_why, sizeof f.driver_why, "libcuda.so.1: cannot open shared object file");
    return f;
}

/* The same with a driver for CUDA drv (12040: 12.4), NVRTC nv_major.nv_minor
 * targeting sm_75 .. sm_90 (and sm_100, sm_120 from 12.8), cuBLASLt of
 * NVRTC's version, NCCL and one GPU of architecture arch. */
static kl_doctor_facts gpu_machine(int drv, int nv_major, int nv_minor, int arch)
{
    kl_doctor_facts f = cpu_machine();
    f.driver_why[0] = 0;
    f.driver_cuda = drv;
    snprintf(f.driver_release, sizeof f.driver_release, "550.54.15");
    f.nvrtc_major = nv_major;
    f.nvrtc_minor = nv_minor;
    static const int archs[] = {75, 80, 86, 87, 89, 90, 100, 120};
    bool blackwell = nv_major > 12 || (nv_major == 12 && nv_minor >= 8);
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (archs[i] < 100 || blackwell)
            f.archs[f.narchs++] = archs[i];
    f.cublaslt = nv_major * 10000 + nv_minor * 100;
    f.nccl = 22707;
    f.ngpus = 1;
    snprintf(f.gpus[0].name, sizeof f.gpus[0].name, "Test GPU");
    f.gpus[0].cc_major = arch / 10;
    f.gpus[0].cc_minor = arch % 10;
    f.gpus[0].sms = 132;
    return f;
}

/* The verdicts' text, one per line, each with its level. */
static char *verdicts(const kl_doctor_facts *f)
{
    kl_doctor_verdict v[KL_DOCTOR_MAX_VERDICTS];
    int n = kl_doctor_verdicts(f, v, KL_DOCTOR_MAX_VERDICTS);
    static char out[8192];
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(out, kl_doctor_level_name(v[i].level), sizeof out - strlen(out) - 1);
        strncat(out, ": ", sizeof out - strlen(out) - 1);
        strncat(out, v[i].text, sizeof out - strlen(out) - 1);
        strncat(out, "\n", sizeof out - strlen(out) - 1);
    }
    return out;
}

#define assert_has(text, needle)                                                                                       \
    do {                                                                                                               \
        if (!strstr((text), (needle)))                                                                                 \
            fail_msg("missing \"%s\" in:\n%s", (needle), (text));                                                      \
    } while (0)

static void test_min_driver_table(void **state)
{
    (void)state;
    assert_string_equal(kl_doctor_min_driver(11), "450.80.02");
    assert_string_equal(kl_doctor_min_driver(12), "525.60.13");
    assert_string_equal(kl_doctor_min_driver(13), "580.65.06");
    assert_null(kl_doctor_min_driver(10));
}

static void test_cpu_only_fits(void **state)
{
    (void)state;
    kl_doctor_facts f = cpu_machine();
    char *v = verdicts(&f);
    assert_has(v, "note: no CUDA driver (libcuda.so.1: cannot open shared object file): training runs on the CPU backend");
    assert_has(v, "ok: what Kiln needs fits: the CPU backend (no usable GPU)");
    assert_null(strstr(v, "problem"));
    assert_true(kl_doctor_fits(&f));
    /* A driver without a GPU still fits. */
    f.driver_cuda = 13000;
    f.driver_why[0] = 0;
    assert_has(verdicts(&f), "note: CUDA driver 13.0 found, but no GPU");
    assert_true(kl_doctor_fits(&f));
}

static void test_no_compiler_does_not_fit(void **state)
{
    (void)state;
    kl_doctor_facts f = cpu_machine();
    f.cc_version[0] = 0;
    snprintf(f.cc_why, sizeof f.cc_why, "cc: not found");
    assert_has(verdicts(&f), "problem: no working C compiler (cc: cc: not found)");
    assert_false(kl_doctor_fits(&f));
}

static void test_blas_and_cpu_notes(void **state)
{
    (void)state;
    kl_doctor_facts f = cpu_machine();
    f.blas_parallel = 1;
    f.avx2 = false;
    f.mpi[0] = 0;
    char *v = verdicts(&f);
    assert_has(v, "note: OpenBLAS uses its own pthreads");
    assert_has(v, "note: the CPU lacks AVX2");
    assert_has(v, "note: no MPI library");
    assert_true(kl_doctor_fits(&f));
}

/* The example: a 12.4 driver with a CUDA 13.0 NVRTC. */
static void test_driver_older_than_nvrtc_major(void **state)
{
    (void)state;
    kl_doctor_facts f = gpu_machine(12040, 13, 0, 90);
    char *v = verdicts(&f);
    assert_has(v, "problem: driver 550.54.15 supports CUDA 12.4, older than the CUDA 13.0 NVRTC: kernels will not "
                  "load; update the driver to >= 580.65.06");
    assert_has(v, "problem: driver 550.54.15 supports CUDA 12.4, older than the CUDA 13.0 cuBLASLt");
    assert_false(kl_doctor_fits(&f));
}

static void test_driver_minor_compatibility(void **state)
{
    (void)state;
    kl_doctor_facts f = gpu_machine(12020, 12, 4, 90);
    char *v = verdicts(&f);
    assert_has(v, "note: driver CUDA 12.2 is older than the CUDA 12.4 NVRTC: CUBINs load (minor version compatibility)");
    assert_has(v, "ok: GPU 0 (Test GPU): sm_90, compiled to CUBIN by NVRTC 12.4");
    assert_has(v, "ok: what Kiln needs fits: the CUDA backend");
    assert_true(kl_doctor_fits(&f));
    /* The same driver and toolkit: no note. */
    f = gpu_machine(12040, 12, 4, 90);
    assert_null(strstr(verdicts(&f), "older than"));
    assert_true(kl_doctor_fits(&f));
}

static void test_gpu_newer_than_nvrtc_targets(void **state)
{
    (void)state;
    /* sm_120 with NVRTC 12.4 (newest sm_90): PTX, JIT-compiled. */
    kl_doctor_facts f = gpu_machine(12080, 12, 4, 120);
    assert_has(verdicts(&f), "note: GPU 0 (Test GPU): sm_120 is newer than NVRTC 12.4's CUBIN targets (newest sm_90): "
                             "PTX for compute_90 will be JIT-compiled by the driver at first start");
    assert_true(kl_doctor_fits(&f));
    /* ... with a driver older than NVRTC: it cannot load that PTX. */
    f = gpu_machine(12020, 12, 4, 120);
    assert_has(verdicts(&f), "problem: GPU 0 (Test GPU): sm_120 is newer than NVRTC 12.4's CUBIN targets");
    assert_false(kl_doctor_fits(&f));
    /* sm_120 with NVRTC 12.8: a CUBIN target. */
    f = gpu_machine(12080, 12, 8, 120);
    assert_has(verdicts(&f), "ok: GPU 0 (Test GPU): sm_120, compiled to CUBIN by NVRTC 12.8");
    /* An architecture between targets (sm_88 with sm_87 and sm_89 listed
     * but not 88): the newest target below it. */
    f = gpu_machine(12080, 12, 8, 88);
    assert_has(verdicts(&f), "PTX for compute_87");
}

static void test_gpu_too_old(void **state)
{
    (void)state;
    kl_doctor_facts f = gpu_machine(13000, 13, 0, 70);
    assert_has(verdicts(&f), "problem: GPU 0 (Test GPU) is sm_70, older than NVRTC 13.0's oldest target sm_75");
    assert_false(kl_doctor_fits(&f));
    f = gpu_machine(13000, 13, 0, 61);
    assert_has(verdicts(&f), "problem: GPU 0 (Test GPU) is sm_61: Kiln needs compute capability 7.0 or newer");
    assert_false(kl_doctor_fits(&f));
}

static void test_gpu_libraries_missing(void **state)
{
    (void)state;
    kl_doctor_facts f = gpu_machine(13000, 13, 0, 90);
    f.nvrtc_major = f.nvrtc_minor = 0;
    f.narchs = 0;
    snprintf(f.nvrtc_why, sizeof f.nvrtc_why, "libnvrtc.so.13: cannot open shared object file");
    assert_has(verdicts(&f), "problem: 1 GPU but no NVRTC (libnvrtc.so.13: cannot open shared object file)");
    assert_false(kl_doctor_fits(&f));
    f = gpu_machine(13000, 13, 0, 90);
    f.cublaslt = 0;
    assert_has(verdicts(&f), "problem: no cuBLASLt");
    assert_false(kl_doctor_fits(&f));
    f = gpu_machine(13000, 13, 0, 90);
    f.nccl = 0;
    assert_has(verdicts(&f), "note: no NCCL");
    assert_true(kl_doctor_fits(&f));
}

static void test_oneline(void **state)
{
    (void)state;
    kl_doctor_facts f = gpu_machine(13000, 13, 0, 90);
    f.gpu_probed = true;
    f.avx512f = f.avx512_bf16 = true;
    snprintf(f.blas_core, sizeof f.blas_core, "Cooperlake");
    char *line = kl_doctor_oneline(&f);
    char want[256];
    snprintf(want, sizeof want,
             "kiln %s: Linux 6.1 x86_64; 8 cores AVX2 AVX-512 AVX512-BF16; OpenBLAS Cooperlake; CUDA driver 13.0, "
             "NVRTC 13.0, 1 GPU (Test GPU, sm_90)",
             KILN_VERSION);
    assert_string_equal(line, want);
    free(line);
    /* A run forced onto the CPU does not probe the GPU, and says so. */
    f = cpu_machine();
    snprintf(f.blas_core, sizeof f.blas_core, "Haswell");
    line = kl_doctor_oneline(&f);
    snprintf(want, sizeof want, "kiln %s: Linux 6.1 x86_64; 8 cores AVX2; OpenBLAS Haswell; GPU not probed", KILN_VERSION);
    assert_string_equal(line, want);
    free(line);
}

#ifdef KILN_HAVE_CUDA
/* A GPU newer than every target of this NVRTC (sm_990): PTX for the newest
 * target, compiled and returned as PTX text. */
static void test_nvrtc_ptx_fallback(void **state)
{
    (void)state;
    char why[600];
    if (kl_nvrtc_load(why, sizeof why)) {
        print_message("skipped: %s\n", why);
        skip();
    }
    bool ptx = true;
    assert_int_equal(kl_nvrtc_target(90, &ptx), 90);
    assert_false(ptx);
    int newest = kl_nvrtc_target(990, &ptx);
    assert_true(ptx);
    assert_true(newest >= 90 && newest < 990);
    kl_nvrtc_job job = {.name = "probe", .src = "extern \"C\" __global__ void probe(float *x) { x[0] = 1.0f; }\n"};
    kl_nvrtc_opts o = {.arch = "sm_990", .no_cache = true, .quiet = true, .threads = 1};
    assert_int_equal(kl_nvrtc_compile(&job, 1, &o), 0);
    char target[32];
    snprintf(target, sizeof target, ".target sm_%d", newest);
    assert_non_null(job.image);
    assert_non_null(strstr((const char *)job.image, target));
    free(job.image);
    free(job.log);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_min_driver_table),
        cmocka_unit_test(test_cpu_only_fits),
        cmocka_unit_test(test_no_compiler_does_not_fit),
        cmocka_unit_test(test_blas_and_cpu_notes),
        cmocka_unit_test(test_driver_older_than_nvrtc_major),
        cmocka_unit_test(test_driver_minor_compatibility),
        cmocka_unit_test(test_gpu_newer_than_nvrtc_targets),
        cmocka_unit_test(test_gpu_too_old),
        cmocka_unit_test(test_gpu_libraries_missing),
        cmocka_unit_test(test_oneline),
#ifdef KILN_HAVE_CUDA
        cmocka_unit_test(test_nvrtc_ptx_fallback),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
