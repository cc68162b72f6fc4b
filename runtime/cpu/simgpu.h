/* The simulated CUDA device (tests/simgpu): chosen only by
 * KILN_SIMULATED_GPU=h200 or a100 (or p100, a part too old for Kiln,
 * to see it refused), never otherwise, and refused on a
 * machine with a real CUDA driver. Its one library stands in for the
 * driver, cuBLASLt and NVRTC, so the CUDA backend's host code runs
 * unchanged on a machine without a GPU (docs/guides/gpu.md). */
#ifndef KILN_SIMGPU_H
#define KILN_SIMGPU_H

#include <stdbool.h>
#include <stddef.h>

/* Whether KILN_SIMULATED_GPU is set (to anything). */
bool kl_simgpu_wanted(void);
/* Whether name is a GPU library the simulated device answers for (its
 * own, NVML's included, or one it refuses: NCCL), not another (MPI). */
bool kl_simgpu_covers(const char *name);
/* In place of dlopen of the GPU library names[0] ("libcuda.so.1",
 * "libcublasLt.so.13", "libnvrtc.so.13", "libnvidia-ml.so.1", ...) when
 * KILN_SIMULATED_GPU is set: the simulator's library, or NULL with why
 * (a value other than h200, a100 or p100, a real driver present, a library
 * the simulator does not stand in for, or the library missing; or a
 * library KILN_SIMGPU_ABSENT names, such as libcublasLt, as if it were
 * not installed). */
void *kl_simgpu_dlopen(const char *const *names, char *why, size_t n);

#endif
