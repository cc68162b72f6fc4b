/* The CUDA backend's entry points in a build without the CUDA toolkit. */
#include <stdio.h>

#include "backend_cuda.h"

void kl_cuda_set_builtins(const kl_cuda_builtin *table)
{
    (void)table;
}

kl_backend *kl_cuda_backend_new(const kl_cuda_options *o, char *why, size_t n)
{
    (void)o;
    snprintf(why, n, "this build of Kiln has no CUDA support (built without the CUDA toolkit)");
    return NULL;
}

bool kl_backend_is_cuda(const kl_backend *be)
{
    (void)be;
    return false;
}

double kl_cuda_copy_bandwidth(kl_backend *be)
{
    (void)be;
    return 0;
}

void kl_cuda_timer_start(kl_backend *be)
{
    (void)be;
}

double kl_cuda_timer_stop(kl_backend *be)
{
    (void)be;
    return 0;
}
