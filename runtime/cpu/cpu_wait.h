/* How the CPU backend's idle OpenMP threads wait, and a check that they
 * are not waiting for cores that other processes hold (cpu_wait.c). */
#ifndef KILN_CPU_WAIT_H
#define KILN_CPU_WAIT_H

#include <stdint.h>

/* At start-up, before anything else: unless the user chose how OpenMP
 * waits (OMP_WAIT_POLICY or GOMP_SPINCOUNT set), runs the program again
 * (execv of /proc/self/exe, once) with GOMP_SPINCOUNT=1000: idle threads
 * spin briefly, then sleep. libgomp reads it only when it loads, so it
 * must be in the environment before the process starts. Returns (without
 * a new run) when the user chose, after the new run, or when exec fails. */
void kl_cpu_wait_setup(char **argv);
/* How OpenMP waits in this process, for messages: "GOMP_SPINCOUNT=1000
 * (Kiln's default)", "OMP_WAIT_POLICY=active (yours)", ... (static). */
const char *kl_cpu_wait_policy(void);

/* The process's wall time, CPU time and the time its threads spent
 * runnable but waiting for a core (the run queues of
 * /proc/self/task/N/schedstat), for kl_cpu_wait_hint. */
typedef struct kl_cpu_wait_sample {
    double wall, cpu_s, runq_s;
} kl_cpu_wait_sample;
void kl_cpu_wait_sample_now(kl_cpu_wait_sample *s);
/* One line (caller frees) when threads > 1 and the process's threads
 * waited for a core more than a fifth of the time between a and b
 * (steps of them): the measured cause and what to try. NULL otherwise.
 * KILN_TEST_RUNQ_SHARE=F (a test hook) stands in for the measured share. */
char *kl_cpu_wait_hint(const kl_cpu_wait_sample *a, const kl_cpu_wait_sample *b, int threads, int64_t steps);

#endif
