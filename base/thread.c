/* Helper threads and the stop signals (base/thread.h). */
#include "thread.h"

static void stop_signals(sigset_t *set)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    sigemptyset(set);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaddset(set, sigs[i]);
}

void kl_signals_block(sigset_t *old)
{
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

void kl_signals_restore(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

int kl_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    /* A new thread inherits the mask it is created under. */
    sigset_t old;
    kl_signals_block(&old);
    int rc = pthread_create(thread, NULL, fn, arg);
    kl_signals_restore(&old);
    return rc;
}
