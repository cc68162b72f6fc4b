/* The communication thread: one thread that runs posted jobs (the
 * collectives of runtime/exec/overlap.c) one at a time, in the order they were
 * posted, while the posting thread goes on. A blocking MPI call on it
 * makes progress on its own, so a collective advances while the main
 * thread computes backward (MPI_THREAD_SERIALIZED suffices: the main
 * thread calls MPI only when no job is pending, kl_comm_thread_wait_all).
 *
 * A job that fails ends the job of every rank itself (comm.h's checked
 * collectives abort with the rank and the op), so a wait never returns
 * on a failed job. */
#ifndef KILN_COMM_THREAD_H
#define KILN_COMM_THREAD_H

#include <stdbool.h>

typedef struct kl_comm_job {
    void (*run)(void *arg);
    void *arg;
    /* Set by the thread: when run started and ended (kl_now() seconds),
     * and done once it has. Read them only after a wait for the job. */
    double start, end;
    bool done;
} kl_comm_job;

typedef struct kl_comm_thread kl_comm_thread;

/* NULL after reporting why the thread cannot start. */
kl_comm_thread *kl_comm_thread_start(void);
/* Queues job (its memory the caller's until a wait saw it done). */
void kl_comm_thread_post(kl_comm_thread *t, kl_comm_job *job);
/* Blocks until job is done; the seconds this thread was blocked. */
double kl_comm_thread_wait(kl_comm_thread *t, kl_comm_job *job);
/* Blocks until every posted job is done; the seconds blocked. */
double kl_comm_thread_wait_all(kl_comm_thread *t);
/* Waits for every posted job, then ends the thread. NULL is a no-op. */
void kl_comm_thread_stop(kl_comm_thread *t);

#endif
