/* Collectives overlapped with compute (the executor's side of the
 * schedule pass's early collectives): an exec with an overlap posts each
 * collective step to the session's communication thread and goes on with
 * the next steps; before a step that touches the memory a pending
 * collective reads or writes, it waits for that collective, and a run
 * ends only after all of them (so every collective of a run is done and
 * the main thread may call MPI between runs).
 *
 * What a posted collective reads is fixed when it is posted, so the
 * steps after it may reuse that memory at once: all_reduce and
 * rank_broadcast copy their operand into their result first (then work
 * there in place), reduce_scatter and all_gather read a copy of theirs.
 * The values are those of the synchronous path, bit for bit: the same
 * MPI calls on the same bytes in the same order on every rank.
 *
 * Without a thread (t NULL: a device backend, whose collectives run on
 * its communication stream), a collective is enqueued at once, reading its
 * operand in place, so the memory of both its operand and its result is
 * pending until a step that touches either makes the compute stream wait
 * (the backend's collective_wait). */
#ifndef KILN_OVERLAP_H
#define KILN_OVERLAP_H

#include "runtime/comm/comm_thread.h"
#include "session.h"

typedef struct kl_overlap kl_overlap;

/* Runs collective step of e, reading src in place of its operand
 * (session.c's run_collective). */
typedef void (*kl_overlap_run_fn)(kl_exec *e, int step, const void *src);

/* The overlap of e's collective steps on thread t. */
kl_overlap *kl_overlap_new(kl_exec *e, kl_comm_thread *t, kl_overlap_run_fn run);
void kl_overlap_free(kl_overlap *o);
/* Before step i: waits for the pending collectives whose memory step i
 * touches. */
void kl_overlap_before(kl_overlap *o, int i);
/* Posts collective step i to the thread. */
void kl_overlap_post(kl_overlap *o, int i);
/* Waits for every pending collective: the end of a run. */
void kl_overlap_drain(kl_overlap *o);

#endif
