/* Preemption: a batch system (Slurm, Kubernetes) stops a job with
 * SIGTERM and kills it a grace period later; SIGUSR1 is what Slurm's
 * --signal sends ahead of a time limit. With --save, both are caught
 * while the run trains: the handler only records the signal
 * (async-signal-safe), and the training loop asks at each step's
 * boundary (train.c), saves --save there, and exits with
 * TRAIN_EXIT_PREEMPTED, so the same command with --resume latest
 * continues exactly. A second signal while the first is pending is the
 * same request. Installed over the default action, the handlers keep
 * outfile_temps.c's (which it installs only over a default) away.
 * Kiln's helper threads start with these signals blocked
 * (kl_thread_create), but a thread OpenMP or a library starts may still
 * take one: the flag is a lock-free atomic, which a handler on any
 * thread may set and the loop on another read (a volatile sig_atomic_t
 * is only safe within one thread).
 *
 * A test hook: KILN_TEST_SIGNAL_AT=STEP raises SIGTERM (the real
 * handler's path) as optimizer step STEP (1-based) begins, so that a
 * test can preempt a run at a step it chose. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

static atomic_int pending;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the preemption flag must be lock-free to be set in a signal handler");
static struct sigaction saved_term, saved_usr1;
static bool armed;

static void on_preempt(int sig)
{
    int e = errno;
    atomic_store(&pending, sig);
    errno = e;
}

void train_preempt_arm(void)
{
    if (armed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_preempt;
    /* A step's system calls (reads of data, writes of a checkpoint) go
     * on: the loop acts at the boundary. */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &saved_term);
    sigaction(SIGUSR1, &sa, &saved_usr1);
    armed = true;
}

void train_preempt_disarm(void)
{
    if (!armed)
        return;
    sigaction(SIGTERM, &saved_term, NULL);
    sigaction(SIGUSR1, &saved_usr1, NULL);
    armed = false;
}

int train_preempt_pending(void)
{
    return atomic_load(&pending);
}

void train_preempt_test_hook(int64_t step)
{
    const char *s = getenv("KILN_TEST_SIGNAL_AT");
    if (armed && s && *s && strtoll(s, NULL, 10) == step)
        raise(SIGTERM);
}
