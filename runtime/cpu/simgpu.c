/* Opening the simulated device's library in place of the GPU's (see
 * simgpu.h). Its path is the build's (KILN_SIMGPU_LIB, set by CMake), or
 * $KILN_SIMGPU_LIB. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simgpu.h"

#ifndef KILN_SIMGPU_LIB
#define KILN_SIMGPU_LIB "libkiln_simgpu.so"
#endif

bool kl_simgpu_wanted(void)
{
    const char *v = getenv("KILN_SIMULATED_GPU");
    return v && *v;
}

static bool starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

bool kl_simgpu_covers(const char *name)
{
    return starts(name, "libcuda.so") || starts(name, "libcublasLt.so") || starts(name, "libnvrtc.so") ||
           starts(name, "libnccl.so") || starts(name, "libnvidia-ml.so");
}

void *kl_simgpu_dlopen(const char *const *names, char *why, size_t n)
{
    const char *v = getenv("KILN_SIMULATED_GPU");
    if (strcmp(v, "h200") && strcmp(v, "a100") && strcmp(v, "p100")) {
        snprintf(why, n, "KILN_SIMULATED_GPU must be h200, a100 or p100, not '%.40s'", v);
        return NULL;
    }
    const char *name = names[0] ? names[0] : "";
    if (!starts(name, "libcuda.so") && !starts(name, "libcublasLt.so") && !starts(name, "libnvrtc.so") &&
        !starts(name, "libnccl.so") && !starts(name, "libnvidia-ml.so")) {
        snprintf(why, n, "the simulated device (KILN_SIMULATED_GPU=%s) has no %s", v, name);
        return NULL;
    }
    /* KILN_SIMGPU_ABSENT=libcublasLt,libnccl: those libraries are not
     * installed (a machine with a driver but without the toolkit's
     * libraries), as dlopen says. */
    const char *absent = getenv("KILN_SIMGPU_ABSENT");
    for (const char *a = absent; a && *a;) {
        size_t len = strcspn(a, ",");
        static const char *const libs[] = {"libcuda", "libcublasLt", "libnvrtc", "libnccl", "libnvidia-ml"};
        bool known = false;
        for (size_t i = 0; i < sizeof libs / sizeof *libs; i++)
            known |= strlen(libs[i]) == len && !strncmp(libs[i], a, len);
        if (!known) {
            snprintf(why, n, "KILN_SIMGPU_ABSENT must name libcuda, libcublasLt, libnvrtc, libnccl or libnvidia-ml, not '%.*s'",
                     (int)(len < 40 ? len : 40), a);
            return NULL;
        }
        if (!strncmp(name, a, len) && name[len] == '.') {
            snprintf(why, n, "%s: cannot open shared object file: No such file or directory (KILN_SIMGPU_ABSENT)", name);
            return NULL;
        }
        a += len + (a[len] == ',');
    }
    /* Never in place of a real GPU's driver. */
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real && !dlsym(real, "kiln_simgpu_part")) {
        dlclose(real);
        snprintf(why, n, "KILN_SIMULATED_GPU=%s, but this machine has a CUDA driver (libcuda.so.1): unset it to use the GPU",
                 v);
        return NULL;
    }
    if (real)
        dlclose(real);
    const char *lib = getenv("KILN_SIMGPU_LIB");
    if (!lib || !*lib)
        lib = KILN_SIMGPU_LIB;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "KILN_SIMULATED_GPU=%s: cannot open the simulated device's library %s (built with the tests): %s",
                 v, lib, dlerror());
        return NULL;
    }
    return h;
}
