/* The monitor thread (runtime/observe/monitor.h). NVML and the driver are opened
 * with dlopen and called through pointers declared here by the ABI's
 * plain types, so this compiles in builds without the CUDA toolkit. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "monitor.h"
#include "hostmetrics.h"
#include "base/support.h"
#include "base/thread.h"
#include "runtime/cpu/simgpu.h"

typedef struct nvml_utilization {
    unsigned gpu, memory;
} nvml_utilization;
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;

typedef struct nvml_api {
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_pci)(const char *bus, void **dev);
    int (*by_index)(unsigned i, void **dev);
    int (*utilization)(void *dev, nvml_utilization *u);
    int (*memory)(void *dev, nvml_memory *m);
    int (*power)(void *dev, unsigned *mw);
    int (*temperature)(void *dev, int sensor, unsigned *c);
    int (*clock)(void *dev, int type, unsigned *mhz);
    int (*throttle)(void *dev, unsigned long long *bits);
} nvml_api;

enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_TEMPERATURE_GPU = 0 };

struct kl_monitor {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    double interval;
    KL_VEC(kl_monitor_reading) pending;
    kl_host_sample prev;
    void *nvml_lib;
    nvml_api nv;
    void *dev; /* NULL: no GPU readings */
};

/* The PCI bus id of CUDA device ordinal, for NVML (which numbers devices
 * in PCI order, not CUDA's order). 0, or -1. */
static int cuda_bus_id(int ordinal, char *bus, int n)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -1;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
    int (*pci)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetPCIBusId");
    int dev;
    int rc = init && get && pci && !init(0) && !get(&dev, ordinal) && !pci(bus, n, dev) ? 0 : -1;
    dlclose(h);
    return rc;
}

/* Opens NVML for CUDA device ordinal; 0, or -1 with why. */
static int open_nvml(kl_monitor *s, int ordinal, char *why, size_t n)
{
    if (kl_simgpu_wanted()) { /* the simulated device's NVML, or none */
        static const char *const names[] = {"libnvidia-ml.so.1", NULL};
        if (!(s->nvml_lib = kl_simgpu_dlopen(names, why, n)))
            return -1;
    } else if (!(s->nvml_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
        snprintf(why, n, "%s", dlerror());
        return -1;
    }
    nvml_api *a = &s->nv;
#define SYM(field, name) a->field = (__typeof__(a->field))dlsym(s->nvml_lib, name)
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(utilization, "nvmlDeviceGetUtilizationRates");
    SYM(memory, "nvmlDeviceGetMemoryInfo");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(temperature, "nvmlDeviceGetTemperature");
    SYM(clock, "nvmlDeviceGetClockInfo");
    SYM(throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
#undef SYM
    if (!a->init || !a->shutdown || !a->by_index || !a->utilization || !a->memory) {
        snprintf(why, n, "libnvidia-ml lacks a call Kiln uses");
        return -1;
    }
    int r = a->init();
    if (r) {
        snprintf(why, n, "nvmlInit failed (status %d)", r);
        return -1;
    }
    char bus[64];
    if (!(a->by_pci && cuda_bus_id(ordinal, bus, (int)sizeof bus) == 0 && a->by_pci(bus, &s->dev) == 0) &&
        a->by_index((unsigned)ordinal, &s->dev)) {
        snprintf(why, n, "NVML does not know CUDA device %d", ordinal);
        a->shutdown();
        s->dev = NULL;
        return -1;
    }
    return 0;
}

static void take(kl_monitor *s, kl_monitor_reading *x)
{
    memset(x, 0, sizeof *x);
    kl_host_sample h;
    kl_host_sample_now(&h);
    x->t = h.wall;
    x->cpu_percent = kl_host_cpu_percent(&s->prev, &h);
    x->rss_bytes = h.rss_bytes;
    s->prev = h;
    if (!s->dev)
        return;
    nvml_api *a = &s->nv;
    nvml_utilization u;
    nvml_memory m;
    if (a->utilization(s->dev, &u) || a->memory(s->dev, &m))
        return;
    x->gpu = true;
    x->gpu_busy = u.gpu;
    x->gpu_memory_busy = u.memory;
    x->gpu_mem_used = (int64_t)m.used;
    x->gpu_mem_total = (int64_t)m.total;
    unsigned v;
    unsigned long long bits;
    if (a->power && !a->power(s->dev, &v))
        x->power_w = v / 1000.0;
    if (a->temperature && !a->temperature(s->dev, NVML_TEMPERATURE_GPU, &v))
        x->temp_c = v;
    if (a->clock && !a->clock(s->dev, NVML_CLOCK_SM, &v))
        x->sm_clock_mhz = (int)v;
    if (a->clock && !a->clock(s->dev, NVML_CLOCK_MEM, &v))
        x->mem_clock_mhz = (int)v;
    if (a->throttle && !a->throttle(s->dev, &bits))
        x->throttle = bits;
}

static void *run(void *arg)
{
    kl_monitor *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + s->interval;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &until) != ETIMEDOUT)
            ;
        kl_monitor_reading x;
        pthread_mutex_unlock(&s->lock);
        take(s, &x);
        pthread_mutex_lock(&s->lock);
        kl_vec_push(s->pending, x);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

kl_monitor *kl_monitor_start(double interval_s, int cuda_device, bool quiet)
{
    kl_monitor *s = kl_xcalloc(1, sizeof *s);
    s->interval = interval_s > 0 ? interval_s : 0.5;
    kl_host_sample_now(&s->prev);
    if (cuda_device >= 0) {
        char why[300];
        if (open_nvml(s, cuda_device, why, sizeof why)) {
            if (!quiet)
                kl_fprintf_escaped(stderr, "kiln: no GPU readings (NVML: %s); sampling the host only\n", why);
            s->dev = NULL;
        }
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (kl_thread_create(&s->thread, run, s)) {
        kl_error("cannot start the monitor thread");
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        if (s->dev)
            s->nv.shutdown();
        free(s);
        return NULL;
    }
    return s;
}

int kl_monitor_drain(kl_monitor *s, kl_monitor_reading **out)
{
    *out = NULL;
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    int n = s->pending.n;
    if (n) {
        *out = kl_xmalloc(sizeof **out * (size_t)n);
        memcpy(*out, s->pending.v, sizeof **out * (size_t)n);
        s->pending.n = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

bool kl_monitor_has_gpu(const kl_monitor *s)
{
    return s && s->dev;
}

void kl_monitor_stop(kl_monitor *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    if (s->dev)
        s->nv.shutdown();
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    kl_vec_free(s->pending);
    free(s);
}

void kl_monitor_stats_add(kl_monitor_stats *st, const kl_monitor_reading *s)
{
    st->n++;
    st->cpu_sum += s->cpu_percent;
    st->rss_peak = s->rss_bytes > st->rss_peak ? s->rss_bytes : st->rss_peak;
    if (!s->gpu)
        return;
    st->ngpu++;
    st->gpu_busy_sum += s->gpu_busy;
    st->power_sum += s->power_w;
    st->gpu_mem_peak = s->gpu_mem_used > st->gpu_mem_peak ? s->gpu_mem_used : st->gpu_mem_peak;
    st->gpu_mem_total = s->gpu_mem_total;
    st->throttle_any |= s->throttle;
}
