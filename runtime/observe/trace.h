/* A timeline in the Chrome trace format (chrome://tracing, Perfetto):
 * one complete event ("ph": "X") per kernel, GEMM, data wait and
 * evaluation, written as the run goes to a temporary that replaces the
 * file when it closes (runtime/observe/trace.c, through outfile.h). */
#ifndef KILN_TRACE_H
#define KILN_TRACE_H

#include <stdbool.h>
#include <stdio.h>

typedef struct kl_trace kl_trace;

/* tracks (tid); COMM: the collectives on the communication thread;
 * STAGE0 + s: pipeline stage s's passes and transfers (named by
 * kl_trace_track) */
enum { KL_TRACE_STEPS = 1, KL_TRACE_KERNELS = 2, KL_TRACE_DATA = 3, KL_TRACE_COMM = 4, KL_TRACE_STAGE0 = 16 };

/* NULL after reporting why the file cannot be written. */
kl_trace *kl_trace_open(const char *path);
/* An event from start to end (kl_now() seconds) on a track. */
void kl_trace_event(kl_trace *t, const char *name, const char *cat, int track, double start, double end);
/* Names a track (its "thread_name" metadata). NULL t is a no-op. */
void kl_trace_track(kl_trace *t, int track, const char *name);
/* A counter track's value at time ts (kl_now() seconds): "cpu %", "GPU
 * memory GiB", ... each name its own track ("ph": "C"). */
void kl_trace_counter(kl_trace *t, const char *name, double ts, double value);
/* Ends the timeline and puts the file in place; -1 after an error naming
 * the file (a failed write). NULL is a no-op. */
int kl_trace_close(kl_trace *t);

#endif
