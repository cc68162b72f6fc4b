/* A monitor thread (runtime/observe/monitor.c): every interval, the process's CPU
 * utilisation and resident memory (hostmetrics.h) and, on a GPU run, the
 * GPU's readings from NVML (utilisation, memory used, power, temperature,
 * SM and memory clocks, throttle reasons), which is opened with dlopen:
 * without it, one notice and host readings alone.
 *
 * The thread only records; the training loop drains the samples between
 * steps (into the trace's counter tracks, the --metrics records, the
 * TensorBoard scalars and the summary), so no writer is shared. */
#ifndef KILN_MONITOR_H
#define KILN_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kl_monitor_reading {
    double t;              /* kl_now() */
    double cpu_percent;    /* since the previous sample; 100 = one core */
    int64_t rss_bytes;
    bool gpu;              /* the GPU fields below were read */
    double gpu_busy;       /* percent of the interval a kernel ran */
    double gpu_memory_busy;/* percent of the interval memory was read or written */
    int64_t gpu_mem_used, gpu_mem_total;
    double power_w, temp_c;
    int sm_clock_mhz, mem_clock_mhz;
    uint64_t throttle;     /* NVML's clocks-throttle-reason bits */
} kl_monitor_reading;

typedef struct kl_monitor kl_monitor;

/* Seconds between samples in a training run. */
#define KL_MONITOR_INTERVAL 0.25

/* Starts sampling every interval_s seconds; cuda_device >= 0: also that
 * CUDA device's NVML readings (matched by PCI bus id). quiet: no notice
 * when NVML is missing. NULL when the thread cannot start (reported). */
kl_monitor *kl_monitor_start(double interval_s, int cuda_device, bool quiet);
/* The samples taken since the last drain, oldest first (*out: the caller
 * frees; NULL when none). */
int kl_monitor_drain(kl_monitor *s, kl_monitor_reading **out);
/* Whether NVML readings are being taken. */
bool kl_monitor_has_gpu(const kl_monitor *s);
/* Stops the thread and frees s (samples not drained are dropped); NULL
 * is fine. */
void kl_monitor_stop(kl_monitor *s);

/* Run-long aggregates of drained samples. */
typedef struct kl_monitor_stats {
    int64_t n, ngpu;
    double cpu_sum, gpu_busy_sum, power_sum;
    int64_t rss_peak, gpu_mem_peak, gpu_mem_total;
    uint64_t throttle_any;
} kl_monitor_stats;
void kl_monitor_stats_add(kl_monitor_stats *st, const kl_monitor_reading *s);

#endif
