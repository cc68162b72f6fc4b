/* Host emulation of the CUDA features generated kernels use, so their CUDA
 * C runs on the CPU (compiled by the host C++ compiler) and can be
 * compared with the CPU backend without a GPU. Included once per shared
 * object, before the kernels' program (with KL_EMULATION defined, the
 * program skips the toolkit's headers).
 *
 * Each block's threads are coroutines on one OS thread; blocks run one
 * after the other. On x86-64 a switch between them is a few instructions
 * (kl_emu_switch below: the callee-saved registers and the stack pointer,
 * no system call); elsewhere it is ucontext's swapcontext. A thread runs
 * until it reaches __syncthreads or a warp shuffle, then the next one
 * runs; a barrier opens when every thread of the block waits at it, a
 * shuffle when all 32 lanes of the warp wait at one. A thread that
 * finishes while others wait at a barrier, a warp whose lanes disagree
 * about a shuffle, or a partial warp is reported as an error: on a GPU
 * each is a hang or undefined behaviour. Threads run in increasing or
 * decreasing order (the caller picks), so a missing barrier between one
 * thread's write and another's read shows up as a wrong result in one of
 * the orders. (The harness also runs kernels on guarded copies of their
 * buffers, so a write outside one is seen.)
 *
 * Not emulated (see README): concurrency between blocks and between the
 * threads of a warp, the memory model, timing, resource limits, and the
 * device compiler itself. */
#ifndef KILN_TESTS_CUDA_EMU_H
#define KILN_TESTS_CUDA_EMU_H

#define KL_EMULATION 1

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cmath>

using std::isfinite;

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
static uint3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }

/* ---- 16-bit floats: the CPU backend's conversions (base/scalar.h) ---- */

/* Only the conversions: the program brings its own RNG and kl_ftoi. */
#define KL_SCALAR_HALVES_ONLY 1
#include "base/scalar.h"

struct __nv_bfloat16 { unsigned short x; };
struct __half { unsigned short x; };

static inline float __bfloat162float(__nv_bfloat16 h) { return kl_bf16_to_f32(h.x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { __nv_bfloat16 h; h.x = kl_f32_to_bf16(f); return h; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { __nv_bfloat16 h; h.x = x; return h; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }

static inline float __half2float(__half h) { return kl_f16_to_f32(h.x); }
static inline __half __float2half_rn(float f) { __half h; h.x = kl_f32_to_f16(f); return h; }
static inline __half __ushort_as_half(unsigned short x) { __half h; h.x = x; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }

/* ---- atomics: only barriers and shuffles switch threads, so a plain
 * read-modify-write is atomic here ---- */

static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline double atomicAdd(double *p, double v) { double o = *p; *p = o + v; return o; }
static inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
static inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned val)
{
    unsigned o = *p;
    if (o == cmp)
        *p = val;
    return o;
}

/* ---- threads ---- */

typedef struct kl_kargs kl_kargs;
typedef void (*kl_emu_fn)(void *const *, const kl_kargs *);

enum { KL_EMU_READY, KL_EMU_BARRIER, KL_EMU_WARP, KL_EMU_DONE };

/* ---- coroutine switch ---- */

#if defined(__x86_64__)
/* A suspended thread is its stack pointer: kl_emu_switch pushes the
 * callee-saved registers (rbp, rbx, r12-r15) on the running stack, stores
 * the stack pointer in *save, loads `to` and pops the other's. (The SSE and
 * x87 control words are not switched: no kernel changes them.) No signal
 * mask is kept: swapcontext's rt_sigprocmask system calls were most of a
 * barrier's cost. (A local symbol: each object that includes this header
 * has its own.) */
typedef void *kl_emu_ctx;
extern "C" void kl_emu_switch(kl_emu_ctx *save, kl_emu_ctx to);
__asm__(".text\n"
        ".p2align 4\n"
        ".type kl_emu_switch, @function\n"
        "kl_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size kl_emu_switch, .-kl_emu_switch\n");
#else
typedef ucontext_t kl_emu_ctx;
#endif

struct kl_emu_thread {
    kl_emu_ctx ctx;
    int state;
    unsigned shuffles; /* __shfl_xor_sync calls so far */
    char *stack;
};

#define KL_EMU_STACK (128 * 1024)
#define KL_EMU_MAX_BLOCK 1024
/* The threads' stacks lie in one allocation, KL_EMU_STACK plus 17 cache
 * lines apart: the tops of consecutive threads' stacks fall in different
 * cache sets (17 is odd: all 1024 of an L2's sets), where a stride of a
 * power of two would put every thread's frames in the same few sets and
 * each switch would miss. */
#define KL_EMU_STRIDE (KL_EMU_STACK + 17 * 64)

static struct {
    kl_emu_thread t[KL_EMU_MAX_BLOCK];
    char *stacks; /* KL_EMU_MAX_BLOCK stacks, KL_EMU_STRIDE apart */
    int n, cur;
    kl_emu_ctx main;
    kl_emu_fn fn;
    void *const *kb;
    const kl_kargs *ka;
    unsigned long long xchg[2][KL_EMU_MAX_BLOCK];
    char error[256];
    int flat; /* kl_emu_run_flat: threads are plain calls, nothing to yield to */
} kl_emu;

static void kl_emu_entry(void);

/* The running thread gives way to the scheduler (kl_emu_run). */
static inline void kl_emu_to_main(kl_emu_thread *t)
{
#if defined(__x86_64__)
    kl_emu_switch(&t->ctx, kl_emu.main);
#else
    swapcontext(&t->ctx, &kl_emu.main);
#endif
}

/* The scheduler runs thread t until it yields or finishes. */
static inline void kl_emu_to_thread(kl_emu_thread *t)
{
#if defined(__x86_64__)
    kl_emu_switch(&kl_emu.main, t->ctx);
#else
    swapcontext(&kl_emu.main, &t->ctx);
#endif
}

/* Makes t a fresh thread that starts in kl_emu_entry. */
static void kl_emu_start(kl_emu_thread *t)
{
#if defined(__x86_64__)
    /* What kl_emu_switch pops: six registers, then the return address
     * (kl_emu_entry, entered with the stack 8 bytes off a 16-byte boundary
     * as after a call; it never returns). */
    uintptr_t top = ((uintptr_t)t->stack + KL_EMU_STACK - 64) & ~(uintptr_t)15;
    void **sp = (void **)(top - 8 - 7 * 8);
    for (int i = 0; i < 6; i++)
        sp[i] = 0;
    sp[6] = (void *)kl_emu_entry;
    sp[7] = 0;
    t->ctx = sp;
#else
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = KL_EMU_STACK;
    t->ctx.uc_link = &kl_emu.main;
    makecontext(&t->ctx, kl_emu_entry, 0);
#endif
    t->state = KL_EMU_READY;
    t->shuffles = 0;
}

static void kl_emu_yield(int state)
{
    if (kl_emu.flat) {
        if (!kl_emu.error[0])
            snprintf(kl_emu.error, sizeof kl_emu.error, "a barrier or shuffle in a kernel run without coroutines");
        return;
    }
    kl_emu_thread *t = &kl_emu.t[kl_emu.cur];
    t->state = state;
    kl_emu_to_main(t);
}

static inline void __syncthreads(void)
{
    kl_emu_yield(KL_EMU_BARRIER);
}

/* A lane posts its value and waits for the warp; once all 32 have posted,
 * each reads its partner's. Posts alternate between two exchange rows (by
 * the lane's count of shuffles), so one wait is enough: a lane can post
 * to the same row again only after the warp's next wait, which every lane
 * reaches after it has read. */
template <typename T> static T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    if (mask != 0xffffffffu && !kl_emu.error[0])
        snprintf(kl_emu.error, sizeof kl_emu.error, "__shfl_xor_sync with a partial mask %#x", mask);
    unsigned tid = threadIdx.x, row = kl_emu.t[tid].shuffles++ & 1u;
    memcpy(&kl_emu.xchg[row][tid], &v, sizeof v);
    kl_emu_yield(KL_EMU_WARP); /* every lane has posted */
    T r;
    memcpy(&r, &kl_emu.xchg[row][(tid & ~31u) | ((tid & 31u) ^ (unsigned)lanemask)], sizeof r);
    return r;
}

/* A warp barrier: released, like a shuffle, when all 32 lanes wait. */
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    if (mask != 0xffffffffu && !kl_emu.error[0])
        snprintf(kl_emu.error, sizeof kl_emu.error, "__syncwarp with a partial mask %#x", mask);
    kl_emu_yield(KL_EMU_WARP);
}

static void kl_emu_entry(void)
{
    kl_emu.fn(kl_emu.kb, kl_emu.ka);
    kl_emu_thread *t = &kl_emu.t[kl_emu.cur];
    t->state = KL_EMU_DONE;
#if defined(__x86_64__)
    /* Nothing to return to: back to the scheduler for good. */
    kl_emu_to_main(t);
    __builtin_unreachable();
#endif
}

/* Frees the threads' stacks (before the object is closed). */
extern "C" void kl_emu_release(void)
{
    free(kl_emu.stacks);
    kl_emu.stacks = NULL;
    for (int i = 0; i < KL_EMU_MAX_BLOCK; i++)
        kl_emu.t[i].stack = NULL;
}

/* Runs fn over a grid of `grid` blocks of `block` threads. Returns 0, or
 * -1 with a message in err. */
extern "C" int kl_emu_run(kl_emu_fn fn, unsigned grid, unsigned block, void *const *kb, const kl_kargs *ka, int reverse,
                          char *err, size_t errlen)
{
    if (block < 1 || block > KL_EMU_MAX_BLOCK || grid < 1) {
        snprintf(err, errlen, "bad launch: %u blocks of %u threads", grid, block);
        return -1;
    }
    if (!kl_emu.stacks) {
        /* Address space only: a stack's pages are touched at its top. */
        if (!(kl_emu.stacks = (char *)malloc((size_t)KL_EMU_MAX_BLOCK * KL_EMU_STRIDE))) {
            snprintf(err, errlen, "out of memory for thread stacks");
            return -1;
        }
        for (int i = 0; i < KL_EMU_MAX_BLOCK; i++)
            kl_emu.t[i].stack = kl_emu.stacks + (size_t)i * KL_EMU_STRIDE;
    }
    kl_emu.fn = fn;
    kl_emu.kb = kb;
    kl_emu.ka = ka;
    kl_emu.error[0] = 0;
    gridDim.x = grid, gridDim.y = gridDim.z = 1;
    blockDim.x = block, blockDim.y = blockDim.z = 1;
    for (unsigned b = 0; b < grid; b++) {
        blockIdx.x = b, blockIdx.y = blockIdx.z = 0;
        for (unsigned i = 0; i < block; i++)
            kl_emu_start(&kl_emu.t[i]);
        for (;;) {
            for (unsigned j = 0; j < block; j++) {
                unsigned i = reverse ? block - 1 - j : j;
                if (kl_emu.t[i].state != KL_EMU_READY)
                    continue;
                kl_emu.cur = (int)i;
                threadIdx.x = i, threadIdx.y = threadIdx.z = 0;
                kl_emu_to_thread(&kl_emu.t[i]);
            }
            if (kl_emu.error[0]) {
                snprintf(err, errlen, "block %u: %s", b, kl_emu.error);
                return -1;
            }
            unsigned done = 0, barrier = 0;
            bool released = false;
            for (unsigned i = 0; i < block; i++) {
                done += kl_emu.t[i].state == KL_EMU_DONE;
                barrier += kl_emu.t[i].state == KL_EMU_BARRIER;
            }
            if (done == block)
                break;
            for (unsigned w = 0; w < block; w += 32) {
                unsigned at = 0, lanes = block - w < 32 ? block - w : 32;
                for (unsigned i = w; i < w + lanes; i++)
                    at += kl_emu.t[i].state == KL_EMU_WARP;
                if (at == 0)
                    continue;
                if (lanes < 32 || at < lanes) {
                    snprintf(err, errlen, "block %u: a warp shuffle in warp %u with %u of 32 lanes present", b, w / 32,
                             lanes < 32 ? lanes : at);
                    return -1;
                }
                for (unsigned i = w; i < w + lanes; i++)
                    kl_emu.t[i].state = KL_EMU_READY;
                released = true;
            }
            if (released)
                continue;
            if (barrier == block) {
                for (unsigned i = 0; i < block; i++)
                    kl_emu.t[i].state = KL_EMU_READY;
                continue;
            }
            snprintf(err, errlen, "block %u: __syncthreads reached by %u of %u threads (%u finished)", b, barrier, block, done);
            return -1;
        }
    }
    return 0;
}

/* The same launch for a kernel without barriers and shuffles (the
 * simulated device's choice, tests/simgpu/sim_module.c): each thread is a
 * plain call, in increasing order, with no coroutine to set up. */
extern "C" int kl_emu_run_flat(kl_emu_fn fn, unsigned grid, unsigned block, void *const *kb, const kl_kargs *ka,
                               int reverse, char *err, size_t errlen)
{
    (void)reverse;
    if (block < 1 || block > KL_EMU_MAX_BLOCK || grid < 1) {
        snprintf(err, errlen, "bad launch: %u blocks of %u threads", grid, block);
        return -1;
    }
    kl_emu.flat = 1;
    kl_emu.error[0] = 0;
    gridDim.x = grid, gridDim.y = gridDim.z = 1;
    blockDim.x = block, blockDim.y = blockDim.z = 1;
    threadIdx.y = threadIdx.z = 0;
    blockIdx.y = blockIdx.z = 0;
    for (unsigned b = 0; b < grid && !kl_emu.error[0]; b++) {
        blockIdx.x = b;
        for (unsigned i = 0; i < block; i++) {
            threadIdx.x = i;
            fn(kb, ka);
        }
    }
    kl_emu.flat = 0;
    if (kl_emu.error[0]) {
        snprintf(err, errlen, "%s", kl_emu.error);
        return -1;
    }
    return 0;
}

#endif
