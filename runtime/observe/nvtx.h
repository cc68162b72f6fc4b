/* NVTX ranges for Nsight Systems (runtime/observe/nvtx.c): the step, its phases
 * (forward, backward, update), each kernel and GEMM by its model-file
 * name and line, data wait and evaluation. Through the header-only nvtx3
 * of the CUDA toolkit; in a build without it, nothing. Only when a tool
 * is attached (it sets NVTX_INJECTION64_PATH) are names made and ranges
 * pushed: otherwise a run pays one test of a flag per step. */
#ifndef KILN_NVTX_H
#define KILN_NVTX_H

#include <stdbool.h>

/* Whether a tool collects ranges (and this build can send them). */
bool kl_nvtx_on(void);
void kl_nvtx_push(const char *name);
void kl_nvtx_pop(void);

#endif
