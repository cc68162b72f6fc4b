/* OpenMP's idle threads on a shared machine. libgomp's default lets a
 * thread that finished its share spin for a while (300,000 rounds)
 * before it sleeps; when other processes hold the cores, the spinning
 * threads take the core the thread still working needs, and a step can
 * take several times as long as on one thread. Kiln's default bounds
 * the spinning (GOMP_SPINCOUNT=1000: fast hand-offs on an idle machine,
 * sleeping soon on a busy one), and after warm-up a run that sees its
 * threads wait for cores says so, with the share it measured. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_wait.h"
#include "base/support.h"

#define KILN_SPINCOUNT "1000"
/* Set in the new run: Kiln chose the spin count (and exec is not repeated). */
#define KILN_WAIT_MARK "KILN_CPU_WAIT"

void kl_cpu_wait_setup(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv(KILN_WAIT_MARK) || !argv || !argv[0])
        return;
    if (setenv("GOMP_SPINCOUNT", KILN_SPINCOUNT, 1) || setenv(KILN_WAIT_MARK, "1", 1))
        return;
    execv("/proc/self/exe", argv);
    /* No new run: this one keeps libgomp's own default; the variables
     * stay for the programs it starts. */
}

const char *kl_cpu_wait_policy(void)
{
    static char buf[96];
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (getenv(KILN_WAIT_MARK) && spin && !strcmp(spin, KILN_SPINCOUNT) && !policy)
        return "GOMP_SPINCOUNT=" KILN_SPINCOUNT " (Kiln's default)";
    if (policy)
        snprintf(buf, sizeof buf, "OMP_WAIT_POLICY=%.40s (yours)", policy);
    else if (spin)
        snprintf(buf, sizeof buf, "GOMP_SPINCOUNT=%.40s (yours)", spin);
    else
        return "libgomp's default spinning";
    return buf;
}

/* Seconds every thread of the process spent runnable, waiting for a core. */
static double runq_seconds(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    double sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
        FILE *f = fopen(path, "r");
        unsigned long long run = 0, wait = 0;
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2)
            sum += (double)wait * 1e-9;
        if (f)
            fclose(f);
    }
    closedir(d);
    return sum;
}

void kl_cpu_wait_sample_now(kl_cpu_wait_sample *s)
{
    struct timespec ts;
    s->wall = kl_now();
    s->cpu_s = clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) ? 0 : (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    s->runq_s = runq_seconds();
}

char *kl_cpu_wait_hint(const kl_cpu_wait_sample *a, const kl_cpu_wait_sample *b, int threads, int64_t steps)
{
    double wall = b->wall - a->wall;
    if (threads < 2 || wall <= 0 || steps < 1)
        return NULL;
    /* Of the time the threads had (wall x threads), the share spent waiting. */
    double share = (b->runq_s - a->runq_s) / (wall * threads);
    const char *test = getenv("KILN_TEST_RUNQ_SHARE");
    if (test && *test)
        share = atof(test);
    if (!(share > 0.2))
        return NULL;
    double cores = (b->cpu_s - a->cpu_s) / wall;
    return kl_xasprintf("hint: over %lld steps (%.1f ms each) the %d threads waited for a core %.0f%% of the time "
                        "and ran on %.2f cores: other processes hold the cores, and each step waits for its "
                        "slowest thread (OpenMP waiting: %s) ---> try --threads 1",
                        (long long)steps, 1e3 * wall / (double)steps, threads, 100 * share, cores,
                        kl_cpu_wait_policy());
}
