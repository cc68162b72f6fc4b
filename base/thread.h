/* Kiln's helper threads, and the signals a user or a batch system sends
 * to stop a run (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2). */
#ifndef KILN_BASE_THREAD_H
#define KILN_BASE_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create for Kiln's helper threads (the loader's, the monitor,
 * the communication thread, compile and cache workers): the new thread
 * starts with the stop signals blocked, so that their handlers
 * (driver/train_preempt.c's, runtime/files/outfile_temps.c's) run on a
 * thread of the run's own, never inside a helper's wait or read. The
 * caller's mask is unchanged. pthread_create's result. */
int kl_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

/* Blocks the stop signals on the calling thread, the previous mask in
 * *old (NULL: not kept); kl_signals_restore puts it back, and a signal
 * that came meanwhile is handled then. For code that must not be
 * interrupted by a handler: oneDNN's JIT fp32 GEMM kernels point the
 * stack pointer at a heap workspace while they run (oneDNN issue
 * #4845), so a handler's signal frame there would be written over the
 * heap below it (runtime/cpu/cpu_dnnl.c). */
void kl_signals_block(sigset_t *old);
void kl_signals_restore(const sigset_t *old);

#endif
