/* Process CPU time (its CPU clock) and resident memory (/proc/self/statm)
 * (runtime/observe/hostmetrics.h). */
#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "hostmetrics.h"
#include "base/support.h"

int kl_host_sample_now(kl_host_sample *s)
{
    memset(s, 0, sizeof *s);
    s->wall = kl_now();
    /* CPU time from the process's CPU clock (nanoseconds; /proc/self/stat
     * counts in 10 ms ticks, too coarse for a window of a few steps). */
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts))
        return -1;
    s->cpu_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, rss = 0;
    bool ok = f && fscanf(f, "%lld %lld", &size, &rss) == 2;
    if (f)
        fclose(f);
    if (!ok)
        return -1;
    s->rss_bytes = rss * (int64_t)sysconf(_SC_PAGESIZE);
    return 0;
}

double kl_host_cpu_percent(const kl_host_sample *a, const kl_host_sample *b)
{
    double dt = b->wall - a->wall;
    return dt > 0 ? 100.0 * (b->cpu_s - a->cpu_s) / dt : 0;
}

int64_t kl_host_rss_peak(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (int64_t)kb * 1024;
}
