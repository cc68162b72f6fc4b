/* A preemption signal never lands inside oneDNN's fp32 GEMM
 * (base/thread.h). Its JIT kernels run with the stack pointer in a heap
 * workspace (oneDNN issue #4845; here whenever K exceeds the kernel's
 * stack capacity of 84), so a signal handler's frame would be written
 * over the heap below it: a run preempted by `kill -USR1` at a random
 * moment died about once in 150 with glibc's "corrupted size vs.
 * prev_size" (tests/ckpt/preempt.sh's "SIGUSR1 from outside").
 *
 * A helper thread sends SIGUSR1 to the process every 20 us while the
 * main thread runs the backend's fp32 GEMMs through oneDNN (64 x 16 x
 * 784, the tiny model's first layer) for 0.4 s, on 1 and on 2 threads.
 * The handler notes where its own frame is: on the main thread's stack,
 * or anywhere else (the heap, or an OpenMP thread's stack: those block
 * the signals for good). Fails when any frame was elsewhere, when fewer
 * than 20 signals were handled (nothing would have been tested), or when
 * the GEMM's result is wrong. Exits 77 (skipped) where oneDNN's sgemm
 * cannot run (no libdnnl.so.2, or no AVX-512). Before the fix: hundreds
 * of frames on the heap in each run here. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/support.h"
#include "base/thread.h"
#include "runtime/exec/backend.h"

static uintptr_t stack_lo, stack_hi;
static atomic_long handled, elsewhere;
static atomic_bool stop;

static void on_usr1(int sig)
{
    (void)sig;
    volatile char here = 0;
    uintptr_t p = (uintptr_t)&here;
    atomic_fetch_add(&handled, 1);
    if (p < stack_lo || p >= stack_hi)
        atomic_fetch_add(&elsewhere, 1);
}

static void *sender(void *arg)
{
    (void)arg;
    struct timespec d = {0, 20000};
    while (!atomic_load(&stop)) {
        kill(getpid(), SIGUSR1);
        nanosleep(&d, NULL);
    }
    return NULL;
}

/* One thread count: 0 when every handled signal's frame was on the main
 * thread's stack and the GEMMs were right; -1 with a message otherwise;
 * 77 when oneDNN's sgemm is not there. */
static int run(int threads)
{
    kl_cpu_options co = {.threads = threads, .quiet = true, .fp32_gemm = "onednn"};
    kl_backend *be = kl_cpu_backend_new(&co);
    if (!be)
        return 77;
    enum { M = 64, N = 16, K = 784 };
    float *a = kl_xmalloc(sizeof(float) * M * K), *b = kl_xmalloc(sizeof(float) * K * N);
    float *c = kl_xmalloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((i * 7) % 13) / 13.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((i * 5) % 11) / 11.0f;
    kl_gemm g = {.dtype = IR_F32, .out_dtype = IR_F32, .m = M, .n = N, .k = K, .batch = 1, .alpha = 1, .beta = 0};
    atomic_store(&handled, 0);
    atomic_store(&elsewhere, 0);
    atomic_store(&stop, false);
    pthread_t t;
    if (kl_thread_create(&t, sender, NULL))
        kl_panic("cannot start the sender thread");
    int calls = 0;
    for (double t0 = kl_now(); kl_now() - t0 < 0.4; calls++)
        be->ops->gemm(be, &g, a, b, c);
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    /* The last call's C[i][j] against a sum in f64 (k * 2^-23 relative). */
    int bad = 0;
    for (int i = 0; i < M && !bad; i++)
        for (int j = 0; j < N && !bad; j++) {
            double want = 0;
            for (int p = 0; p < K; p++)
                want += (double)a[i * K + p] * b[p * N + j];
            if (fabs(c[i * N + j] - want) > K * 0x1p-23 * want + 1e-30) {
                printf("FAIL: %d threads: C[%d][%d] = %.9g, want %.9g\n", threads, i, j, c[i * N + j], want);
                bad = 1;
            }
        }
    free(a);
    free(b);
    free(c);
    be->ops->destroy(be);
    long h = atomic_load(&handled), e = atomic_load(&elsewhere);
    if (e)
        printf("FAIL: %d thread%s: %ld of %ld signals were handled off the main thread's stack (%d GEMMs)\n", threads,
               threads == 1 ? "" : "s", e, h, calls);
    else if (h < 20)
        printf("FAIL: %d thread%s: only %ld signals were handled in %d GEMMs\n", threads, threads == 1 ? "" : "s", h,
               calls);
    else
        printf("ok: %d thread%s: %ld signals during %d oneDNN sgemms, every handler on the main thread's stack\n",
               threads, threads == 1 ? "" : "s", h, calls);
    return e || h < 20 || bad ? -1 : 0;
}

int main(void)
{
    pthread_attr_t attr;
    void *lo;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) || pthread_attr_getstack(&attr, &lo, &size))
        kl_panic("cannot find the main thread's stack");
    pthread_attr_destroy(&attr);
    stack_lo = (uintptr_t)lo;
    stack_hi = stack_lo + size;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    int one = run(1);
    if (one == 77) {
        printf("SKIP: oneDNN's sgemm cannot run here (no libdnnl.so.2, or no AVX-512)\n");
        return 77;
    }
    int two = run(2);
    return one || two ? 1 : 0;
}
