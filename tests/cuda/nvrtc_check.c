/* Every generated CUDA kernel of the given models, in every configuration
 * (train and eval, fused and unfused, fp32/bf16/fp16), compiles with
 * NVRTC for each architecture, and ptxas reports no stack frame (local
 * memory) and no spills for any of its functions. No GPU is needed.
 *
 *   nvrtc_check [--arch sm_80,sm_90] [--batch N] [--precisions fp32,bf16,fp16] [--print] [--ptx] MODEL.kl...
 *
 * --ptx compiles to PTX instead (no ptxas: only that it compiles).
 *
 * Exits 77 (a skip for ctest) when NVRTC cannot be opened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plans.h"
#include "runtime/exec/nvrtc.h"

int main(int argc, char **argv)
{
    const char *archs = "sm_80,sm_90", *batch = NULL, *precisions = NULL;
    bool print = false, ptx = false;
    KL_VEC(const char *) models = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            archs = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc)
            precisions = argv[++i];
        else if (!strcmp(argv[i], "--print"))
            print = true;
        else if (!strcmp(argv[i], "--ptx"))
            ptx = true;
        else
            kl_vec_push(models, argv[i]);
    }
    char why[600];
    if (kl_nvrtc_load(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    int major, minor;
    kl_nvrtc_version(&major, &minor);
    plan_kernel_vec ks = {0};
    int plans = 0, failures = plan_collect_kernels(models.v, models.n, batch, precisions, &ks, &plans);
    for (int i = 0; i < ks.n && print; i++)
        printf("// ---- %s (%s) ----\n%s\n", ks.v[i].name, ks.v[i].where, ks.v[i].src);
    kl_nvrtc_job *jobs = kl_xcalloc((size_t)ks.n + 1, sizeof *jobs);
    int functions = 0;
    for (int i = 0; i < ks.n; i++)
        functions += ks.v[i].nl;
    char *list = kl_xstrdup(archs);
    for (char *save = NULL, *arch = strtok_r(list, ",", &save); arch; arch = strtok_r(NULL, ",", &save)) {
        for (int i = 0; i < ks.n; i++) {
            memset(&jobs[i], 0, sizeof jobs[i]);
            jobs[i].name = ks.v[i].name;
            jobs[i].src = ks.v[i].program;
        }
        kl_nvrtc_opts o = {.arch = arch, .ptx = ptx, .quiet = true};
        int failed = kl_nvrtc_compile(jobs, ks.n, &o);
        int maxreg = 0, cached = 0, bad = 0;
        const char *maxfn = "";
        for (int i = 0; i < ks.n; i++) {
            if (jobs[i].rc) {
                printf("FAIL: %s (%s, from %s) does not compile for %s\n", ks.v[i].name, ks.v[i].what, ks.v[i].where, arch);
                continue;
            }
            cached += jobs[i].cached;
            for (int f = 0; f < ks.v[i].nl && !ptx; f++) {
                const char *fn = ks.v[i].launches[f].fn;
                kl_ptxas_info pi;
                if (kl_ptxas_info_of(jobs[i].log, fn, &pi)) {
                    printf("FAIL: no ptxas report for %s (%s) on %s\n", fn, ks.v[i].what, arch);
                    bad++;
                    continue;
                }
                if (pi.stack_bytes || pi.spill_stores || pi.spill_loads) {
                    printf("FAIL: %s (%s, from %s) on %s: %d bytes stack frame (local memory), %d bytes spill stores, %d bytes spill loads\n",
                           fn, ks.v[i].what, ks.v[i].where, arch, pi.stack_bytes, pi.spill_stores, pi.spill_loads);
                    bad++;
                }
                if (pi.registers > maxreg) {
                    maxreg = pi.registers;
                    maxfn = fn;
                }
            }
            free(jobs[i].image);
            free(jobs[i].log);
            jobs[i].image = NULL;
            jobs[i].log = NULL;
        }
        if (ptx)
            printf("%s: %d kernels (%d functions) compiled to PTX by NVRTC %d.%d (%d from the cache), %d failed\n", arch, ks.n,
                   functions, major, minor, cached, failed);
        else
            printf("%s: %d kernels (%d functions) compiled by NVRTC %d.%d (%d from the cache), %d failed, %d with local memory or spills; at most %d registers (%s)\n",
                   arch, ks.n, functions, major, minor, cached, failed, bad, maxreg, maxfn);
        failures += failed + bad;
    }
    printf("%d plans of %d model(s): %s\n", plans, models.n, failures ? "FAILED" : "all kernels compile without local memory or spills");
    free(list);
    free(jobs);
    plan_kernels_free(&ks);
    kl_vec_free(models);
    return failures ? 1 : 0;
}
