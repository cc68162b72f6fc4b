/* The CPU backend's default thread count, a rule rather than a
 * measurement (a timed probe varies with the machine's load): one thread
 * per physical core this process may run on, as the kernel's topology
 * (sysfs, else /proc/cpuinfo) describes them; OMP_NUM_THREADS when set. */
#define _GNU_SOURCE
#include <dirent.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_cores.h"
#include "base/support.h"

/* (package, core) pairs seen, for counting distinct ones. */
typedef struct core_set {
    long pkg[4096], core[4096];
    int n;
} core_set;

static void core_add(core_set *s, long pkg, long core)
{
    for (int i = 0; i < s->n; i++)
        if (s->pkg[i] == pkg && s->core[i] == core)
            return;
    if (s->n < (int)KL_ARRAY_LEN(s->pkg)) {
        s->pkg[s->n] = pkg;
        s->core[s->n++] = core;
    }
}

static bool allowed(const cpu_set_t *mask, long cpu)
{
    return !mask || (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET((int)cpu, mask));
}

static bool read_long(const char *path, long *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fscanf(f, "%ld", v) == 1;
    fclose(f);
    return ok;
}

static int from_sysfs(const char *root, const cpu_set_t *mask)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/sys/devices/system/cpu", root);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    core_set *s = kl_xcalloc(1, sizeof *s);
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "cpu", 3))
            continue;
        long cpu = strtol(e->d_name + 3, &end, 10);
        if (end == e->d_name + 3 || *end || !allowed(mask, cpu))
            continue;
        char *pp = kl_xasprintf("%s/%s/topology/physical_package_id", dir, e->d_name);
        char *cp = kl_xasprintf("%s/%s/topology/core_id", dir, e->d_name);
        long pkg, core;
        if (read_long(pp, &pkg) && read_long(cp, &core))
            core_add(s, pkg, core);
        free(pp);
        free(cp);
    }
    closedir(d);
    int n = s->n;
    free(s);
    return n;
}

/* /proc/cpuinfo: blocks of "key : value" lines, one per logical CPU. */
static int from_cpuinfo(const char *root, const cpu_set_t *mask)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/proc/cpuinfo", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    core_set *s = kl_xcalloc(1, sizeof *s);
    char line[512];
    long cpu = -1, pkg = -1, core = -1;
    for (bool more = true; more;) {
        more = fgets(line, sizeof line, f) != NULL;
        const char *colon = more ? strchr(line, ':') : NULL;
        if (!more || !colon) { /* a blank line (or the end) closes a block */
            if (cpu >= 0 && pkg >= 0 && core >= 0 && allowed(mask, cpu))
                core_add(s, pkg, core);
            cpu = pkg = core = -1;
            continue;
        }
        long v = strtol(colon + 1, NULL, 10);
        if (!strncmp(line, "processor", 9))
            cpu = v;
        else if (!strncmp(line, "physical id", 11))
            pkg = v;
        else if (!strncmp(line, "core id", 7))
            core = v;
    }
    fclose(f);
    int n = s->n;
    free(s);
    return n;
}

int kl_cpu_physical_cores(const char *root, bool this_process)
{
    cpu_set_t set;
    const cpu_set_t *mask = this_process && sched_getaffinity(0, sizeof set, &set) == 0 ? &set : NULL;
    int n = from_sysfs(root, mask);
    return n > 0 ? n : from_cpuinfo(root, mask);
}

/* OMP_NUM_THREADS (its first count), as OpenMP reads it; 0 when unset or
 * not a count. */
static int env_threads(void)
{
    const char *e = getenv("OMP_NUM_THREADS");
    if (!e)
        return 0;
    char *end;
    long t = strtol(e, &end, 10);
    return end != e && (*end == 0 || *end == ',') && t > 0 && t <= 4096 ? (int)t : 0;
}

int kl_cpu_default_threads(const char **rule)
{
    int n = env_threads();
    if (n > 0) {
        *rule = "OMP_NUM_THREADS";
        return n;
    }
    if ((n = kl_cpu_physical_cores("", true)) > 0) {
        *rule = "physical cores";
        return n;
    }
    /* No topology to read (an unusual container): every logical CPU. */
    *rule = "logical CPUs";
    n = omp_get_num_procs();
    return n > 0 ? n : 1;
}
