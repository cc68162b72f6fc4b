/* The simulated CUDA device's internals (libkiln_simgpu.so), shared by its
 * files: the device (sim_device.c), streams, events and graphs
 * (sim_stream.c), modules and kernels (sim_module.c), cuBLASLt
 * (sim_lt.c) and the NVRTC wrapper (sim_nvrtc.c).
 *
 * The library stands in for libcuda.so.1, libcublasLt.so and libnvrtc.so
 * when KILN_SIMULATED_GPU names a part (runtime/cpu/simgpu.h opens it in
 * their place); it is never linked into Kiln. Device memory is host
 * memory; every stream is a worker thread that runs its queue in order,
 * so work is as asynchronous as on a GPU; kernels are the same CUDA C
 * compiled for the host with tests/cuda/emu.h. */
#ifndef KILN_SIMGPU_SIM_H
#define KILN_SIMGPU_SIM_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_EXPORT __attribute__((visibility("default")))

/* ---- the part (sim_device.c) ---- */

typedef struct sim_part {
    const char *key, *name;
    int major, minor, sms, max_threads_block, max_threads_sm, max_blocks_sm;
    int regs_sm, regs_block, smem_block, smem_block_optin, smem_sm, l2_bytes, clock_khz, mem_clock_khz, bus_bits;
    size_t mem_bytes;
} sim_part;

/* The part KILN_SIMULATED_GPU names (after cuInit), and how many of it
 * the machine has (KILN_SIMULATED_GPU_COUNT, default 8). */
#define SIM_MAX_DEVICES 64
extern const sim_part *sim_dev;
extern int sim_ndev;

/* ---- device memory (sim_device.c) ---- */

/* Whether [p, p + n) lies inside one device allocation (or pinned host
 * allocation, for host_ok). */
bool sim_mem_valid(CUdeviceptr p, size_t n);
bool sim_host_pinned(const void *p, size_t n);

/* ---- errors ---- */

/* A failure inside the device (a kernel's emulation error, an invalid
 * access): printed once, and every later call returns it (CUDA's
 * sticky errors). */
void sim_fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
CUresult sim_sticky(void);
/* A message from the simulated device on stderr. */
void sim_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- streams (sim_stream.c) ---- */

/* Waits until every stream's queue has run (cuMemFree does, as
 * cudaFree synchronises the device). */
void sim_device_idle(void);

typedef void (*sim_fn)(void *arg);

/* Queues fn(arg) on s (NULL: the default stream, which runs in order
 * with the caller here); while s is capturing, records it in the graph.
 * arg is freed after the last run (free_arg), or kept by the graph. */
CUresult sim_enqueue(CUstream s, sim_fn fn, void *arg, size_t arg_bytes);

/* ---- modules (sim_module.c) ---- */

/* A kernel function's launch, run on a stream's worker. */
typedef struct sim_launch sim_launch;

#endif
