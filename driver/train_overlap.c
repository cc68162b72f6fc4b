/* Overlap of collectives with backward, as the run reports it: whether
 * the collectives run on the communication thread (runtime/exec/overlap.h),
 * and at the end how long they took and how much of that the executor
 * did not wait for (hidden behind compute). Rank 0's figures. */
#include <stdio.h>

#include "trainer.h"

void train_overlap_print_start(const trainer *t)
{
    if (t->world == 1)
        return;
    if (!t->cfg.overlap)
        printf("overlap: off (collectives in program order; overlap = off)\n");
    else if (t->pp > 1)
        printf("overlap: off (pipeline_parallel: collectives in program order, between the stages' transfers)\n");
    else if (!kl_comm_serialized(t->comm))
        printf("overlap: off (MPI does not provide MPI_THREAD_SERIALIZED: collectives in program order)\n");
    else
        printf("overlap: on (collectives on a communication thread from the end of their bucket's backward, "
               "waited for before their first reader)\n");
}

/* Per optimizer step of this run: collective seconds, seconds exposed (waited for). */
static void per_step(const trainer *t, int64_t steps, double *comm, double *exposed, double *calls)
{
    const kl_exec *e = t->train;
    double n = steps > 0 ? (double)steps : 1.0;
    *comm = e->comm_seconds / n;
    *exposed = e->comm_waited / n;
    *calls = (double)e->comm_calls / n;
}

void train_overlap_print_summary(const trainer *t, int64_t steps)
{
    if (t->world == 1 || !t->train->comm_calls)
        return;
    double comm, exposed, calls;
    per_step(t, steps, &comm, &exposed, &calls);
    double hidden = comm - exposed;
    printf("collectives: %.3f ms/step in %.0f calls/step (rank 0), %.3f ms/step exposed (waited for), %.3f ms/step (%.0f%%) "
           "hidden behind compute (overlap %s)\n",
           1e3 * comm, calls, 1e3 * exposed, 1e3 * hidden, comm > 0 ? 100 * hidden / comm : 0.0,
           t->train->overlap ? "on" : "off");
}

void train_overlap_json(const trainer *t, int64_t steps, kl_buf *j)
{
    if (t->world == 1)
        return;
    double comm, exposed, calls;
    per_step(t, steps, &comm, &exposed, &calls);
    kl_buf_printf(j, ", \"overlap\": %s, \"collective_ms_per_step\": %.4f, \"collective_exposed_ms_per_step\": %.4f, "
                     "\"collective_calls_per_step\": %.2f",
                  t->train->overlap ? "true" : "false", 1e3 * comm, 1e3 * exposed, calls);
}

void train_overlap_window(trainer *t, int64_t steps, char *out, size_t n)
{
    out[0] = 0;
    if (t->world == 1 || steps <= 0)
        return;
    const kl_exec *e = t->train;
    double comm = e->comm_seconds - t->comm_logged, exposed = e->comm_waited - t->waited_logged;
    t->comm_logged = e->comm_seconds;
    t->waited_logged = e->comm_waited;
    snprintf(out, n, ", \"collective_ms\": %.4f, \"collective_exposed_ms\": %.4f", 1e3 * comm / (double)steps,
             1e3 * exposed / (double)steps);
}
