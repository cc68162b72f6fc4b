/* The simulated CUDA device's internals (libkiln_simgpu.so), shared by its
 * files: the device (sim_device.c), memory and the sanitizer
 * (sim_mem.c), streams, events and graphs
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

/* ---- device memory and the sanitizer (sim_mem.c) ---- */

/* The device's memory size (the part's, or KILN_SIMULATED_GPU_MEMORY). */
extern size_t sim_mem_total;

/* Whether [p, p + n) lies inside one live device allocation (or pinned
 * host allocation, for sim_host_pinned). */
bool sim_mem_valid(CUdeviceptr p, size_t n);
bool sim_host_pinned(const void *p, size_t n);
/* sim_mem_valid for an operand of call: outside, the sanitizer reports
 * it (what: the operand) and ends the process; with the sanitizer off
 * (KILN_SIMGPU_SANITIZE=0) false, and the call refuses it. */
bool sim_mem_check(const char *call, const char *what, const void *p, size_t n);

/* The sanitizer: a report names the call and ends the process with
 * SIM_SAN_EXIT, so the test that caused it fails. */
#define SIM_SAN_EXIT 86
void sim_san_init(void);
bool sim_san_on(void);
void sim_san_report(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* At the last context's release: allocations still held leaked; red
 * zones and freed memory are checked once more. */
void sim_san_leaks(const char *call);
/* An access by the operation running on this worker (its lane): a
 * cross-stream hazard is reported. */
void sim_san_access(const char *call, const char *what, const void *p, size_t n, bool write);
/* A copy to the host reads never-written bytes (the uninitialised
 * pattern) of [p, p + n). */
void sim_san_uninit(const char *call, const void *p, size_t n);
/* A kernel's pointer arguments: before it runs, none into freed memory;
 * after it, their allocations' red zones intact (and each an access). */
void sim_san_kernel_before(const char *name, void *const *ptrs, int n);
void sim_san_kernel_after(const char *name, void *const *ptrs, int n);

/* Lanes: the vector clocks that order work. Lane 0 is the host; each
 * stream has one, and each branch of an executable graph other than its
 * origin stream's. -1: not tracked (lanes ran out). */
#define SIM_LANES 64
int sim_lane_new(bool graph);
void sim_lane_free(int lane);
/* On a worker, before an operation of that lane runs (a tick). */
void sim_lane_enter(int lane);
void sim_lane_set(int lane);
int sim_lane_current(void);
/* Clock snapshots (an event's record) and merges (a wait). */
void sim_clock_get(int lane, uint64_t *vc);
void sim_clock_merge(int lane, const uint64_t *vc);
/* The host waited for lane's work, or for an event's snapshot. */
void sim_host_synced_lane(int lane);
void sim_host_synced(const uint64_t *vc);
/* Bumped at each host merge: a stream whose last enqueue saw an older
 * one takes the host's clock with its next operation. */
uint64_t sim_host_epoch(void);

/* Pinned host memory seen by the device (the worker's view of a host
 * pointer; the host's own view may be protected while a copy to it is
 * pending). */
void *sim_pinned_device_view(const void *host);
/* A cuMemcpyDtoHAsync into pinned memory, queued (a slot, or -1): the
 * host may not touch [dst, dst + n) until it synchronised with the copy,
 * and its pages are protected until then. The worker marks it run. */
int sim_san_pending_d2h(void *dst, size_t n, int lane);
void sim_san_d2h_ran(int slot);

/* ---- errors ---- */

/* A failure inside the device (a kernel's emulation error, an invalid
 * access): printed once, and every later call returns it (CUDA's
 * sticky errors). */
void sim_fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
CUresult sim_sticky(void);
/* A message from the simulated device on stderr. */
void sim_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- fault injection (sim_fault.c) ---- */

/* KILN_SIMGPU_FAIL=FUNCTION:N,...: 0, or the error code the Nth call of
 * fn fails with (said on stderr). */
int sim_fault(const char *fn);
/* KILN_SIMGPU_FAIL is malformed (said once): cuInit refuses to start. */
bool sim_fault_spec_bad(void);
/* The first statement of each function that can fail on purpose: T is
 * its result type. */
#define SIM_FAULT(T, fn)                                                                                               \
    do {                                                                                                               \
        int fault_ = sim_fault(fn);                                                                                    \
        if (fault_)                                                                                                    \
            return (T)fault_;                                                                                          \
    } while (0)

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
