/* kiln doctor's facts: what this machine has (runtime/observe/doctor.h).
 *
 * The GPU libraries are opened with dlopen and called through pointers
 * declared here (no CUDA header), so this compiles and runs in builds
 * without the toolkit and on machines without a driver. Each library that
 * is missing leaves its fields empty with the loader's reason. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/utsname.h>
#include <unistd.h>

#include "doctor.h"
#include "runtime/cpu/cc.h"
#include "runtime/cpu/cpu_cores.h"
#include "runtime/cpu/simgpu.h"
#include "runtime/cpu/spawn.h"

/* OpenBLAS's own queries (in every OpenBLAS build Kiln links). */
extern char *openblas_get_corename(void);
extern char *openblas_get_config(void);
extern int openblas_get_num_threads(void);
extern int openblas_get_parallel(void);

static void copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
    /* One line: version strings sometimes end in newlines. */
    dst[strcspn(dst, "\r\n")] = 0;
}

/* dlopen of the first name that opens, bare (the loader's search path)
 * and then in the CUDA toolkit's library folders; NULL with why. */
static void *open_first(const char *const *names, char *why, size_t n)
{
    if (kl_simgpu_wanted() && names[0] && kl_simgpu_covers(names[0]))
        return kl_simgpu_dlopen(names, why, n);
    const char *dirs[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    const char *first = NULL;
    char err[200] = "";
    for (const char *const *nm = names; *nm; nm++) {
        void *h = dlopen(*nm, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        if (!first) {
            first = *nm;
            copy(err, sizeof err, dlerror());
        }
        for (size_t d = 0; d < KL_ARRAY_LEN(dirs); d++) {
            if (!dirs[d] || !*dirs[d])
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], *nm);
            if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
                return h;
        }
    }
    copy(why, n, err[0] ? err : "not found");
    return NULL;
}

static void probe_os(kl_doctor_facts *f)
{
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(f->os, sizeof f->os, "%.40s %.60s %.20s", u.sysname, u.release, u.machine);
    else
        copy(f->os, sizeof f->os, "unknown OS");
}

/* The model name and ISA flags of the first processor in /proc/cpuinfo. */
static void probe_cpu(kl_doctor_facts *f)
{
    f->physical_cores = kl_cpu_physical_cores("", false);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    f->logical_cpus = online > 0 ? (int)online : 0;
    FILE *in = fopen("/proc/cpuinfo", "r");
    if (!in)
        return;
    char line[8192];
    bool flags = false;
    while (fgets(line, sizeof line, in) && !(flags && f->cpu_model[0])) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        const char *val = colon + 1 + (colon[1] == ' ');
        if (!strncmp(line, "model name", 10) && !f->cpu_model[0]) {
            copy(f->cpu_model, sizeof f->cpu_model, val);
        } else if (!strncmp(line, "flags", 5) && !flags) {
            flags = true;
            /* Whole words: "avx512f" must not match "avx512fp16". */
            char *save = NULL;
            for (char *w = strtok_r(colon + 1, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
                f->avx2 |= !strcmp(w, "avx2");
                f->avx512f |= !strcmp(w, "avx512f");
                f->avx512_bf16 |= !strcmp(w, "avx512_bf16");
                f->amx |= !strcmp(w, "amx_tile");
            }
        }
    }
    fclose(in);
}

static void probe_blas(kl_doctor_facts *f)
{
    copy(f->blas_core, sizeof f->blas_core, openblas_get_corename());
    copy(f->blas_config, sizeof f->blas_config, openblas_get_config());
    f->blas_threads = openblas_get_num_threads();
    f->blas_parallel = openblas_get_parallel();
}

/* The first line of `$CC --version`, run without a shell. */
static void probe_cc(kl_doctor_facts *f)
{
    copy(f->cc, sizeof f->cc, kl_cc());
    char log[] = "/tmp/kiln-doctor-XXXXXX";
    int fd = mkstemp(log);
    if (fd < 0) {
        copy(f->cc_why, sizeof f->cc_why, "cannot make a temporary file");
        return;
    }
    close(fd);
    kl_argv a = {0};
    kl_argv_add_words(&a, kl_cc());
    kl_argv_add(&a, "--version");
    if (kl_spawn(kl_argv_end(&a), log, f->cc_why, sizeof f->cc_why) == 0) {
        FILE *in = fopen(log, "r");
        char line[256] = "";
        if (in && fgets(line, sizeof line, in))
            copy(f->cc_version, sizeof f->cc_version, line);
        if (in)
            fclose(in);
        if (!f->cc_version[0])
            copy(f->cc_version, sizeof f->cc_version, "(no version line)");
    }
    kl_argv_free(&a);
    remove(log);
}

static void probe_mpi(kl_doctor_facts *f)
{
    static const char *const names[] = {"libmpi.so.40", "libmpi.so.12", "libmpi.so", NULL};
    void *h = open_first(names, f->mpi_why, sizeof f->mpi_why);
    if (!h)
        return;
    int (*get)(char *, int *) = (int (*)(char *, int *))dlsym(h, "MPI_Get_library_version");
    /* MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI, 8192 in MPICH. */
    char *buf = kl_xcalloc(8192, 1);
    int len = 0;
    if (get && get(buf, &len) == 0)
        copy(f->mpi, sizeof f->mpi, buf);
    else
        copy(f->mpi_why, sizeof f->mpi_why, "MPI_Get_library_version failed");
    free(buf);
}

/* The CUDA driver API's few calls, by the ABI's plain types. */
enum {
    CU_ATTR_CLOCK_RATE = 13,
    CU_ATTR_MULTIPROCESSOR_COUNT = 16,
    CU_ATTR_MEMORY_CLOCK_RATE = 36,
    CU_ATTR_CC_MAJOR = 75,
    CU_ATTR_CC_MINOR = 76,
};

static void probe_driver(kl_doctor_facts *f)
{
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    void *h = open_first(names, f->driver_why, sizeof f->driver_why);
    if (!h)
        return;
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*version)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
    int (*name)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetName");
    int (*attr)(int *, int, int) = (int (*)(int *, int, int))dlsym(h, "cuDeviceGetAttribute");
    int (*mem)(size_t *, int) = (int (*)(size_t *, int))dlsym(h, "cuDeviceTotalMem_v2");
    if (!cu_init || !version || !count || !get || !name || !attr || !mem) {
        copy(f->driver_why, sizeof f->driver_why, "libcuda lacks a driver API call Kiln uses");
        return;
    }
    int r = cu_init(0), v = 0, n = 0;
    if (r || version(&v)) {
        snprintf(f->driver_why, sizeof f->driver_why, "cuInit failed (CUresult %d)", r);
        return;
    }
    f->driver_cuda = v;
    if (count(&n))
        n = 0;
    for (int i = 0; i < n && f->ngpus < KL_DOCTOR_MAX_GPUS; i++) {
        int dev, clk = 0, mclk = 0;
        size_t bytes = 0;
        kl_doctor_gpu *g = &f->gpus[f->ngpus];
        if (get(&dev, i) || name(g->name, (int)sizeof g->name, dev) || attr(&g->cc_major, CU_ATTR_CC_MAJOR, dev) ||
            attr(&g->cc_minor, CU_ATTR_CC_MINOR, dev) || attr(&g->sms, CU_ATTR_MULTIPROCESSOR_COUNT, dev) ||
            mem(&bytes, dev))
            continue;
        if (attr(&clk, CU_ATTR_CLOCK_RATE, dev))
            clk = 0;
        if (attr(&mclk, CU_ATTR_MEMORY_CLOCK_RATE, dev))
            mclk = 0;
        g->memory = (int64_t)bytes;
        g->clock_mhz = clk / 1000;
        g->memory_clock_mhz = mclk / 1000;
        f->ngpus++;
    }
    /* The driver's release ("580.65.06") is NVML's to tell. */
    static const char *const nvml_names[] = {"libnvidia-ml.so.1", "libnvidia-ml.so", NULL};
    char why[200];
    void *nh = open_first(nvml_names, why, sizeof why);
    if (nh) {
        int (*ninit)(void) = (int (*)(void))dlsym(nh, "nvmlInit_v2");
        int (*nver)(char *, unsigned) = (int (*)(char *, unsigned))dlsym(nh, "nvmlSystemGetDriverVersion");
        int (*nshut)(void) = (int (*)(void))dlsym(nh, "nvmlShutdown");
        if (ninit && nver && nshut && ninit() == 0) {
            if (nver(f->driver_release, sizeof f->driver_release))
                f->driver_release[0] = 0;
            nshut();
        }
    }
}

static void probe_nvrtc(kl_doctor_facts *f)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    void *h = open_first(names, f->nvrtc_why, sizeof f->nvrtc_why);
    if (!h)
        return;
    int (*version)(int *, int *) = (int (*)(int *, int *))dlsym(h, "nvrtcVersion");
    int (*num)(int *) = (int (*)(int *))dlsym(h, "nvrtcGetNumSupportedArchs");
    int (*list)(int *) = (int (*)(int *))dlsym(h, "nvrtcGetSupportedArchs");
    if (!version || version(&f->nvrtc_major, &f->nvrtc_minor)) {
        f->nvrtc_major = f->nvrtc_minor = 0;
        copy(f->nvrtc_why, sizeof f->nvrtc_why, "nvrtcVersion failed");
        return;
    }
    int n = 0;
    if (num && list && num(&n) == 0 && n > 0 && n <= KL_DOCTOR_MAX_ARCHS && list(f->archs) == 0)
        f->narchs = n;
}

static void probe_libraries(kl_doctor_facts *f)
{
    char why[200];
    static const char *const lt_names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
    void *h = open_first(lt_names, why, sizeof why);
    size_t (*lt)(void) = h ? (size_t(*)(void))dlsym(h, "cublasLtGetVersion") : NULL;
    if (lt)
        f->cublaslt = (int)lt();
    static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};
    h = open_first(nccl_names, why, sizeof why);
    int (*nccl)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
    if (nccl && nccl(&f->nccl))
        f->nccl = 0;
}

void kl_doctor_probe(kl_doctor_facts *f, bool full, bool gpu)
{
    memset(f, 0, sizeof *f);
    probe_os(f);
    probe_cpu(f);
    probe_blas(f);
    f->gpu_probed = gpu;
    if (gpu)
        probe_driver(f);
    /* NVRTC is large (20 ms to open): at start-up only for a GPU. */
    if (gpu && (full || f->ngpus > 0))
        probe_nvrtc(f);
    if (full) {
        probe_cc(f);
        probe_mpi(f);
        probe_libraries(f);
    }
}
