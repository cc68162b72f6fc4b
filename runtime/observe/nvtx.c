/* NVTX ranges (runtime/observe/nvtx.h). */
#include <pthread.h>
#include <stdlib.h>

#include "nvtx.h"
#ifdef KILN_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

static bool on;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* A profiler that collects NVTX ranges loads its library through this
 * variable; without it every nvtx3 call would find no tool anyway. */
static void check(void)
{
#ifdef KILN_HAVE_CUDA
    const char *tool = getenv("NVTX_INJECTION64_PATH");
    on = tool && *tool;
#endif
}

bool kl_nvtx_on(void)
{
    pthread_once(&once, check);
    return on;
}

void kl_nvtx_push(const char *name)
{
#ifdef KILN_HAVE_CUDA
    if (kl_nvtx_on())
        nvtxRangePushA(name);
#else
    (void)name;
#endif
}

void kl_nvtx_pop(void)
{
#ifdef KILN_HAVE_CUDA
    if (kl_nvtx_on())
        nvtxRangePop();
#endif
}
