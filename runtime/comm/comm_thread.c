/* The communication thread (comm_thread.h): a queue under one mutex, a
 * condition for "work posted" and one for "a job finished". */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm_thread.h"
#include "base/support.h"
#include "base/thread.h"

struct kl_comm_thread {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t posted, finished;
    KL_VEC(kl_comm_job *) queue; /* posted, not yet taken: queue.v[head..n) */
    int head;
    int running;                 /* jobs taken and not finished (0 or 1) */
    bool stop;
};

static void *thread_main(void *arg)
{
    kl_comm_thread *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->head == t->queue.n && !t->stop)
            pthread_cond_wait(&t->posted, &t->mu);
        if (t->head == t->queue.n)
            break;
        kl_comm_job *job = t->queue.v[t->head++];
        if (t->head == t->queue.n)
            t->head = t->queue.n = 0;
        t->running = 1;
        pthread_mutex_unlock(&t->mu);
        job->start = kl_now();
        job->run(job->arg);
        double end = kl_now();
        pthread_mutex_lock(&t->mu);
        job->end = end;
        job->done = true;
        t->running = 0;
        pthread_cond_broadcast(&t->finished);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

kl_comm_thread *kl_comm_thread_start(void)
{
    kl_comm_thread *t = kl_xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->posted, NULL);
    pthread_cond_init(&t->finished, NULL);
    int rc = kl_thread_create(&t->thread, thread_main, t);
    if (rc) {
        kl_error("cannot start the communication thread: %s", strerror(rc));
        pthread_cond_destroy(&t->posted);
        pthread_cond_destroy(&t->finished);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void kl_comm_thread_post(kl_comm_thread *t, kl_comm_job *job)
{
    job->done = false;
    job->start = job->end = 0;
    pthread_mutex_lock(&t->mu);
    kl_vec_push(t->queue, job);
    pthread_cond_signal(&t->posted);
    pthread_mutex_unlock(&t->mu);
}

double kl_comm_thread_wait(kl_comm_thread *t, kl_comm_job *job)
{
    double t0 = kl_now();
    pthread_mutex_lock(&t->mu);
    bool blocked = !job->done;
    while (!job->done)
        pthread_cond_wait(&t->finished, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return blocked ? kl_now() - t0 : 0;
}

double kl_comm_thread_wait_all(kl_comm_thread *t)
{
    double t0 = kl_now();
    pthread_mutex_lock(&t->mu);
    bool blocked = t->head < t->queue.n || t->running;
    while (t->head < t->queue.n || t->running)
        pthread_cond_wait(&t->finished, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return blocked ? kl_now() - t0 : 0;
}

void kl_comm_thread_stop(kl_comm_thread *t)
{
    if (!t)
        return;
    kl_comm_thread_wait_all(t);
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->posted);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    kl_vec_free(t->queue);
    pthread_cond_destroy(&t->posted);
    pthread_cond_destroy(&t->finished);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
