/* The process's own CPU time and resident memory
 * (runtime/observe/hostmetrics.c): for the progress records, TensorBoard and the
 * summary. */
#ifndef KILN_HOSTMETRICS_H
#define KILN_HOSTMETRICS_H

#include <stdint.h>

typedef struct kl_host_sample {
    double wall;       /* kl_now() */
    double cpu_s;      /* user + system CPU seconds of every thread */
    int64_t rss_bytes; /* resident set size */
} kl_host_sample;

/* Reads the process CPU clock and /proc/self/statm; -1 when they cannot be read
 * (the sample is then zero). */
int kl_host_sample_now(kl_host_sample *s);
/* The resident set's high-water mark (VmHWM in /proc/self/status), or 0. */
int64_t kl_host_rss_peak(void);
/* CPU utilisation between two samples, in percent of one core (400 is
 * four busy cores, as top shows it); 0 when no time passed. */
double kl_host_cpu_percent(const kl_host_sample *a, const kl_host_sample *b);

#endif
